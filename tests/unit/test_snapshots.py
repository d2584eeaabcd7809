"""The snapshot's wire form refuses what it cannot trust (a missing or damaged chunk, records
that do not match the manifest), chunks stay under the record limit, a usable snapshot is one
the log still reaches; and the retention knobs and their drift rule."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from topology.kafka.config import KafkaSettings
from topology.kafka.retention import RetentionDrift
from topology.kafka.topics import (
    DAY_MS,
    SNAPSHOT_MARGIN_MS,
    Topics,
    snapshot_retention_ms,
    topic_specs,
)
from topology.snapshots.snapshot import Entry, PartitionSnapshot, SnapshotError, newest
from topology.snapshots.wire import (
    CHUNK_BYTES,
    assemble,
    decode_manifest,
    encode_chunks,
    encode_manifest,
    make_manifest,
    snapshot_id,
)


def _parts(jobs: int = 3, size: int = 10) -> list[PartitionSnapshot]:
    return [
        PartitionSnapshot(
            p,
            10 + p,
            1_000 + p,
            tuple(
                Entry(f"j{p}-{i:04d}".encode(), b"v2:" + b"x" * size, 5_000 + i, None)
                for i in range(jobs)
            ),
            f"e{p}",
        )
        for p in range(2)
    ]


def _written(parts: list[PartitionSnapshot]) -> tuple[bytes, list[bytes]]:
    sid = snapshot_id(parts)
    chunks = encode_chunks(sid, parts)
    manifest = make_manifest(sid, None, 7, parts, chunks, (0, len(chunks) - 1))
    return encode_manifest(manifest), chunks


def test_a_snapshot_reads_back_as_written_and_ignores_other_snapshots_chunks() -> None:
    parts = _parts()
    raw, chunks = _written(parts)
    other_raw, other = _written(_parts(jobs=1))
    manifest = decode_manifest(raw)
    assert manifest.offsets == {0: 10, 1: 11} and manifest.time_ms == 1_001
    assert assemble(manifest, [other[0], *chunks, chunks[0], *other]) == parts
    assert decode_manifest(other_raw).snapshot_id != manifest.snapshot_id


def test_a_missing_or_damaged_chunk_makes_the_snapshot_unusable() -> None:
    raw, chunks = _written(_parts())
    manifest = decode_manifest(raw)
    with pytest.raises(SnapshotError, match="1 of its 2 chunks"):
        assemble(manifest, chunks[:1])
    with pytest.raises(SnapshotError, match="damaged snapshot chunk"):
        assemble(manifest, [chunks[0], b"\xff\x00garbage"])
    forged = encode_chunks(manifest.snapshot_id, _parts(jobs=4))
    with pytest.raises(SnapshotError, match="sha256 differs"):
        assemble(manifest, forged)
    with pytest.raises(SnapshotError, match="damaged snapshot manifest"):
        decode_manifest(raw[:5])


def test_large_partitions_are_split_into_chunks_under_the_record_limit() -> None:
    parts = _parts(jobs=40, size=60_000)  # 2.4 MB per partition
    raw, chunks = _written(parts)
    assert len(chunks) > 4
    assert all(len(c) < CHUNK_BYTES + 70_000 < 1_000_000 for c in chunks)
    assert assemble(decode_manifest(raw), chunks) == parts


def test_newest_usable_snapshot_is_one_the_log_still_reaches_and_does_not_pass() -> None:
    raw, _ = _written(_parts())
    m = decode_manifest(raw)  # offsets {0: 10, 1: 11}
    assert list(newest([m], {0: 0, 1: 0}, {0: 10, 1: 11})) == [m]
    assert list(newest([m], {0: 11, 1: 0}, {0: 20, 1: 20})) == []  # head deleted past it
    assert list(newest([m], {0: 0, 1: 0}, {0: 9, 1: 20})) == []  # it covers past the end
    assert list(newest([m], {0: 0}, {0: 20})) == []  # other partitions


def test_retention_defaults_and_the_snapshots_outlive_the_commands() -> None:
    settings = KafkaSettings(partitions=3)
    specs = {s.name: s.config for s in topic_specs(settings)}
    t = Topics.of(settings)
    for name in (t.commands, t.dead_letters):
        assert specs[name]["retention.ms"] == str(30 * DAY_MS)
    # run-events stay for ever by default: a read model rebuilt from them learns every job
    assert specs[t.run_events]["retention.ms"] == "-1"
    assert specs[t.snapshots]["retention.ms"] == str(30 * DAY_MS + SNAPSHOT_MARGIN_MS)
    longer = KafkaSettings(commands_retention_days=7, run_events_retention_days=60)
    assert snapshot_retention_ms(longer) == 60 * DAY_MS + SNAPSHOT_MARGIN_MS
    assert snapshot_retention_ms(KafkaSettings(commands_retention_days=-1)) == -1
    with pytest.raises(ValidationError, match="commands_retention_days"):
        KafkaSettings(commands_retention_days=0)


def test_only_a_retention_that_keeps_less_is_held_back() -> None:
    assert RetentionDrift("c", -1, 30 * DAY_MS).shortens
    assert RetentionDrift("c", 60 * DAY_MS, 30 * DAY_MS).shortens
    assert not RetentionDrift("c", 30 * DAY_MS, -1).shortens
    assert not RetentionDrift("c", 7 * DAY_MS, 30 * DAY_MS).shortens
    assert "-1 (for ever) -> 2592000000 (30.0 d)" in RetentionDrift("c", -1, 30 * DAY_MS).describe()


def test_a_forged_manifest_with_a_huge_chunk_count_is_a_snapshot_error_not_a_memory_error() -> None:
    """Adversarial run: a manifest is data on a topic; its count must not size an allocation."""
    from topology.snapshots.snapshot import Manifest, SnapshotError
    from topology.snapshots.wire import assemble, decode_manifest, encode_manifest

    forged = decode_manifest(
        encode_manifest(Manifest("1-aaaaaaaaaaaa", None, 1, 1, 2**31 - 1, "0" * 64, 0, 0, ()))
    )
    with pytest.raises(SnapshotError, match="0 of its 2147483647 chunks"):
        assemble(forged, [])
