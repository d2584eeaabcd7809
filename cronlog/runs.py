"""Starting a run: the one place that decides a run's start, for every trigger kind.

A schedule tick (on time or caught up), a buffered tick, a manual trigger, a backfill tick, a
dead-letter replay and an upstream run's end all start a run through ``start_run``: jitter,
the run timeout, and the tasks ready at once (the DAG's roots, at most ``max_active_tasks``)
are decided here and written into the RunScheduled event, which ``evolve`` copies.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from cronlog import events as ev
from cronlog.dag import initially_ready
from cronlog.ids import stable_fraction
from cronlog.job import JobState
from cronlog.model import JobSpec
from cronlog.time import to_ms
from cronlog.vocabulary import OFF_SCHEDULE_TRIGGERS, RunTrigger

JITTERED_TRIGGERS = frozenset({RunTrigger.SCHEDULE, RunTrigger.CATCHUP})
"""Runs whose release the job's ``jitter`` may delay: those its schedule fires. A run someone
asked for (manual, backfill, replay) or an upstream's end started (after) starts at once."""


def release_at(spec: JobSpec, job_id: str, tick: datetime, now: datetime) -> datetime | None:
    """Return when a run for ``tick`` is released under the job's jitter, or None for now.

    Args:
        spec: the job's definition (``jitter``, a duration).
        job_id: the job.
        tick: the run's ``scheduled_for``, aware UTC.
        now: the fold's now, aware UTC.

    Returns:
        ``tick`` plus ``jitter * stable_fraction(job_id, tick)``, whole milliseconds, in
        [0, jitter); None when that is not after ``now`` (a late or buffered run) or the job
        has no jitter.

    Determinism: a hash of (job_id, scheduled_for), never a random draw (DESIGN.md).
    """
    jitter_ms = to_ms(tick + spec.jitter) - to_ms(tick)
    if jitter_ms <= 0:
        return None
    offset = int(stable_fraction(job_id, str(to_ms(tick))) * jitter_ms)
    at = tick + timedelta(milliseconds=offset)
    return at if at > now else None


def run_timeout_at(spec: JobSpec, now: datetime) -> datetime | None:
    """Return when a run scheduled at ``now`` times out (``spec.run_timeout``), or None."""
    return None if spec.run_timeout is None else now + spec.run_timeout


def start_run(
    state: JobState,
    *,
    run_id: str,
    scheduled_for: datetime,
    trigger: RunTrigger,
    now: datetime,
    next_fire_at: datetime | None,
    runs_remaining: int | None,
    tasks: tuple[str, ...] | None = None,
    replay_of: str | None = None,
    upstream_job_id: str | None = None,
    upstream_run_id: str | None = None,
) -> list[ev.Event]:
    """Return the events that start a run: RunScheduled, then TaskReady for each ready task.

    Under jitter the TaskReady events come later, from a Tick at ``release_at``.

    Args:
        state: the job (its definition decides jitter, readiness and the run timeout).
        run_id: the run's id (``cronlog.ids``: derived from the tick or the command).
        scheduled_for: the run's tick (manual runs: the fold's now), aware UTC.
        trigger: what started it; only ``schedule`` and ``catchup`` runs are jittered.
        now: the fold's now, aware UTC.
        next_fire_at: the schedule's cursor after this run (RunScheduled carries it).
        runs_remaining: runs the schedule may still fire after this one, or None.
        tasks: the run's task instances; default every task of the job (a replay run holds
            only the task it replays).
        replay_of: a replay run's original run; None for other runs.
        upstream_job_id: an after run's upstream job; None for other runs.
        upstream_run_id: an after run's upstream run; None for other runs.

    Returns:
        ``[RunScheduled, TaskReady...]`` (TaskReady in definition order, attempt 1, with the
        run's ``scheduled_for``); the ready tasks are the run's tasks with no upstream inside
        the run, or with rule ``always``, at most ``max_active_tasks`` of them.

    Determinism: a pure function of its arguments.
    """
    spec = state.spec
    names = spec.tasks if tasks is None else tasks
    release = (
        release_at(spec, state.job_id, scheduled_for, now) if trigger in JITTERED_TRIGGERS else None
    )
    ready = initially_ready(spec, names)
    out: list[ev.Event] = [
        ev.RunScheduled(
            run_id=run_id,
            scheduled_for=scheduled_for,
            trigger=trigger,
            tasks=names,
            next_fire_at=next_fire_at,
            runs_remaining=runs_remaining,
            release_at=release,
            replay_of=replay_of,
            timeout_at=run_timeout_at(spec, now),
            upstream_job_id=upstream_job_id,
            upstream_run_id=upstream_run_id,
            ready=ready,
            created_at=now if trigger in OFF_SCHEDULE_TRIGGERS else None,
        )
    ]
    if release is None:
        out += [
            ev.TaskReady(run_id=run_id, task=task, attempt=1, scheduled_for=scheduled_for)
            for task in ready
        ]
    return out
