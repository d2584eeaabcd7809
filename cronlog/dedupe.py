"""Deduplication keys of commands, refusals of re-used keys, and the dedupe horizon's verdict.

Which key marks a command applied, which key its events' ids derive from
(``cronlog.decide.handle`` applies them). The horizon's rules are ``cronlog.idem``'s.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.decision import Decision
from cronlog.idem import MarkerBook, age_refusal, live_marker, new_marker, refusal_key
from cronlog.ids import command_digest, conflict_key
from cronlog.job import JobState
from cronlog.leases import lease_digest
from cronlog.vocabulary import RejectReason

__all__ = [
    "AGE_REASONS",
    "WORKER_COMMANDS",
    "by_horizon",
    "event_key",
    "marker_key",
    "refuse_reuse",
    "sender_key",
    "worker_sender",
]

WORKER_COMMANDS = (cmd.ClaimTask, cmd.RenewLease, cmd.CompleteTask, cmd.ReleaseTask)
"""Commands whose dedupe markers live in the worker window (``JobState.renewals``)."""
AGE_REASONS = (RejectReason.IDEM_KEY_EXPIRED, RejectReason.ISSUED_AT_IN_FUTURE)
"""Refusals by the dedupe horizon (``cronlog.idem.age_refusal``): each has its own event_ids."""


def by_horizon(
    state: JobState | None,
    envelope: cmd.Addressed,
    digest: str,
    now: datetime,
    book: MarkerBook,
) -> tuple[JobState | None, list[ev.Event]] | None:
    """Judge a user command by the dedupe horizon; None when it is neither refused nor known.

    Refused by age (``cronlog.idem.age_refusal``): one CommandRejected, named by
    ``refusal_key`` (``event_key``), no marker (each re-send past the horizon is refused
    again). A live marker with the command's digest: a duplicate (no events); with another
    digest: ``refuse_reuse``.
    """
    aged = age_refusal(envelope.issued_at, now, book.rules)
    if aged is not None:
        d = Decision(state, envelope.job_id)
        d.reject(envelope.command, *aged)
        return (replace(state, clock=now) if state is not None else None), d.events
    found = live_marker(book, envelope.job_id, envelope.idem_key, now)
    if found is None:
        return None
    if found.digest == digest or state is None:  # (no record: a marker guards nothing)
        return state, []
    return refuse_reuse(state, envelope, found.digest, digest, now, book)


def refuse_reuse(
    state: JobState,
    envelope: cmd.Addressed,
    first: str | None,
    digest: str,
    record_time: datetime,
    book: MarkerBook | None = None,
) -> tuple[JobState, list[ev.Event]]:
    """Refuse a command that re-uses an applied idem_key with other content, once.

    The refusal is marked applied under ``conflict_key(idem_key, digest)`` (with ``digest``;
    a worker command's in the worker window; a user command's in ``book`` too, for the
    horizon), so a re-delivery of the same conflicting command is a no-op; its events take
    their event_ids from that key (``event_key``). ``first`` is the first command's digest
    (None for a worker command: only whether it was the same is kept).
    """
    key = conflict_key(envelope.idem_key, digest)
    now = max(state.clock, record_time)
    if state.has_applied(key) or (
        book is not None and live_marker(book, envelope.job_id, key, now) is not None
    ):
        return state, []
    d = Decision(state, envelope.job_id)
    kind = type(envelope.command).__name__
    before = "" if first is None else f"digest {first}; "
    d.reject(
        envelope.command,
        RejectReason.IDEMPOTENCY_CONFLICT,
        f"idem_key {envelope.idem_key!r} was already used on job {envelope.job_id!r} by "
        f"another command ({before}this {kind}: {digest}); "
        "a key names one command, send a new key for a new one",
    )
    marked = state.with_renewal(key) if first is None else state.with_applied(key, digest)
    if book is not None and first is not None:
        book.put(envelope.job_id, key, new_marker(digest, envelope.issued_at, now, book.rules))
    return replace(marked, clock=now), d.events


def worker_sender(command: object) -> str | None:
    """The worker_id of a worker command carrying a lease token (today's workers), else None."""
    if isinstance(command, WORKER_COMMANDS) and command.lease_token:
        return command.worker_id
    return None


def sender_key(marker: str, worker_id: str) -> str:
    """The second marker of a worker command with a lease token: its key with its sender.

    Marked beside ``marker`` so that the same key and token arriving from another worker_id
    (a completion differing only in worker_id from an earlier refused one, issue 25) is told
    from a re-delivery and refused (``idempotency_conflict``), where it was dropped without
    any event. The token is in ``marker`` already; other fields under the same key, token and
    sender are the holder's own re-send, a re-delivery. A string, not a ``command_digest``:
    that costs ~0.1-0.2 ms per command here, on every renewal. Commands without a token
    (workers before lease tokens, the golden logs) keep one marker and the old rule.
    """
    return f"{marker}#sender:{worker_id}"


def marker_key(envelope: cmd.Addressed) -> str:
    """Return the key a command is deduplicated (and its events named) by.

    The idem_key; for a worker command carrying a lease token, the idem_key with the token's
    digest (``idem_key#digest``). Worker keys are predictable from public values (run, task,
    epoch): without the digest, a forged command sent first under the holder's key would be
    refused and yet take the key, and the holder's own command would then be dropped as a
    re-delivery (found by review: a completion lost, the task run again).
    """
    command = envelope.command
    if isinstance(command, WORKER_COMMANDS) and command.lease_token:
        return f"{envelope.idem_key}#{lease_digest(command.lease_token)}"
    return envelope.idem_key


def event_key(envelope: cmd.Addressed, event: ev.Event, at: datetime | None = None) -> str:
    """Return the key the adapter derives ``event``'s event_id from (with job_id and index).

    The command's ``marker_key``, except for the refusal of a re-used key
    (``idempotency_conflict``):
    ``conflict_key(idem_key, command_digest(command))``, since the first command's events own
    the ids of the idem_key (DESIGN.md invariant 6: one event_id, one content); and for a
    refusal by age (``idem_key_expired``, ``issued_at_in_future``): ``cronlog.idem.refusal_key``
    of the idem_key, its ``issued_at`` and ``at`` (the decision's now).
    """
    if isinstance(event, ev.CommandRejected):
        if event.reason is RejectReason.IDEMPOTENCY_CONFLICT:
            return conflict_key(envelope.idem_key, command_digest(envelope.command))
        if event.reason in AGE_REASONS and envelope.issued_at is not None:
            now = at if at is not None else envelope.issued_at
            return refusal_key(envelope.idem_key, envelope.issued_at, now)
    return marker_key(envelope)
