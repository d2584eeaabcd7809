"""Identifier types and their formats.

Every run_id, event_id and idem_key format is written here, once, and used everywhere (fold,
worker, API, relay, ticker).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from datetime import datetime, timedelta
from enum import Enum
from typing import NewType

from cronlog.job_level import job_level
from cronlog.model import MAIN_TASK, JobSpec
from cronlog.time import duration_ms, to_ms

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


COMMAND_DIGEST_SIZE = 8
"""Bytes of a command digest (``command_digest``: 16 hex digits)."""


def command_digest(command: object) -> str:
    """Return the fingerprint of a command's content, to tell a re-delivery from a key re-use.

    A command re-delivered with its idem_key is a no-op; another command re-using the key is
    refused (``idempotency_conflict``, the rule of the IETF draft "The Idempotency-Key HTTP
    Header Field"). The job record keeps this digest beside each user command's marker.

    Why this form: the digest must be the same for the same command whatever code version
    computes it, including a re-delivery decoded after an upgrade that added a field with a
    default. So only fields whose value differs from the dataclass default count (recursively:
    JobSpec, Schedule, RetryPolicy …), in a canonical form (instants as epoch ms, durations as
    ms, enums as their values, tuples as lists, sorted keys), with the command's type name.
    Consequence: a default must never change (a command sent at the old default would then
    count the field); that is the Avro evolution rule too (schemas/README.md).

    Args:
        command: a command dataclass instance (``cronlog.commands.Command``).

    Returns:
        ``COMMAND_DIGEST_SIZE * 2`` hex digits (blake2b).

    Raises:
        TypeError: ``command`` is not a dataclass instance, or holds a value of a type with no
            canonical form (the message names the field).
    """
    if not dataclasses.is_dataclass(command) or isinstance(command, type):
        raise TypeError(f"command: expected a command dataclass, got {type(command).__name__}")
    name = type(command).__name__
    canonical = json.dumps(
        _canonical(command, name), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    return _digest("command", name, canonical, size=COMMAND_DIGEST_SIZE)


def _canonical(value: object, where: str) -> object:
    """Return ``value`` as JSON data for ``command_digest``; ``where`` names it in errors."""
    if value is None or type(value) in _PLAIN:
        return value
    if type(value) is JobSpec:
        return _canonical_spec(value, where)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _canonical_fields(value, where)
    if isinstance(value, datetime):
        return to_ms(value)
    if isinstance(value, timedelta):
        return duration_ms(value)
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, tuple | list):
        return [_canonical(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, str | int | float):  # subclasses (enums are handled above)
        return value
    raise TypeError(f"{where}: no canonical form for a {type(value).__name__}")


def _canonical_fields(value: object, where: str) -> dict[str, object]:
    """Return a dataclass instance's fields that differ from their defaults, canonical."""
    out: dict[str, object] = {}
    cls: type = type(value)
    for name, raw, default in _defaults(cls):
        field = getattr(value, name)
        if field is raw or (type(field) is type(raw) and field == raw):
            continue  # at its default (the common case: no canonical form needed)
        try:
            v = _canonical(field, name)
        except TypeError as exc:
            raise TypeError(f"{where}.{exc}") from None
        if default is _NO_DEFAULT or type(v) is not type(default) or v != default:
            out[name] = v
    return out


def _canonical_spec(spec: JobSpec, where: str) -> dict[str, object]:
    """Return a definition in the canonical form of its old shape (``cronlog.job_level``).

    So a command written before the one shape keeps its digest when it is re-delivered and
    decoded (upcast) after: a job the old shape wrote at job level counts its ``command``
    (always: it had no default), ``kind``, ... and no ``task_specs``; any other job counts
    ``command: []``, its ``task_specs`` and its task names (``tasks``, when not ``main``).
    """
    out = _canonical_fields(spec, where)
    old = job_level(spec)
    if old is None:
        out["command"] = []
        if spec.tasks != (MAIN_TASK,):
            out["tasks"] = list(spec.tasks)
        return out
    del out["task_specs"]
    return {**out, **_canonical_fields(old, where), "command": list(old.command)}


_PLAIN = frozenset({str, int, float, bool})


_NO_DEFAULT = object()


@functools.cache
def _defaults(cls: type) -> tuple[tuple[str, object, object], ...]:
    """Return each field of dataclass ``cls`` as ``(name, default, canonical default)``.

    A field without a default has ``_NO_DEFAULT`` for both.
    """
    out: list[tuple[str, object, object]] = []
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            raw: object = f.default
        elif f.default_factory is not dataclasses.MISSING:
            raw = f.default_factory()
        else:
            out.append((f.name, _NO_DEFAULT, _NO_DEFAULT))
            continue
        out.append((f.name, raw, _canonical(raw, f"{cls.__name__}.{f.name}")))
    return tuple(out)


IDEM_MARKER_SIZE = 16
"""Bytes of the digest a job record keeps for an applied idem_key (``idem_marker``)."""


def idem_marker(idem_key: str) -> str:
    """Return the dedupe marker a job record keeps for an applied ``idem_key``.

    A fixed-size digest rather than the key: an idem_key may be ``MAX_IDEM_KEY_CHARS``
    characters of up to 6 bytes each in the stored JSON (a control character's escape), and a
    window of such keys would fill the job record until every command to the job is refused
    (``record_too_large``) with no way for the markers to rotate out (issue 11). Two keys share
    a marker only by a blake2b-128 collision (about 2**64 work to craft one pair).

    Args:
        idem_key: a command's idem_key (or a ``conflict_key``).

    Returns:
        ``IDEM_MARKER_SIZE * 2`` hex digits (blake2b).

    Determinism: a pure function of ``idem_key``.
    """
    return _digest("idem", idem_key, size=IDEM_MARKER_SIZE)


def conflict_key(idem_key: str, digest: str) -> str:
    """Return the key of the refusal of a command that re-used ``idem_key`` with other content.

    The format is ``conflict:<24 hex digits>``. The fold marks it applied (so a re-delivery of
    the conflicting command stays a no-op) and the adapter derives the refusal's event_ids
    from it, not from ``idem_key``: the original command's events own
    ``event_id(idem_key, job_id, i)``, and a refusal under the same id would be another
    content for the same event_id (DESIGN.md invariant 6).

    Args:
        idem_key: the re-used key.
        digest: the conflicting command's ``command_digest``.
    """
    return "conflict:" + _digest("conflict", idem_key, digest)


def horizon_marker(job_id: str, key: str) -> str:
    """Return the marker-store key of an external command's ``key`` on ``job_id``.

    ``IDEM_MARKER_SIZE * 2`` hex digits (blake2b of both): fixed size whatever the key, and
    per job, as the job record's markers are (``cronlog.idem``).
    """
    return _digest("horizon", job_id, key, size=IDEM_MARKER_SIZE)


def horizon_refusal_key(idem_key: str, issued_ms: int, now_ms: int) -> str:
    """Return the key of a refusal by age (``cronlog.idem.refusal_key``): ``aged:<24 hex>``."""
    return "aged:" + _digest("aged", idem_key, str(issued_ms), str(now_ms))


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

    ``<tick idem_key>+1``, then ``+2`` …; the fold appends it (topology/fold/folder.py).
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


def is_claim_key(idem_key: str) -> bool:
    """Return whether ``idem_key`` is a worker's ClaimTask key (``claim_idem_key``)."""
    return idem_key.startswith("claim:")


def poll_idem_key(worker_id: str, poll_id: str) -> str:
    """Return the idem_key of a worker's PollTasks: ``poll:<worker>:<poll_id>``.

    Polls are not deduplicated (a poll changes no job unless it grants, and a grant is fenced
    by its epoch); the key names the poll's events (their event_ids).
    """
    return f"poll:{worker_id}:{poll_id}"


def grant_idem_key(idem_key: str, partition: int, offset: int) -> str:
    """Return the idem_key naming one poll record's grants and answer: ``<key>@<p>:<offset>``.

    ``key`` is the poll's (or a ``claim_next`` completion's) idem_key, ``p`` and ``offset`` the
    record's position in the commands topic.
    Polls leave no dedupe marker, so a poll (or a ``claim_next`` completion) delivered twice is
    decided twice and may grant other tasks the second time; naming those decisions by the
    record's position keeps every event_id to one content (DESIGN.md invariant 6), and a
    batch folded again after an abort decides the same record at the same position, so it
    re-makes the same ids.
    """
    return f"{idem_key}@{partition}:{offset}"


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
