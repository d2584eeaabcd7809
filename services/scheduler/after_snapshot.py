"""Snapshots of the after relay's index, as JSON records on ``cronlog.after-relay``.

A snapshot is the AfterIndex state after folding every run-event below ``offsets`` (per
run-events partition); a starting relay folds only the log after it. Pure (no I/O). Design:
docs/architecture.md, "Job after job: the relay".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from cronlog.errors import CronlogError
from cronlog.time import from_ms, to_ms

T = TypeVar("T")

SNAPSHOT_KEY = b"after-index/v1"
"""The one key of the snapshot topic (compaction keeps its latest records); the version is in
the key so that a change of meaning starts over from the log instead of rereading old bytes."""
FORMAT = 1
"""The ``format`` field this module writes and reads."""
SNAPSHOT_MAX_BYTES = 900_000
"""Largest encoded snapshot written, bytes: under the producer's and topic's 1 MB record
limit. A larger one is not written (the relay logs it and keeps folding from the last one)."""


class SnapshotError(CronlogError):
    """A snapshot record is not JSON of this module's format (another version, or damaged)."""


@dataclass(frozen=True, slots=True)
class AfterSnapshot:
    """The relay's index as it stood after every run-event below ``offsets``.

    Attributes:
        offsets: run-events partition → the first offset NOT folded in (a committed offset:
            every command asked for by the events below it was delivered).
        upstream_of: downstream job → the upstream job it is ``after`` (one per after job).
        ticks: active run_id → its ``scheduled_for`` (aware UTC; one per active run).
    """

    offsets: dict[int, int]
    upstream_of: dict[str, str]
    ticks: dict[str, datetime]

    def usable(self, start: Mapping[int, int]) -> bool:
        """Return True if the relay may start from this snapshot at ``start`` offsets.

        Args:
            start: run-events partition → the offset the relay resumes sending from.

        Returns:
            True when it has the same partitions and covers no partition past ``start``
            (a relay that committed lower offsets after it was written makes it unusable:
            its index would already hold events that are going to be folded again).
        """
        return set(self.offsets) == set(start) and all(
            offset <= start[p] for p, offset in self.offsets.items()
        )


def encode_snapshot(snapshot: AfterSnapshot) -> bytes:
    """Return the snapshot as compact JSON (UTF-8); ticks as epoch milliseconds.

    Determinism: keys are sorted, so equal snapshots give equal bytes.
    """
    doc = {
        "format": FORMAT,
        "offsets": {str(p): o for p, o in snapshot.offsets.items()},
        "upstream_of": snapshot.upstream_of,
        "ticks_ms": {run_id: to_ms(at) for run_id, at in snapshot.ticks.items()},
    }
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


def decode_snapshot(data: bytes) -> AfterSnapshot:
    """Return the snapshot ``encode_snapshot`` wrote as ``data``.

    Raises:
        SnapshotError: not JSON, another ``format``, or a field of the wrong shape.
    """
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise SnapshotError(f"not JSON: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise SnapshotError(f"not a format-{FORMAT} snapshot")
    offsets = _str_map(doc, "offsets", int)
    ticks = _str_map(doc, "ticks_ms", int)
    try:
        parts = {int(p): o for p, o in offsets.items()}
    except ValueError as exc:
        raise SnapshotError(f"a partition that is not a number: {exc}") from exc
    return AfterSnapshot(
        parts,
        _str_map(doc, "upstream_of", str),
        {run_id: from_ms(ms) for run_id, ms in ticks.items()},
    )


def _str_map(doc: dict[str, object], name: str, kind: type[T]) -> dict[str, T]:
    value = doc.get(name)
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, kind) and not isinstance(v, bool)
        for k, v in value.items()
    ):
        raise SnapshotError(f"{name} must map strings to {kind.__name__} values")
    return dict(value)
