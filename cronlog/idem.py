"""The dedupe horizon: which re-sent external command is a duplicate, which is too old.

Pure rules; the markers themselves live in a per-partition marker store
(``topology/fold/markers.py``) that the fold reaches through ``MarkerBook``. Rationale and the
rules borrowed: docs/architecture.md, "The dedupe horizon".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from cronlog.ids import horizon_refusal_key
from cronlog.time import to_ms
from cronlog.vocabulary import RejectReason

DEFAULT_HORIZON = timedelta(hours=24)
"""How long an external command's idem_key is remembered: 24 h, the common norm for
idempotency keys (Stripe keeps its keys 24 h; the IETF draft "The Idempotency-Key HTTP Header
Field" leaves it to the resource and asks that it be documented)."""
DEFAULT_MAX_FUTURE = timedelta(hours=1)
"""How far ``issued_at`` may be ahead of the log time (a sender's clock running fast): 1 h,
the default of Kafka's ``log.message.timestamp.after.max.ms`` (KIP-937)."""


@dataclass(frozen=True, slots=True)
class IdemRules:
    """The horizon of one fold; every scheduler and ``cronlog replay`` must use the same.

    Attributes:
        horizon: an external command issued longer ago than this (log time minus its
            ``issued_at``) is refused with ``idem_key_expired``; its marker is kept at least
            this long after the later of its ``issued_at`` and its first application.
            Default ``DEFAULT_HORIZON`` (24 h).
        max_future: an ``issued_at`` further ahead of the log time than this is refused with
            ``issued_at_in_future`` (else a fast clock could pin a marker, or outlive it).
            Default ``DEFAULT_MAX_FUTURE`` (1 h).
    """

    horizon: timedelta = DEFAULT_HORIZON
    max_future: timedelta = DEFAULT_MAX_FUTURE


@dataclass(frozen=True, slots=True)
class Marker:
    """What the marker store keeps of one applied external command.

    Attributes:
        digest: its ``command_digest`` (another command under the key is a conflict).
        expires_at: aware UTC; the marker holds up to this log time included, and counts as
            gone after it (whether or not a Tick has deleted it yet).
    """

    digest: str
    expires_at: datetime


class MarkerBook(Protocol):
    """The markers of external commands as one decision sees them.

    The fold's batch overlay over its partition's marker store; ``DictMarkers`` in tests.
    """

    rules: IdemRules

    def get(self, job_id: str, key: str) -> Marker | None:
        """Return the marker of ``key`` on ``job_id``, or None (expired ones may be returned)."""
        ...

    def put(self, job_id: str, key: str, marker: Marker) -> None:
        """Keep ``marker`` for ``key`` on ``job_id``."""
        ...


@dataclass
class DictMarkers:
    """An in-memory ``MarkerBook`` (tests, the property Driver): (job_id, key) -> Marker."""

    rules: IdemRules = field(default_factory=IdemRules)
    markers: dict[tuple[str, str], Marker] = field(default_factory=dict)

    def get(self, job_id: str, key: str) -> Marker | None:
        """Return the marker of ``key`` on ``job_id``, or None."""
        return self.markers.get((job_id, key))

    def put(self, job_id: str, key: str, marker: Marker) -> None:
        """Keep ``marker`` for ``key`` on ``job_id``."""
        self.markers[(job_id, key)] = marker


def live_marker(book: MarkerBook, job_id: str, key: str, now: datetime) -> Marker | None:
    """Return the marker of ``key`` if it holds at ``now`` (``now <= expires_at``), else None.

    Determinism: judged by ``expires_at`` against the fold's now only, never by whether a
    Tick has deleted the marker yet, so batch boundaries and expiry timing change nothing.
    """
    marker = book.get(job_id, key)
    return marker if marker is not None and now <= marker.expires_at else None


def new_marker(digest: str, issued_at: datetime | None, now: datetime, rules: IdemRules) -> Marker:
    """Return the marker of a command applied at ``now``.

    It expires ``rules.horizon`` after the later of ``now`` and ``issued_at``: any re-send
    that ``age_refusal`` lets through (issued at most ``horizon`` before its own log time)
    then still finds it, even from a sender whose clock runs ahead (by at most
    ``max_future``, which bounds how long a marker lives: ``horizon + max_future``).
    """
    start = now if issued_at is None else max(now, issued_at)
    return Marker(digest, start + rules.horizon)


def age_refusal(
    issued_at: datetime | None, now: datetime, rules: IdemRules
) -> tuple[RejectReason, str] | None:
    """Return why a command issued at ``issued_at`` may not be decided at ``now``, or None.

    Args:
        issued_at: the envelope's ``issued_at`` (aware UTC), None when the sender set none.
        now: the fold's now (log time), aware UTC.
        rules: the horizon.

    Returns:
        ``idem_key_expired`` (older than the horizon: its marker may be gone, so it can
        neither be told a duplicate nor applied safely), ``issued_at_in_future`` (ahead of
        the log by more than ``max_future``), or None (no ``issued_at``: not judged).
    """
    if issued_at is None:
        return None
    age = now - issued_at
    if age > rules.horizon:
        return RejectReason.IDEM_KEY_EXPIRED, (
            f"issued_at {to_ms(issued_at)} ms is {age} before the log time: past the "
            f"{rules.horizon} dedupe horizon, the command may have been applied already; "
            "send it again under a new idem_key if it is still wanted"
        )
    if -age > rules.max_future:
        return RejectReason.ISSUED_AT_IN_FUTURE, (
            f"issued_at {to_ms(issued_at)} ms is {-age} ahead of the log time (at most "
            f"{rules.max_future}): check the sender's clock"
        )
    return None


def refusal_key(idem_key: str, issued_at: datetime, now: datetime) -> str:
    """Return the key an age refusal's event_id is derived from (``horizon_refusal_key``).

    Not the idem_key: its first command's events own those ids, and each re-send past the
    horizon is a refusal of its own (another now: another id; a re-delivery of the same
    record folds at the same now: the same id and content).
    """
    return horizon_refusal_key(idem_key, to_ms(issued_at), to_ms(now))
