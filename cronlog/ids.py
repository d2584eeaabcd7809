"""Identifier types and their formats.

Every run_id, event_id and idem_key format is written here, once, and used everywhere (fold,
worker, API, relay, ticker).
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import NewType

from cronlog.time import to_ms

JobId = NewType("JobId", str)
RunId = NewType("RunId", str)
WorkerId = NewType("WorkerId", str)
EventId = NewType("EventId", str)


def _digest(*parts: str, size: int = 12) -> str:
    h = hashlib.blake2b(digest_size=size)
    for part in parts:
        h.update(part.encode())
        h.update(b"\x00")
    return h.hexdigest()


def run_id_for_tick(job_id: str, scheduled_for: datetime, incarnation: int = 0) -> RunId:
    """Return the run_id of the run for one tick of a job.

    Args:
        job_id: the job.
        scheduled_for: the tick, an aware instant (reduced to epoch milliseconds).
        incarnation: how many times the job_id was registered again after a delete (0 for
            the first registration, whose ids are unchanged); a re-registered job's ticks are
            new ticks and must not reuse the deleted job's run ids.

    Returns:
        ``"r" + 24 hex digits``.

    Determinism: a pure function of ``(job_id, scheduled_for)``: the same tick always gets the
    same run_id, which is what makes a second firing of a tick a no-op.
    """
    if incarnation:
        return RunId("r" + _digest("tick", job_id, str(to_ms(scheduled_for)), str(incarnation)))
    return RunId("r" + _digest("tick", job_id, str(to_ms(scheduled_for))))


def run_id_for_trigger(job_id: str, idem_key: str) -> RunId:
    """Return the run_id of a manual trigger, derived from the trigger command's idem_key."""
    return RunId("r" + _digest("trigger", job_id, idem_key))


def run_id_for_backfill(job_id: str, scheduled_for: datetime, idem_key: str) -> RunId:
    """Return the run_id of a reprocessing backfill run for one tick.

    Args:
        job_id: the job.
        scheduled_for: the tick, an aware instant (reduced to epoch milliseconds).
        idem_key: the BackfillJob command's idem_key.

    Returns:
        ``"r" + 24 hex digits``, distinct from ``run_id_for_tick`` of the same tick and from
        the run_ids other backfill commands give it.

    Determinism: a pure function of ``(job_id, scheduled_for, idem_key)``: a re-delivered
    backfill recomputes the same ids, so it cannot create a tick's run twice; a new backfill
    (another idem_key) that reprocesses the tick creates another run.
    """
    return RunId("r" + _digest("backfill", job_id, str(to_ms(scheduled_for)), idem_key))


def run_id_for_replay(job_id: str, run_id: str, task: str, idem_key: str) -> RunId:
    """Return the run_id of the run that replays one dead-lettered task instance.

    Determinism: a pure function of ``(job_id, run_id, task, idem_key)`` (idem_key: the
    ReplayTask command's): a re-delivered replay finds its run and creates nothing; another
    replay command of the same task instance creates another run.
    """
    return RunId("r" + _digest("replay", job_id, run_id, task, idem_key))


def run_id_for_after(
    job_id: str, upstream_run_id: str, incarnation: int = 0, upstream_event_id: str = ""
) -> RunId:
    """Return the run_id of an ``after`` job's run for one end of an upstream run.

    Args:
        job_id: the downstream job (whose schedule is ``after``).
        upstream_run_id: the upstream run whose end starts this run.
        incarnation: as in ``run_id_for_tick``: a re-registered job gets new ids.
        upstream_event_id: the event that ended the upstream run (a rerun can reopen a run
            and end it again: each end is its own).

    Determinism: a pure function of its arguments: one upstream run can start at most one
    active run of each downstream job, however often its UpstreamRunEnded is re-sent.
    """
    return RunId(
        "r" + _digest("after", job_id, upstream_run_id, str(incarnation), upstream_event_id)
    )


def event_id(idem_key: str, job_id: str, index: int) -> EventId:
    """Return the event_id of the ``index``-th event a command produced for a job.

    Determinism: re-delivering the same command recomputes the same events with the same ids,
    so consumers can dedupe by event_id.
    """
    return EventId(_digest("event", idem_key, job_id, str(index), size=16))


def task_idem_key(run_id: str, task: str) -> str:
    """Return the idem_key handed to a task instance: ``<run_id>:<task>``."""
    return f"{run_id}:{task}"


def tick_idem_key(ticker_id: str, partition: int, seq: int) -> str:
    """Return the idem_key of a Tick: ``tick:<ticker_id>:<partition>:<seq>``.

    Ticks are never deduplicated by it (firing is idempotent by the schedule cursor); it names
    the tick in the events it causes (their event_ids derive from it).
    """
    return f"tick:{ticker_id}:{partition}:{seq}"


def continuation_idem_key(tick_idem_key: str) -> str:
    """Return the idem_key of the Tick that continues a Tick with more due jobs than a slice.

    ``<tick idem_key>+1``, then ``+2`` …; the fold appends it (topology/fold.py).
    """
    base, sep, n = tick_idem_key.rpartition("+")
    if sep and n.isdigit():
        return f"{base}+{int(n) + 1}"
    return f"{tick_idem_key}+1"


def claim_idem_key(run_id: str, task: str, attempt: int, worker_id: str, nonce: str) -> str:
    """Return a worker's ClaimTask idem_key: ``claim:<run>:<task>:<attempt>:<worker>:<nonce>``.

    The nonce (one per poll batch) lets a worker claim again the same ready record that a
    rebalance re-delivered, rather than being deduplicated into silence.
    """
    return f"claim:{run_id}:{task}:{attempt}:{worker_id}:{nonce}"


def renew_idem_key(run_id: str, task: str, epoch: int, n: int) -> str:
    """Return the idem_key of a lease's ``n``-th RenewLease: ``renew:<run>:<task>:<epoch>:<n>``."""
    return f"renew:{run_id}:{task}:{epoch}:{n}"


def complete_idem_key(run_id: str, task: str, epoch: int) -> str:
    """Return the idem_key of a lease's CompleteTask: ``complete:<run>:<task>:<epoch>``.

    One completion per lease: a re-sent completion is a no-op.
    """
    return f"complete:{run_id}:{task}:{epoch}"


def release_idem_key(run_id: str, task: str, epoch: int) -> str:
    """Return the idem_key of a lease's ReleaseTask: ``release:<run>:<task>:<epoch>``."""
    return f"release:{run_id}:{task}:{epoch}"


def after_idem_key(downstream_job_id: str, upstream_run_id: str, end_event_id: str = "") -> str:
    """Return the idem_key of the UpstreamRunEnded for one downstream job and upstream end.

    The format is ``after:<downstream>:<upstream_run_id>:<event_id of the ending event>``.

    Idempotency: every relay, and every re-send after a restart, uses the same key (event ids
    are deterministic); a run reopened by a rerun and ended again has a new ending event.
    """
    return f"after:{downstream_job_id}:{upstream_run_id}:{end_event_id}"


def step_idem_key(base: str, *parts: str) -> str:
    """Return the idem_key of one command of a request that sends several.

    The format is ``<base>:<part>:…`` (base: the request's Idempotency-Key), so a retried
    request re-sends each of them under the key it had.
    """
    return ":".join((base, *parts))


def stable_fraction(*parts: str) -> float:
    """Return a deterministic number in [0, 1) from ``parts`` (jitter without randomness)."""
    return int(_digest(*parts, size=8), 16) / float(1 << 64)
