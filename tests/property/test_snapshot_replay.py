"""Bounded replay: a snapshot taken at any offsets, written and read back, then the tail folded,
gives exactly what a replay from offset 0 gives (job records, due and ready indexes, and
run-events), for every golden log and random cut points per partition.

The golden logs (``tests/replay/logs``) cover cron catch-up, DST, DAGs, overlap, reruns,
``after`` jobs, deletion, dead letters, leases and the tenant ledger (its record and the
commands it appends), so a cut lands inside each of them somewhere.
"""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.property.sequences import COMMON, EXAMPLES
from tests.replay.golden import LOGS, Log, read_log
from topology.fold.folder import Record
from topology.kafka.config import KafkaSettings
from topology.kafka.topics import Topics
from topology.snapshots.replay import Replayer
from topology.snapshots.snapshot import PartitionSnapshot, fold_partition, seed, take
from topology.snapshots.wire import (
    assemble,
    decode_manifest,
    encode_chunks,
    encode_manifest,
    make_manifest,
    snapshot_id,
)
from topology.wire.codec import Codec

CODEC = Codec()
GOLDEN = sorted(p for p in LOGS.glob("*.jsonl") if not p.name.endswith(".events.jsonl"))
LOADED = {p.name: read_log(p) for p in GOLDEN}


def _batches(records: Sequence[Record], size: int) -> list[list[Record]]:
    return [list(records[i : i + size]) for i in range(0, len(records), size)]


def _by_partition(log: Log) -> dict[int, list[Record]]:
    return {p: [r for r in log.records if r.partition == p] for p in range(log.partitions)}


def _fold(
    replayer: Replayer, recs: Sequence[Record], size: int
) -> tuple[list[bytes], str | None, int | None]:
    events: list[bytes] = []
    last, time_ms = None, None
    for batch in _batches(recs, size):
        sends = replayer.fold(batch)
        events += [s.value for s in sends]
        if sends:
            last = CODEC.decode_event(sends[-1].value).event_id
        time_ms = batch[-1].timestamp_ms
    return events, last, time_ms


def _wire(parts: list[PartitionSnapshot]) -> list[PartitionSnapshot]:
    """The snapshot as a reader gets it back: chunks and manifest encoded and decoded."""
    sid = snapshot_id(parts)
    chunks = encode_chunks(sid, parts)
    manifest = decode_manifest(encode_manifest(make_manifest(sid, None, 0, parts, chunks, (0, 9))))
    assert manifest.snapshot_id == sid
    return assemble(manifest, chunks)


def _check(log: Log, cuts: dict[int, int], size: int) -> None:
    topics = Topics.of(KafkaSettings(partitions=log.partitions))
    by_p = _by_partition(log)
    full = Replayer(topics, log.partitions, {}, CODEC)
    before = Replayer(topics, log.partitions, {}, CODEC)
    parts = []
    head_events: dict[int, list[bytes]] = {}
    for p, recs in by_p.items():
        k = cuts[p]
        head_events[p], last, time_ms = _fold(before, recs[:k], size)
        parts.append(take(before, p, k, time_ms, last))
    after = Replayer(topics, log.partitions, {}, CODEC)
    for snap in _wire(parts):
        seed(after, snap)
    for p, recs in by_p.items():
        k = cuts[p]
        whole, _, _ = _fold(full, recs, size)
        tail, _, _ = _fold(after, recs[k:], size)
        assert whole == head_events[p] + tail, f"{log.name} partition {p} cut at {k}: events"
        assert after.snapshot(p) == full.snapshot(p), f"{log.name} partition {p}: job records"
        assert after.due.entries(p) == full.due.entries(p), f"{log.name} {p}: due index"
        assert after.folder.ready.entries(p) == full.folder.ready.entries(p), "ready index"
    assert dict(after.store) == dict(full.store)
    assert after.markers.values == full.markers.values  # the dedupe horizon's markers too


@settings(COMMON, max_examples=max(20, EXAMPLES))
@given(data=st.data(), name=st.sampled_from(sorted(LOADED)), size=st.sampled_from([1, 7, 500]))
def test_snapshot_at_any_offsets_then_the_tail_equals_replay_from_zero(
    data: st.DataObject, name: str, size: int
) -> None:
    log = LOADED[name]
    counts = {p: len(r) for p, r in _by_partition(log).items()}
    cuts = {p: data.draw(st.integers(0, n), label=f"cut {p}") for p, n in counts.items()}
    _check(log, cuts, size)


def test_every_golden_log_cut_in_the_middle_and_at_the_ends() -> None:
    for log in LOADED.values():
        counts = {p: len(r) for p, r in _by_partition(log).items()}
        for cut in ({p: 0 for p in counts}, {p: n // 2 for p, n in counts.items()}, counts):
            _check(log, cut, 500)


def test_a_snapshot_of_a_snapshot_is_the_same_snapshot() -> None:
    """Seeding and taking again changes nothing (the chain of snapshots does not drift)."""
    log = LOADED["tenant_ledger.jsonl"]
    topics = Topics.of(KafkaSettings(partitions=log.partitions))
    first = Replayer(topics, log.partitions, {}, CODEC)
    parts = []
    for p, recs in _by_partition(log).items():
        last, time_ms, _ = fold_partition(first, CODEC, _batches(recs, 50), None)
        parts.append(take(first, p, len(recs), time_ms, last))
    again = Replayer(topics, log.partitions, {}, CODEC)
    for snap in _wire(parts):
        seed(again, snap)
    assert [take(again, s.partition, s.offset, s.time_ms, s.last_event_id) for s in parts] == parts
