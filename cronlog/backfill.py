"""Backfill: runs for past ticks of a job, asked for by a user (a BackfillJob).

See docs/schedules.md, "Backfill". Called by ``decide``; emits into a ``Decision``.
"""

from __future__ import annotations

from datetime import datetime

from cronlog import commands as cmd
from cronlog.decision import Decision
from cronlog.ids import run_id_for_backfill, run_id_for_tick
from cronlog.job import JobState
from cronlog.limits import MAX_BACKFILL_TASK_INSTANCES
from cronlog.runs import start_run
from cronlog.vocabulary import RejectReason, Reprocess, RunTrigger


def backfill_ticks(state: JobState, ticks: tuple[datetime, ...], now: datetime) -> list[datetime]:
    """Return the ticks of a backfill that are the backfill's to run, ascending, once each.

    A tick after ``now`` or at/after the schedule's cursor (``next_fire_at``) is still the
    schedule's: it will be fired or skipped by a Tick with the tick's own run_id, so a
    backfill run for it could share that id. Those are dropped.
    """
    cursor = state.next_fire_at
    return sorted({t for t in ticks if t <= now and (cursor is None or t < cursor)})


def backfill(
    d: Decision, state: JobState, command: cmd.BackfillJob, idem_key: str, now: datetime
) -> None:
    """Start a run (trigger ``backfill``) for each of the command's past ticks.

    ``reprocess=none``: the run_id is the tick's own, so a tick whose run is active (or held
    by ``buffer_one``) is left alone, and a re-delivered command creates nothing twice.
    Otherwise the run_id derives from the command's idem_key: a new run beside the old ones.
    Backfill runs are not jittered, never move the cursor, do not count toward ``max_runs``
    and are exempt from the overlap policy and ``max_active_runs`` (the user asked for each
    of them; the command's ``MAX_BACKFILL_TICKS`` and the record size limit bound them).

    Emits:
        What ``cronlog.runs.start_run`` emits for each run started; nothing when every tick
        already has its run.
    Refusals:
        ``invalid_definition``: more than ``MAX_BACKFILL_TICKS`` ticks. ``record_too_large``:
        more than ``MAX_BACKFILL_TASK_INSTANCES`` task instances would start (they could
        never fit the job's record), refused before any run is built.
    """
    if len(command.ticks) > cmd.MAX_BACKFILL_TICKS:
        d.reject(
            command,
            RejectReason.INVALID_DEFINITION,
            f"ticks: at most {cmd.MAX_BACKFILL_TICKS} ticks per backfill, got {len(command.ticks)}",
        )
        return
    starts = _runs(d.job_id, state, command, idem_key, now)
    tasks = len(state.spec.tasks)
    if len(starts) * tasks > MAX_BACKFILL_TASK_INSTANCES:
        d.reject(
            command,
            RejectReason.RECORD_TOO_LARGE,
            f"ticks: {len(starts)} new runs x {tasks} tasks = {len(starts) * tasks} task "
            f"instances; a backfill may start at most {MAX_BACKFILL_TASK_INSTANCES} (more never "
            "fit the job's record): send fewer ticks per backfill",
        )
        return
    for tick, run_id in starts:
        current = d.live()
        d.emit_all(
            start_run(
                current,
                run_id=run_id,
                scheduled_for=tick,
                trigger=RunTrigger.BACKFILL,
                now=now,
                next_fire_at=current.next_fire_at,
                runs_remaining=current.runs_remaining(),
            )
        )


def _runs(
    job_id: str, state: JobState, command: cmd.BackfillJob, idem_key: str, now: datetime
) -> list[tuple[datetime, str]]:
    """Return ``(tick, run_id)`` of each run a backfill starts, ascending by tick.

    The ticks of ``backfill_ticks``, less those whose run_id is active, held by
    ``buffer_one``, or an earlier tick's (two instants in the same millisecond).
    """
    taken = {r.run_id for r in state.runs}
    if state.buffered is not None:
        taken.add(state.buffered.run_id)
    starts: list[tuple[datetime, str]] = []
    for tick in backfill_ticks(state, command.ticks, now):
        if command.reprocess is Reprocess.NONE:
            run_id = run_id_for_tick(job_id, tick, state.incarnation)
        else:
            run_id = run_id_for_backfill(job_id, tick, idem_key)
        if run_id not in taken:
            taken.add(run_id)
            starts.append((tick, run_id))
    return starts
