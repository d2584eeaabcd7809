"""A run's progress and end: trigger rules, the run's end, timeouts, buffered ticks.

The DAG's trigger rules applied as tasks end, the run's end, its timeout, and the release of
a ``buffer_one`` tick once the job has no active run.

Called by ``decide`` (through ``leases`` and ``interventions``); every function emits into a
``Decision``. Trigger rules: ``cronlog.dag`` (Airflow's meaning).
"""

from __future__ import annotations

from datetime import datetime

from cronlog import events as ev
from cronlog.dag import RuleOutcome, Upstream, rule_outcome, wiring
from cronlog.decision import Decision
from cronlog.job import Run
from cronlog.runs import start_run
from cronlog.vocabulary import (
    OK_TASK_STATES,
    TERMINAL_TASK_STATES,
    JobStatus,
    RunTrigger,
    TaskState,
)

_UPSTREAM = {
    TaskState.SUCCEEDED: Upstream.SUCCESS,
    TaskState.SKIPPED: Upstream.SKIPPED,
    TaskState.FAILED: Upstream.FAILED,
    TaskState.UPSTREAM_FAILED: Upstream.FAILED,
    TaskState.CANCELLED: Upstream.FAILED,
}

_ACTIVE = frozenset({TaskState.READY, TaskState.CLAIMED, TaskState.RETRY_WAIT, TaskState.DELAYED})


def advance_run(d: Decision, run_id: str, now: datetime) -> None:
    """Apply the trigger rules to a run's pending tasks, then end the run if all ended.

    A pending task whose rule is met becomes ready while the run has fewer than
    ``max_active_tasks`` ready or running; one whose rule says skip or upstream_failed ends so
    and never executes. Repeats until nothing changes, so outcomes propagate down the whole
    DAG in one decision.

    Emits:
        TaskReady (attempt: the task's current one), TaskSkipped, TaskUpstreamFailed; then
        what ``finish_run_if_done`` emits. Nothing for a run no longer active.
    Refusals: none (it applies facts).
    """
    spec = d.live().spec
    changed = True
    while changed:
        changed = False
        run = d.live().run(run_id)
        if run is None:
            return
        states = {t.task: t.state for t in run.tasks}
        wired = wiring(spec, states)
        active = sum(1 for s in states.values() if s in _ACTIVE)
        for ti in run.tasks:
            if ti.state is not TaskState.PENDING:
                continue
            rule, upstream = wired[ti.task]
            ups = [_UPSTREAM.get(states[u], Upstream.RUNNING) for u in upstream]
            match rule_outcome(rule, ups):
                case RuleOutcome.RUN if active < spec.max_active_tasks:
                    d.emit(
                        ev.TaskReady(
                            run_id=run_id,
                            task=ti.task,
                            attempt=ti.attempt,
                            scheduled_for=run.scheduled_for,
                        )
                    )
                    active += 1
                case RuleOutcome.SKIP:
                    d.emit(ev.TaskSkipped(run_id=run_id, task=ti.task, trigger_rule=rule.value))
                    changed = True
                case RuleOutcome.UPSTREAM_FAILED:
                    d.emit(
                        ev.TaskUpstreamFailed(run_id=run_id, task=ti.task, trigger_rule=rule.value)
                    )
                    changed = True
                case _:
                    pass
    finish_run_if_done(d, run_id, now)


def finish_run_if_done(d: Decision, run_id: str, now: datetime) -> None:
    """End the run once every task instance is terminal, and release a buffered tick.

    Emits:
        RunSucceeded (every task succeeded or was skipped) or RunFailed (any failed, was
        cancelled or upstream_failed), then what ``release_waiting`` emits. Nothing while a
        task has not ended.
    Refusals: none.
    """
    run = d.live().run(run_id)
    if run is None:
        return
    states = [t.state for t in run.tasks]
    if not all(s in TERMINAL_TASK_STATES for s in states):
        return
    tenant = d.live().spec.tenant
    if all(s in OK_TASK_STATES for s in states):
        d.emit(ev.RunSucceeded(run_id=run_id, scheduled_for=run.scheduled_for, tenant=tenant))
    else:
        d.emit(ev.RunFailed(run_id=run_id, scheduled_for=run.scheduled_for, tenant=tenant))
    release_waiting(d, now)


def time_out(d: Decision, run: Run, now: datetime) -> None:
    """Stop a run past its ``timeout_at``.

    The job's ``run_timeout`` (Airflow's ``dagrun_timeout``).

    Emits:
        RunTimedOut; TaskCancelled for every task not ended (a holder is refused at its next
        renewal and kills the task); then RunFailed (``finish_run_if_done``).
    Refusals: none.
    """
    d.emit(ev.RunTimedOut(run_id=run.run_id, timeout_at=run.timeout_at or now))
    for ti in run.tasks:
        if ti.state not in TERMINAL_TASK_STATES:
            holder = ti.worker_id if ti.state is TaskState.CLAIMED else None
            d.emit(
                ev.TaskCancelled(
                    run_id=run.run_id, task=ti.task, attempt=ti.attempt, worker_id=holder
                )
            )
    finish_run_if_done(d, run.run_id, now)


def release_waiting(d: Decision, now: datetime) -> None:
    """Start what waits for a free slot: the buffered tick, then queued runs.

    A ``buffer_one`` job's buffered tick starts once no run of the job is active; queued runs
    start in queue order while fewer than ``max_active_runs`` are active.

    Temporal's BUFFER_ONE: "start the workflow again soon as the current one completes". A
    buffered or queued run keeps its nominal ``scheduled_for`` and run_id; a paused job
    releases them too (their ticks came due while it was active). Backfill and replay runs
    neither hold them back nor count (docs/schedules.md, "Backfill"). A deleted job releases
    nothing (its queued runs were cancelled with it).

    Emits:
        What ``cronlog.runs.start_run`` emits for each run started (RunScheduled, TaskReady),
        or nothing.
    Refusals: none.
    """
    state = d.live()
    if state.status is JobStatus.DELETED:
        return
    if state.suspended_until is not None:  # an open circuit (cronlog.breaker)
        if (
            state.probe_run is None
            and state.queue
            and now >= state.suspended_until
            and state.active_runs() < state.spec.max_active_runs
        ):
            q = state.queue[0]  # half-open: the oldest queued run is the one probe
            d.emit(ev.JobProbing(run_id=q.run_id))
            _start_waiting(
                d, q.run_id, q.scheduled_for, q.trigger, now, q.upstream_job_id, q.upstream_run_id
            )
        return
    held = state.buffered
    if held is not None and state.active_runs() == 0:
        _start_waiting(d, held.run_id, held.scheduled_for, held.trigger, now)
    while (state := d.live()).queue and state.active_runs() < state.spec.max_active_runs:
        q = state.queue[0]
        _start_waiting(
            d, q.run_id, q.scheduled_for, q.trigger, now, q.upstream_job_id, q.upstream_run_id
        )


def _start_waiting(
    d: Decision,
    run_id: str,
    scheduled_for: datetime,
    trigger: RunTrigger,
    now: datetime,
    upstream_job_id: str | None = None,
    upstream_run_id: str | None = None,
) -> None:
    state = d.live()
    d.emit_all(
        start_run(
            state,
            run_id=run_id,
            scheduled_for=scheduled_for,
            trigger=trigger,
            now=now,
            next_fire_at=state.next_fire_at,
            runs_remaining=state.runs_remaining(),
            upstream_job_id=upstream_job_id,
            upstream_run_id=upstream_run_id,
        )
    )
