"""Replay of the commands log with the scheduler's own fold, and the checks of ``--verify``.

Pure with respect to Kafka: records come in, job records go to a store, run-events come out;
``services/cli/replay.py`` does the reading and writing. Rationale: docs/architecture.md,
"Replay".
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass

from cronlog import events as ev
from cronlog.errors import CronlogError
from cronlog.idem import IdemRules
from topology.fold.due_index import DueIndex
from topology.fold.folder import TICK_SLICE, BatchFolder, Outgoing, Record
from topology.fold.markers import FoldMarkers, MemoryMarkers
from topology.fold.state_cache import StateCache
from topology.kafka.topics import Topics
from topology.wire.codec import Codec
from topology.wire.state_codec import is_current, is_ledger, load_ledger, load_state


class Replayer:
    """Folds command records into ``store`` exactly as the scheduler does (``BatchFolder``).

    One process owning every partition: the due index starts empty for all of them, as the
    scheduler's does after a recovery from an empty table.

    Args:
        topics: topic names (the run-events name selects which outgoing messages are events).
        partitions: partition count of the commands topic.
        store: job_id (UTF-8 bytes) → stored JobState (``state_codec.dump_state``); a
            ``rocksdict.Rdict`` in raw mode, or a dict in tests. Should start empty.
        codec: the Avro codec (default: the one over ``schemas/``).
        cache: decoded states kept between batches, as the scheduler keeps them (tests fold
            with and without it to show they decide the same); None for ``cronlog replay``.
        tick_slice: most due jobs one Tick decides: the live schedulers' ``CRONLOG_TICK_SLICE``
            (a different slice decides some jobs on another Tick: other event ids).
        rules: the dedupe horizon: the live schedulers' ``CRONLOG_IDEM_HORIZON_S`` (another
            horizon refuses other commands). The markers of external commands are kept in
            ``markers`` (not in ``store``: the job records alone are what a digest covers).

    Determinism: the same records in the same per-partition order give the same store and the
    same events whatever the batch boundaries (``tests/property/test_replay_determinism.py``).
    """

    def __init__(
        self,
        topics: Topics,
        partitions: int,
        store: MutableMapping[bytes, bytes],
        codec: Codec | None = None,
        cache: StateCache | None = None,
        tick_slice: int = TICK_SLICE,
        rules: IdemRules | None = None,
    ) -> None:
        self.topics = topics
        self.store = store
        self.markers = MemoryMarkers()
        """The dedupe markers of external commands (``topology/fold/markers.py``)."""
        self.due = DueIndex()
        self.due.reset(range(partitions))
        self.cache = cache
        self.folder = BatchFolder(
            topics,
            partitions,
            self._load,
            self.due,
            codec or Codec(),
            tick_slice=tick_slice,
            cache=cache,
            markers=FoldMarkers(rules or IdemRules(), self.markers.load, self.markers.expiring),
        )
        self.jobs: dict[int, set[bytes]] = {p: set() for p in range(partitions)}
        """Keys written so far, per partition (what a partition's digest covers)."""
        self.commands = 0
        """Command records decoded so far (Ticks included, dead letters not)."""
        self.dead_letters = 0
        """Records dead-lettered so far."""
        self.appended: list[Outgoing] = []
        """The commands the last batch appended to the commands topic (continuation Ticks,
        the tenant ledger's commands): a simulated log appends them (``tests/replay/sim.py``);
        ``cronlog replay`` reads them from the log."""

    def _load(self, partition: int, job_id: str) -> bytes | None:
        return self.store.get(job_id.encode())

    def fold(self, records: Sequence[Record]) -> list[Outgoing]:
        """Fold one batch and write its job records to the store.

        Args:
            records: command records in log order (any mix of partitions).

        Returns:
            The batch's messages for run-events, in the order the scheduler delivers them
            (``ready``, ``replies`` and dead-letter copies are left out; counted in
            ``dead_letters``). Never raises for bad records: like the scheduler, it
            dead-letters them.
        """
        out = self.folder.fold(list(records))
        self.markers.write(out.markers)
        for job_id, w in out.writes.items():
            key = job_id.encode()
            self.store[key] = w.value
            self.jobs[w.partition].add(key)
        if self.cache is not None:
            self.cache.update(out.states)
        self.commands += out.commands
        self.dead_letters += sum(1 for s in out.sends if s.topic == self.topics.dead_letters)
        self.appended = [s for s in out.sends if s.topic == self.topics.commands]
        return [s for s in out.sends if s.topic == self.topics.run_events]

    def snapshot(self, partition: int) -> dict[bytes, bytes]:
        """Return the job records of ``partition`` as they are now (job_id bytes → bytes)."""
        return {key: self.store[key] for key in self.jobs[partition]}


def state_digest(items: Iterable[tuple[bytes, bytes]]) -> str:
    """Return the sha256 (hex) of job records, independent of their order.

    Args:
        items: (job_id bytes, stored JobState bytes) pairs; each key at most once.

    Returns:
        The digest of the length-prefixed pairs sorted by key (empty input: sha256 of nothing).
    """
    h = hashlib.sha256()
    for key, value in sorted(items):
        for part in (key, value):
            h.update(len(part).to_bytes(4, "big"))
            h.update(part)
    return h.hexdigest()


def latest_values(records: Iterable[tuple[bytes | None, bytes | None]]) -> dict[bytes, bytes]:
    """Read a compacted changelog partition as a table: the latest value per key.

    Args:
        records: (key, value) in offset order; a None value is a tombstone (deletes the key),
            a None key is ignored.

    Returns:
        key → value of the keys alive at the end.
    """
    table: dict[bytes, bytes] = {}
    for key, value in records:
        if key is None:
            continue
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value
    return table


def describe_difference(a: object, b: object, path: str = "") -> str:
    """Return where two values first differ, e.g. ``runs[0].tasks[1].epoch: 3 != 4``.

    Recurses into dataclasses, tuples and lists; elsewhere compares with ``==``. Returns ""
    when they are equal.
    """
    if a == b:
        return ""
    if type(a) is type(b) and dataclasses.is_dataclass(a) and not isinstance(a, type):
        for f in dataclasses.fields(a):
            found = describe_difference(
                getattr(a, f.name), getattr(b, f.name), f"{path}.{f.name}" if path else f.name
            )
            if found:
                return found
    if isinstance(a, tuple | list) and isinstance(b, tuple | list):
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            found = describe_difference(x, y, f"{path}[{i}]")
            if found:
                return found
        return f"{path}: {len(a)} items != {len(b)} items"
    return f"{path or 'value'}: {_short(a)} != {_short(b)}"


def _short(value: object, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def first_state_difference(
    live: Mapping[bytes, bytes], replayed: Mapping[bytes, bytes]
) -> str | None:
    """Name the first job (by job_id) whose record differs, and the first differing field.

    Args:
        live: job_id bytes → stored bytes, from the live table's changelog.
        replayed: the same shape, from the replay.

    Returns:
        None if equal; else e.g. ``job 'j1': clock: datetime(…) != datetime(…) (live != replay)``.
        Records of two formats (``state_codec``: one written before an upgrade) that decode
        to the same state are equal; of one format, they must be equal byte for byte.
    """
    for key in sorted(set(live) | set(replayed)):
        a, b = live.get(key), replayed.get(key)
        if a == b:
            continue
        name = key.decode(errors="replace")
        if a is None or b is None:
            return f"job {name!r}: only in the {'replay' if a is None else 'live table'}"
        try:
            field = (
                describe_difference(load_ledger(a), load_ledger(b))
                if is_ledger(a)
                else describe_difference(load_state(a), load_state(b))
            )
        except CronlogError as exc:  # StateDecodeError: the unreadable record is the difference
            field = f"unreadable record ({exc})"
        if not field and is_current(a) != is_current(b):
            continue  # the same state, written in another format
        return f"job {name!r}: {field or 'bytes differ'} (live != replay)"
    return None


@dataclass(frozen=True, slots=True)
class EventVerdict:
    """How one partition's live run-events compare with the replay's.

    Attributes:
        ok: the live events (deduplicated) are exactly the replay's first ``live`` events,
            and cover at least every event of the acknowledged commands.
        live: distinct live events (by event_id).
        duplicates: live records dropped as re-deliveries (same event_id, same content).
        replayed: events the replay produced for the partition.
        acknowledged: how many of those come from commands the live fold acknowledged.
        detail: the first difference when not ok; else a note on any tail not folded live.
    """

    ok: bool
    live: int
    duplicates: int
    replayed: int
    acknowledged: int
    detail: str


def _label(i: int, e: ev.RunEvent) -> str:
    return f"event #{i} {e.event_id} ({type(e.event).__name__}, job {e.job_id!r})"


_RUN_ENDS = (ev.RunSucceeded, ev.RunFailed, ev.RunCancelled)


def _written_before_run_end_tenants(live: ev.RunEvent, replayed: ev.RunEvent) -> ev.RunEvent:
    """Return ``live`` with the replay's tenant, when it is a run end written without one.

    Schema v4 added ``tenant`` to run ends (default ""): a log written before the upgrade
    still verifies, comparing what both versions wrote.
    """
    body, new = live.event, replayed.event
    if isinstance(body, _RUN_ENDS) and type(new) is type(body) and body.tenant == "":
        return dataclasses.replace(live, event=dataclasses.replace(body, tenant=new.tenant))
    return live


def compare_events(
    live: Iterable[ev.RunEvent], replayed: Sequence[ev.RunEvent], acknowledged: int
) -> EventVerdict:
    """Compare one partition of run-events with what the replay produced for it.

    Args:
        live: the partition's records in offset order, re-deliveries included.
        replayed: the replay's events for the partition, in fold order.
        acknowledged: how many of ``replayed`` come from commands below the live fold's
            committed offset (the live topic must hold at least those).

    Returns:
        The verdict. A live re-delivery (same event_id) must be identical to the first
        delivery (invariant 6) and is then dropped; replayed events past the live ones are
        commands the live fold had not published yet (a note, not a failure).
    """
    first: dict[str, ev.RunEvent] = {}
    distinct: list[ev.RunEvent] = []
    duplicates = 0
    for e in live:
        seen = first.get(e.event_id)
        if seen is None:
            first[e.event_id] = e
            distinct.append(e)
            continue
        duplicates += 1
        if seen != e:
            return EventVerdict(
                False,
                len(distinct),
                duplicates,
                len(replayed),
                acknowledged,
                f"live re-delivery of {e.event_id} differs from its first "
                f"delivery: {describe_difference(seen, e)}",
            )
    counts = (len(distinct), duplicates, len(replayed), acknowledged)
    for i, (a, b) in enumerate(zip(distinct, replayed, strict=False)):
        if a != b and _written_before_run_end_tenants(a, b) == b:
            continue
        if a != b:
            what = (
                describe_difference(a, b)
                if a.event_id == b.event_id
                else f"live has {_label(i, a)}, replay has {_label(i, b)}"
            )
            return EventVerdict(False, *counts, f"{_label(i, a)}: {what} (live != replay)")
    if len(distinct) > len(replayed):
        extra = distinct[len(replayed)]
        return EventVerdict(
            False,
            *counts,
            f"live has {len(distinct) - len(replayed)} events "
            f"the replay does not produce, from {_label(len(replayed), extra)}",
        )
    if len(distinct) < acknowledged:
        gone = replayed[len(distinct)]
        return EventVerdict(
            False,
            *counts,
            f"live lacks {acknowledged - len(distinct)} events "
            f"of acknowledged commands, from {_label(len(distinct), gone)}",
        )
    tail = len(replayed) - len(distinct)
    note = f"; {tail} more from commands not yet folded live" if tail else ""
    return EventVerdict(True, *counts, f"{len(distinct)} events identical{note}")
