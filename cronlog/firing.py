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


def first_tick(schedule: Schedule, now: datetime, job_id: str) -> datetime | None:
    """Return the first tick of a job registered (or rescheduled) at ``now``.

    Args:
        schedule: the job's schedule.
        now: the fold's now, aware UTC.
        job_id: the job (what Jenkins ``H`` fields hash).

    Returns:
        An aware UTC instant or None (manual). Cron ticks are strictly after ``now``. A
        ``once`` job returns ``run_at`` even when it has passed: it then fires on the next Tick
        (``fire_due_ticks`` never lets the catch-up policy skip a once job's only tick).
    """
    if schedule.kind is ScheduleKind.ONCE:
        return schedule.run_at
    return next_tick(schedule, now, hash_id=job_id)


def resume_tick(schedule: Schedule, cursor: datetime | None, now: datetime,
                job_id: str) -> datetime | None:
    """Return the cursor of a job resumed at ``now``: ticks that passed while paused are not fired.

    Args:
        schedule: the job's schedule.
        cursor: the job's ``next_fire_at`` when it was paused (None: a once job already fired).
        now: the fold's now, aware UTC.
    """
    if schedule.kind is ScheduleKind.ONCE:
        return cursor if cursor is not None and cursor > now else None
    return next_tick(schedule, now, hash_id=job_id)


def rescheduled_tick(old: Schedule, new: Schedule, cursor: datetime | None,
                     now: datetime, job_id: str) -> datetime | None:
    """Return the cursor after a definition change from ``old`` to ``new`` at ``now``.

    An unchanged schedule keeps its cursor, and so does a ``once`` job whose ``run_at`` did not
    change (if it already fired, it stays fired): an edit can never fire a tick twice.
    """
    if new == old:
        return cursor
    if old.kind is ScheduleKind.ONCE and new.kind is ScheduleKind.ONCE and new.run_at == old.run_at:
        return cursor
    return first_tick(new, now, job_id)


def _due(state: JobState, now: datetime) -> tuple[list[datetime], datetime | None]:
    due: list[datetime] = []
    cursor = state.next_fire_at
    while cursor is not None and cursor <= now and len(due) < MAX_TICKS_PER_FOLD:
        due.append(cursor)
        cursor = next_tick(state.spec.schedule, cursor, hash_id=state.job_id)
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
    active = len(state.runs)
    for i, tick in enumerate(due):
        cursor = due[i + 1] if i + 1 < len(due) else after_all
        reason: ev.SkipReason | None = None
        trigger = ev.RunTrigger.SCHEDULE
        if tick in late:
            trigger = ev.RunTrigger.CATCHUP
            if sched.kind is ScheduleKind.ONCE:
                pass  # the one and only tick is always the latest: it fires, late
            elif now - tick > sched.catchup_window:
                reason = ev.SkipReason.CATCHUP_WINDOW
            elif sched.catchup is CatchupPolicy.NONE or (
                sched.catchup is CatchupPolicy.LATEST
                and (any_on_time or not complete or tick != late[-1])
            ):
                reason = ev.SkipReason.CATCHUP_POLICY
        if reason is None and active >= state.spec.max_active_runs:
            reason = ev.SkipReason.MAX_ACTIVE_RUNS
        if reason is not None:
            yield ev.TickSkipped(tick, reason, cursor)
            continue
        active += 1
        run_id = run_id_for_tick(state.job_id, tick)
        yield ev.RunScheduled(run_id, tick, trigger, state.spec.tasks, cursor)
        for task in state.spec.tasks:
            yield ev.TaskReady(run_id, task, 1, tick)
