"""Which ticks fire when the fold's now passes a job's cursor: on-time ticks, catch-up, skips.

Rules (docs/schedules.md): a tick folded within ``ON_TIME_GRACE`` of its instant is on time and
fires. Older ones were *missed* (nothing was folding): ``all`` fires those inside
``catchup_window``, ``latest`` fires only the latest of them and only when no on-time tick
fires with it, ``none`` fires none. Every tick not fired yields a TickSkipped with its reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

from cronlog import events as ev
from cronlog.ids import run_id_for_tick
from cronlog.job import JobState
from cronlog.model import CatchupPolicy, Schedule, ScheduleKind
from cronlog.schedule import next_tick

ON_TIME_GRACE = timedelta(seconds=60)
"""A tick folded at most this late counts as on time (covers restarts and rebalances)."""
MAX_TICKS_PER_FOLD = 1000
"""At most this many ticks of one job are decided per Tick command; the rest wait for the next."""


def first_tick(
    schedule: Schedule, now: datetime, resuming: datetime | None = None
) -> datetime | None:
    """Return the first tick a job (re)starting at ``now`` should fire.

    Args:
        schedule: the job's schedule.
        now: the fold's now, aware UTC.
        resuming: on resume, the cursor the job had when paused (a once job keeps its
            ``run_at`` if it has not passed).

    Returns:
        An aware UTC instant or None. A ``once`` job registered after its ``run_at`` returns
        ``run_at`` (it fires at once); cron ticks are strictly after ``now``.
    """
    if schedule.kind is ScheduleKind.ONCE:
        if resuming is None:
            return schedule.run_at
        return resuming if resuming > now else None
    return next_tick(schedule, now)


def _due(state: JobState, now: datetime) -> tuple[list[datetime], datetime | None]:
    due: list[datetime] = []
    cursor = state.next_fire_at
    while cursor is not None and cursor <= now and len(due) < MAX_TICKS_PER_FOLD:
        due.append(cursor)
        cursor = next_tick(state.spec.schedule, cursor)
    return due, cursor


def fire_due_ticks(state: JobState, now: datetime) -> Iterator[ev.Event]:
    """Yield RunScheduled + TaskReady, or TickSkipped, for each tick of ``state`` due at ``now``.

    Args:
        state: an active job.
        now: the fold's now, aware UTC.

    Returns:
        Events in tick order; empty if nothing is due.

    Determinism: run_ids derive from (job_id, scheduled_for), so a tick can never make two runs.
    """
    due, after_all = _due(state, now)
    if not due:
        return
    sched = state.spec.schedule
    late = [t for t in due if now - t > ON_TIME_GRACE]
    any_on_time = len(late) < len(due)
    complete = after_all is None or after_all > now
    for i, tick in enumerate(due):
        cursor = due[i + 1] if i + 1 < len(due) else after_all
        reason: ev.SkipReason | None = None
        trigger = ev.RunTrigger.SCHEDULE
        if tick in late:
            trigger = ev.RunTrigger.CATCHUP
            if now - tick > sched.catchup_window:
                reason = ev.SkipReason.CATCHUP_WINDOW
            elif sched.catchup is CatchupPolicy.NONE or (
                sched.catchup is CatchupPolicy.LATEST
                and (any_on_time or not complete or tick != late[-1])
            ):
                reason = ev.SkipReason.CATCHUP_POLICY
        if reason is not None:
            yield ev.TickSkipped(tick, reason, cursor)
            continue
        run_id = run_id_for_tick(state.job_id, tick)
        yield ev.RunScheduled(run_id, tick, trigger, state.spec.tasks, cursor)
        for task in state.spec.tasks:
            yield ev.TaskReady(run_id, task, 1, tick)
