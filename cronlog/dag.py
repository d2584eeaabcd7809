"""The DAG rules: trigger-rule outcomes, cycles, downstream sets, the first tasks of a run.

Pure functions over task names and states; ``attempts.advance_run`` applies them to a run.
Trigger rules follow Airflow's (docs "DAGs" → "Trigger Rules", and its TriggerRuleDep):
outcomes are decided as early as the upstream states allow, and an upstream ``cancelled``
counts as ``failed``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum

from cronlog.model import JobSpec, TaskSpec, TriggerRule


class Upstream(StrEnum):
    """An upstream task's outcome as trigger rules see it."""

    SUCCESS = "success"
    FAILED = "failed"
    """failed, upstream_failed or cancelled."""
    SKIPPED = "skipped"
    RUNNING = "running"
    """Not ended yet (pending, ready, claimed, waiting for a retry)."""


class RuleOutcome(StrEnum):
    """What a trigger rule says for a task given its upstream outcomes."""

    WAIT = "wait"
    RUN = "run"
    SKIP = "skipped"
    UPSTREAM_FAILED = "upstream_failed"


def rule_outcome(rule: TriggerRule, upstream: Iterable[Upstream]) -> RuleOutcome:
    """Return what ``rule`` decides for a task whose upstream tasks are ``upstream``.

    Args:
        rule: the task's trigger rule.
        upstream: the outcome of each upstream task (empty for a root: it runs).
    """
    ups = list(upstream)
    if rule is TriggerRule.ALWAYS or not ups:
        return RuleOutcome.RUN
    n = len(ups)
    ok, bad, skip = (
        ups.count(Upstream.SUCCESS),
        ups.count(Upstream.FAILED),
        ups.count(Upstream.SKIPPED),
    )
    done = ok + bad + skip == n
    match rule:
        case TriggerRule.ALL_SUCCESS:
            if bad:
                return RuleOutcome.UPSTREAM_FAILED
            if skip:
                return RuleOutcome.SKIP
            return RuleOutcome.RUN if done else RuleOutcome.WAIT
        case TriggerRule.ALL_FAILED:
            if ok or skip:
                return RuleOutcome.SKIP
            return RuleOutcome.RUN if done else RuleOutcome.WAIT
        case TriggerRule.ALL_DONE:
            return RuleOutcome.RUN if done else RuleOutcome.WAIT
        case TriggerRule.ONE_SUCCESS:
            if ok:
                return RuleOutcome.RUN
            if done:
                return RuleOutcome.SKIP if skip == n else RuleOutcome.UPSTREAM_FAILED
            return RuleOutcome.WAIT
        case TriggerRule.ONE_FAILED:
            if bad:
                return RuleOutcome.RUN
            return RuleOutcome.SKIP if done else RuleOutcome.WAIT
        case TriggerRule.NONE_FAILED:
            if bad:
                return RuleOutcome.UPSTREAM_FAILED
            return RuleOutcome.RUN if done else RuleOutcome.WAIT
        case TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS:
            if bad:
                return RuleOutcome.UPSTREAM_FAILED
            if not done:
                return RuleOutcome.WAIT
            return RuleOutcome.RUN if ok else RuleOutcome.SKIP
    raise ValueError(f"unknown trigger rule {rule!r}")


def find_cycle(deps: Mapping[str, tuple[str, ...]]) -> list[str] | None:
    """Return one dependency cycle as a path ``[a, b, ..., a]`` (a depends on b ...), or None.

    Args:
        deps: task name → names it depends on (unknown names are ignored here).
    """
    white, grey, black = 0, 1, 2
    color = dict.fromkeys(deps, white)
    for root in deps:
        if color[root] != white:
            continue
        path: list[str] = [root]
        stack = [iter(deps[root])]
        color[root] = grey
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                stack.pop()
                color[path.pop()] = black
                continue
            if nxt not in color:
                continue
            if color[nxt] == grey:
                return [*path[path.index(nxt) :], nxt]
            if color[nxt] == white:
                color[nxt] = grey
                path.append(nxt)
                stack.append(iter(deps[nxt]))
    return None


def wiring(
    spec: JobSpec, run_tasks: Iterable[str]
) -> dict[str, tuple[TriggerRule, tuple[str, ...]]]:
    """Return task → (trigger rule, upstream tasks inside the run) for a run's tasks.

    A run started before its job's DAG changed (or a replay run of one task) holds tasks the
    current definition may not connect: only dependencies inside the run count, and a task
    the definition lacks is a root with ``all_success``. Computed once per decision: one dict
    over the definition instead of a search per task.
    """
    names = list(run_tasks)
    inside = set(names)
    specs = {t.name: t for t in spec.task_specs}
    out: dict[str, tuple[TriggerRule, tuple[str, ...]]] = {}
    for name in names:
        t = specs.get(name)
        out[name] = (
            (TriggerRule.ALL_SUCCESS, ())
            if t is None
            else (t.trigger_rule, tuple(u for u in t.depends_on if u in inside))
        )
    return out


def initially_ready(spec: JobSpec, run_tasks: tuple[str, ...]) -> tuple[str, ...]:
    """Return the tasks of a new run that are ready at once, in definition order.

    Those with no upstream inside the run, and those with rule ``always``; at most
    ``spec.max_active_tasks`` of them (the rest wait, pending, for a free slot).
    """
    wired = wiring(spec, run_tasks)
    ready = [t for t in run_tasks if not wired[t][1] or wired[t][0] is TriggerRule.ALWAYS]
    return tuple(ready[: max(1, spec.max_active_tasks)])


def downstream_of(specs: tuple[TaskSpec, ...], task: str) -> list[str]:
    """Return every task depending on ``task`` directly or transitively (it excluded).

    Returns:
        Task names in definition order.
    """
    below: set[str] = {task}
    changed = True
    while changed:
        changed = False
        for t in specs:
            if t.name not in below and below.intersection(t.depends_on):
                below.add(t.name)
                changed = True
    return [t.name for t in specs if t.name in below and t.name != task]
