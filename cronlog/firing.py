"""Which ticks fire when the fold's now passes a job's cursor.

Bounds, exclusions, catch-up, overlap and jitter decide it.

Rules (docs/schedules.md): the first tick past ``end_at`` or past ``max_runs`` is skipped and
ends the schedule; an excluded tick is skipped. A tick folded within the schedule's
``misfire_grace`` (default ``ON_TIME_GRACE``) is on time. Older ones were *missed*: ``all``
fires those inside ``catchup_window``, ``latest`` only the latest of them and only when no
on-time tick fires with it, ``none`` none. A tick that may fire then meets the job's overlap
policy and ``max_active_runs``. Every tick not fired yields a TickSkipped with its reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

from cronlog import events as ev
from cronlog.exclusions import is_excluded
from cronlog.ids import run_id_for_tick
from cronlog.job import JobState
from cronlog.model import CatchupPolicy, OverlapPolicy, Schedule, ScheduleKind
from cronlog.runs import start_run
from cronlog.schedule import next_tick
from cronlog.vocabulary import (
    OFF_SCHEDULE_TRIGGERS,
    CancelReason,
    QueueReason,
    RunTrigger,
    SkipReason,
)

ON_TIME_GRACE = timedelta(seconds=60)
"""The default ``Schedule.misfire_grace``: a tick folded at most this late counts as on time
(covers restarts and rebalances)."""
MAX_TICKS_PER_FOLD = 1000
"""At most this many ticks of one job are decided per Tick command; the rest wait for the next."""


def schedule_tick(schedule: Schedule, after: datetime, job_id: str) -> datetime | None:
    """Return the job's first tick strictly after ``after`` and not before ``start_at``.

    ``end_at`` and ``max_runs`` are not applied here: the first tick past them still becomes
    the cursor, and ``fire_due_ticks`` skips it (TickSkipped) and ends the schedule.

    Args:
        schedule: the job's schedule.
        after: an aware instant (exclusive).
        job_id: the job (what Jenkins ``H`` fields hash).
    """
    if schedule.start_at is not None and after < schedule.start_at:
        after = schedule.start_at - timedelta(microseconds=1)
    return next_tick(schedule, after, hash_id=job_id)


def first_tick(schedule: Schedule, now: datetime, job_id: str) -> datetime | None:
    """Return the first tick of a job registered (or rescheduled) at ``now``.

    Args:
        schedule: the job's schedule.
        now: the fold's now, aware UTC.
        job_id: the job (what Jenkins ``H`` fields hash).

    Returns:
        An aware UTC instant or None (manual). Cron and every ticks are strictly after
        ``now`` (and not before ``start_at``). A ``once`` job returns ``run_at`` even when it
        has passed: it then fires on the next Tick (``fire_due_ticks`` never lets the catch-up
        policy skip a once job's only tick).
    """
    if schedule.kind is ScheduleKind.ONCE:
        return schedule.run_at
    return schedule_tick(schedule, now, job_id)


def resume_tick(
    schedule: Schedule,
    cursor: datetime | None,
    now: datetime,
    job_id: str,
    *,
    catchup: bool = False,
) -> datetime | None:
    """Return the cursor of a job resumed at ``now``.

    Args:
        schedule: the job's schedule.
        cursor: the job's ``next_fire_at`` when it was paused (None: the schedule ended).
        now: the fold's now, aware UTC.
        job_id: the job.
        catchup: True keeps the paused cursor, so the ticks passed while paused are owed and
            follow the catch-up policy; False owes nothing (the next tick after ``now``).
    """
    if catchup or cursor is None:
        return cursor
    if schedule.kind is ScheduleKind.ONCE:
        return cursor if cursor > now else None
    return schedule_tick(schedule, now, job_id)


def rescheduled_tick(
    old: Schedule, new: Schedule, cursor: datetime | None, now: datetime, job_id: str
) -> datetime | None:
    """Return the cursor after a definition change from ``old`` to ``new`` at ``now``.

    An unchanged schedule keeps its cursor, and so does a ``once`` job whose ``run_at`` did not
    change (if it already fired, it stays fired): an edit can never fire a tick twice.
    """
    if new == old:
        return cursor
    if old.kind is ScheduleKind.ONCE and new.kind is ScheduleKind.ONCE and new.run_at == old.run_at:
        return cursor
    return first_tick(new, now, job_id)


def _due(state: JobState, due_by: datetime) -> tuple[list[datetime], datetime | None]:
    due: list[datetime] = []
    cursor = state.next_fire_at
    while cursor is not None and cursor <= due_by and len(due) < MAX_TICKS_PER_FOLD:
        due.append(cursor)
        cursor = schedule_tick(state.spec.schedule, cursor, state.job_id)
    return due, cursor


def _catchup_reason(
    sched: Schedule,
    tick: datetime,
    now: datetime,
    late: list[datetime],
    any_on_time: bool,
    complete: bool,
) -> SkipReason | None:
    if sched.kind is ScheduleKind.ONCE:
        return None  # the one and only tick is always the latest: it fires, late
    if now - tick > sched.catchup_window:
        return SkipReason.CATCHUP_WINDOW
    if sched.catchup is CatchupPolicy.NONE or (
        sched.catchup is CatchupPolicy.LATEST and (any_on_time or not complete or tick != late[-1])
    ):
        return SkipReason.CATCHUP_POLICY
    return None


class _Fold:
    """What the ticks of one fold change as they are decided: active runs, buffer, count."""

    def __init__(self, state: JobState) -> None:
        # backfill runs are outside the overlap policy and max_active_runs, both ways
        self.active = [r.run_id for r in state.runs if r.trigger not in OFF_SCHEDULE_TRIGGERS]
        self.ticks = {r.run_id: r.scheduled_for for r in state.runs}
        self.buffered = state.buffered is not None
        self.queued = len(state.queue)
        self.suspended = state.suspended_until is not None
        self.fired = state.runs_fired
        self.limit = state.spec.schedule.max_runs

    def remaining(self) -> int | None:
        return None if self.limit is None else max(0, self.limit - self.fired)


def fire_due_ticks(
    state: JobState, now: datetime, *, before_now: bool = False
) -> Iterator[ev.Event]:
    """Yield the events of every tick of ``state`` due at ``now``, in tick order.

    Per tick: TickSkipped (with its reason), or RunBuffered (``buffer_one``), or RunCancelled
    for the active runs (``cancel_previous``) then RunScheduled + TaskReady (TaskReady later,
    on a Tick, when jitter delays the release), or RunQueued when ``max_active_runs`` runs are
    active (TickSkipped ``queue_full`` past ``max_queued_runs``).

    Args:
        state: an active job.
        now: the fold's now, aware UTC.
        before_now: decide only the ticks strictly before ``now`` (a pause or a reschedule at
            ``now``: a tick at that very instant is the new definition's, as it would be if
            its Tick came after the command).

    Returns:
        Events in tick order; empty if nothing is due. After a TickSkipped ``end_at`` or
        ``max_runs`` (whose next_fire_at is None) nothing more.

    Determinism: run_ids derive from (job_id, scheduled_for), so a tick can never make two runs.
    """
    # datetimes are whole microseconds: t < now exactly when t <= now - 1 µs
    due, after_all = _due(state, now - timedelta(microseconds=1) if before_now else now)
    if not due:
        return
    sched, spec = state.spec.schedule, state.spec
    excluded = {t for t in due if is_excluded(sched, t)}
    late = [t for t in due if now - t > sched.misfire_grace and t not in excluded]
    any_on_time = len(late) + len(excluded) < len(due)
    complete = after_all is None or after_all > now
    fold = _Fold(state)
    # half-open with nothing queued: the first tick's run starts (the probe, cronlog.breaker)
    half_open = (
        state.suspended_until is not None
        and state.probe_run is None
        and not state.queue
        and now >= state.suspended_until
    )
    fold.suspended = fold.suspended and not half_open
    for i, tick in enumerate(due):
        cursor = due[i + 1] if i + 1 < len(due) else after_all
        if sched.end_at is not None and tick > sched.end_at:
            yield ev.TickSkipped(scheduled_for=tick, reason=SkipReason.END_AT, next_fire_at=None)
            return
        if fold.limit is not None and fold.fired >= fold.limit:
            yield ev.TickSkipped(scheduled_for=tick, reason=SkipReason.MAX_RUNS, next_fire_at=None)
            return
        trigger = RunTrigger.CATCHUP if tick in late else RunTrigger.SCHEDULE
        reason = (
            SkipReason.EXCLUDED
            if tick in excluded
            else _catchup_reason(sched, tick, now, late, any_on_time, complete)
            if tick in late
            else None
        )
        run_id = run_id_for_tick(state.job_id, tick, state.incarnation)
        if reason is None and fold.active and not fold.suspended:  # an open circuit queues
            if spec.overlap is OverlapPolicy.SKIP or (
                spec.overlap is OverlapPolicy.BUFFER_ONE and fold.buffered
            ):
                reason = SkipReason.OVERLAP
            elif spec.overlap is OverlapPolicy.BUFFER_ONE:
                fold.buffered, fold.fired = True, fold.fired + 1
                yield ev.RunBuffered(
                    run_id=run_id,
                    scheduled_for=tick,
                    trigger=trigger,
                    next_fire_at=cursor,
                    runs_remaining=fold.remaining(),
                )
                continue
            elif spec.overlap is OverlapPolicy.CANCEL_PREVIOUS:
                for old in fold.active:
                    yield ev.RunCancelled(
                        run_id=old,
                        reason=CancelReason.OVERLAP,
                        replaced_by=run_id,
                        scheduled_for=fold.ticks.get(old),
                        tenant=spec.tenant,
                    )
                fold.active = []
        if reason is None and (
            len(fold.active) >= spec.max_active_runs or fold.queued or fold.suspended
        ):
            if fold.queued >= spec.max_queued_runs:
                reason = SkipReason.QUEUE_FULL
            else:  # overload delays, never drops: the run starts when a slot frees
                fold.queued, fold.fired = fold.queued + 1, fold.fired + 1
                yield ev.RunQueued(
                    run_id=run_id,
                    scheduled_for=tick,
                    trigger=trigger,
                    next_fire_at=cursor,
                    runs_remaining=fold.remaining(),
                    reason=QueueReason.SUSPENDED if fold.suspended else QueueReason.MAX_ACTIVE_RUNS,
                )
                continue
        if reason is not None:
            yield ev.TickSkipped(scheduled_for=tick, reason=reason, next_fire_at=cursor)
            continue
        fold.active.append(run_id)
        fold.ticks[run_id] = tick
        fold.fired += 1
        fold.suspended = fold.suspended or half_open  # one probe; later ticks queue
        yield from start_run(
            state,
            run_id=run_id,
            scheduled_for=tick,
            trigger=trigger,
            now=now,
            next_fire_at=cursor,
            runs_remaining=fold.remaining(),
        )
