"""``cronlog replay``: rebuild the job table from ``cronlog.commands`` with the scheduler's fold.

Reads every partition from the newest snapshot (``services/cli/replay_start.py``; offset 0
without one) up to offsets sampled once at start (or up to ``--until``), writes a fresh
rocksdict state dir (job_id → stored JobState), and optionally verifies it against the live
table and run-events, or re-emits the replayed run-events to a topic.
What ``--verify`` compares, and what may legitimately differ: docs/architecture.md, "Replay".
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Consumer, Message
from rocksdict import Options, Rdict

from cronlog.time import iso, to_ms
from services.cli.replay_io import EventSink, LiveSide, recheck_snapshots, verify_partition
from services.cli.replay_prep import (
    MANIFEST,
    TABLE_DIR,
    ReplayError,
    check_target,
    prepare_state_dir,
)
from services.cli.replay_start import Start, StartError, choose_start
from services.scheduler.settings import SchedulerSettings
from services.snapshotter.take import record_of
from topology.fold.folder import Outgoing
from topology.fold.markers import changelog_key, marker_of
from topology.kafka.config import KafkaSettings
from topology.kafka.log_reader import (
    committed,
    offset_of,
    offsets_after,
    partition_count,
    read_partition,
    reader,
    watermarks,
)
from topology.kafka.topics import Topics
from topology.snapshots.replay import EventVerdict, Replayer, state_digest
from topology.snapshots.snapshot import seed
from topology.wire.registry import codec_for


@dataclass(frozen=True, slots=True)
class ReplayOptions:
    """What ``replay`` does.

    Attributes:
        state_dir: where the rocksdict table goes (``<state_dir>/jobs``); None: a new temp dir.
        force: reuse a non-empty ``state_dir`` (its ``jobs/`` and ``replay.json`` are removed).
        verify: compare with the live changelog table and run-events (not with ``until``).
        to_topic: re-emit the replayed run-events to this topic (created if missing).
        until: fold only the records appended at or before this aware instant.
        batch_size: records per fold batch (the outcome does not depend on it).
        from_zero: ignore the snapshots; read every partition from offset 0.
    """

    state_dir: Path | None = None
    force: bool = False
    verify: bool = False
    to_topic: str | None = None
    until: datetime | None = None
    batch_size: int = 500
    from_zero: bool = False


@dataclass
class PartitionResult:
    """One partition's replay (and, with ``verify``, its comparison).

    Attributes:
        partition: the commands partition.
        end: records at offsets ``[0, end)`` were folded (those below ``start`` through
            the snapshot started from).
        start: the first offset read (the snapshot's offset; 0 without one).
        events: run-events the replay produced.
        digest: ``state_digest`` of the partition's replayed job records at ``end``.
        jobs: job records of the partition at ``end``.
        acknowledged: the live fold's committed offset compared at (verify only).
        state_detail: None when the live table equals the replay at ``acknowledged``; else
            the first difference (verify only).
        events_verdict: the run-events comparison (verify only).
        snapshots_checked: later snapshots whose digest the replay matched (verify only).
        snapshot_detail: None, or the first snapshot that differs from the replay.
    """

    partition: int
    end: int
    start: int = 0
    events: int = 0
    digest: str = ""
    jobs: int = 0
    acknowledged: int | None = None
    state_detail: str | None = None
    events_verdict: EventVerdict | None = None
    snapshots_checked: int = 0
    snapshot_detail: str | None = None

    @property
    def ok(self) -> bool:
        """True unless a verification found a difference."""
        return (
            self.state_detail is None
            and self.snapshot_detail is None
            and (self.events_verdict is None or self.events_verdict.ok)
        )


@dataclass
class ReplayReport:
    """The whole replay: per-partition results, totals, where the state is."""

    state_dir: Path
    partitions: list[PartitionResult] = field(default_factory=list)
    records: int = 0
    dead_letters: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    snapshot_id: str | None = None
    """The snapshot the replay started from (None: offset 0)."""

    @property
    def ok(self) -> bool:
        """True unless a partition differs from the live system."""
        return all(p.ok for p in self.partitions)

    @property
    def rate(self) -> float:
        """Records folded per second of wall time (reading included)."""
        return self.records / self.seconds if self.seconds > 0 else 0.0


def run_replay(
    settings: KafkaSettings, opts: ReplayOptions, progress: Callable[[int, int], None] | None = None
) -> ReplayReport:
    """Replay ``cronlog.commands`` into a fresh state dir.

    Args:
        settings: bootstrap and topic prefix.
        opts: what to do.
        progress: called as ``progress(done, total)`` in records after each batch.

    Returns:
        The report; ``report.ok`` is False if ``verify`` found a difference.

    Raises:
        ReplayError: bad options, a non-empty state dir, a missing commands topic, or a
            partition whose head was deleted and that no kept snapshot covers.
        topology.kafka.log_reader.LogReadError: the cluster could not be read.

    Determinism: the same log gives the same state dir and events, bit for bit.
    """
    if opts.verify and opts.until is not None:
        raise ReplayError(
            "--verify compares with the live system now; it cannot be combined with --until"
        )
    topics = Topics.of(settings)
    if opts.to_topic is not None:
        check_target(topics, opts.to_topic)
    consumer = reader(settings)
    try:
        return _run(settings, consumer, topics, opts, progress)
    finally:
        consumer.close()


@dataclass
class _Bounds:
    """Offsets sampled once at start: where to stop, and where the live fold stood."""

    ends: dict[int, int]
    acked: dict[int, int | None]
    live: LiveSide | None
    start: Start


def _bounds(
    settings: KafkaSettings, consumer: Consumer, topics: Topics, n: int, opts: ReplayOptions
) -> _Bounds:
    # Sampling order matters: the live fold's committed offsets first, then the live topics'
    # ends, then the commands' ends, so everything live we compare was caused by commands the
    # replay reads (docs/architecture.md, "Replay").
    acked = committed(settings, topics.scheduler_app, topics.commands, n) if opts.verify else {}
    live = LiveSide.sample(consumer, topics, n) if opts.verify else None
    marks = watermarks(consumer, topics.commands, n)
    low = {p: lo for p, (lo, _) in marks.items()}
    ends = {p: high for p, (_, high) in marks.items()}
    if opts.until is not None:
        ends = offsets_after(consumer, topics.commands, n, to_ms(opts.until))
    # verify compares the state at the committed offset: the start must not be past it
    upto = {p: min(e, a) if (a := acked.get(p)) is not None else e for p, e in ends.items()}
    try:
        start = choose_start(
            consumer, topics, low, upto, verify=opts.verify, from_zero=opts.from_zero
        )
    except StartError as exc:
        raise ReplayError(str(exc)) from exc
    return _Bounds(ends, acked, live, start)


def _run(
    settings: KafkaSettings,
    consumer: Consumer,
    topics: Topics,
    opts: ReplayOptions,
    progress: Callable[[int, int], None] | None,
) -> ReplayReport:
    n = partition_count(consumer, topics.commands)
    if n is None:
        raise ReplayError(
            f"topic {topics.commands!r} does not exist (check "
            f"CRONLOG_TOPIC_PREFIX={settings.topic_prefix!r} and KAFKA_BOOTSTRAP)"
        )
    state_dir = prepare_state_dir(opts.state_dir, opts.force)
    bounds = _bounds(settings, consumer, topics, n, opts)
    report = ReplayReport(state_dir)
    report.notes += bounds.start.notes
    if bounds.start.manifest is not None:
        report.snapshot_id = bounds.start.manifest.snapshot_id
    if opts.verify and all(a is None for a in bounds.acked.values()):
        report.notes.append(
            "the scheduler's group has no committed offsets: compared at the high-water marks"
        )
    total = sum(max(0, e - bounds.start.offset(p)) for p, e in bounds.ends.items())
    started = time.perf_counter()
    codec = codec_for(settings)  # Confluent-framed commands need the registry, as in the fold
    db = Rdict(str(state_dir / TABLE_DIR), options=Options(raw_mode=True))
    try:
        store: MutableMapping[bytes, bytes] = db  # type: ignore[assignment]  # untyped rocksdict
        live = SchedulerSettings()  # the fold's own settings: its slice and horizon
        replayer = Replayer(
            topics, n, store, codec, tick_slice=live.tick_slice, rules=live.idem_rules()
        )
        for part in bounds.start.parts.values():
            seed(replayer, part)
        with_markers = bounds.start.manifest is None or any(  # else a snapshot from before them
            marker_of(e.key) is not None for s in bounds.start.parts.values() for e in s.entries
        )
        sink = EventSink(settings, opts.to_topic, n) if opts.to_topic else None
        for p in range(n):
            ack = bounds.acked.get(p)
            at = _Partition(
                p,
                bounds.start.offset(p),
                max(bounds.ends[p], bounds.start.offset(p)),
                ack if ack is not None else bounds.ends[p],
                bounds.start.checks.get(p, []),
            )
            result = _replay_partition(
                consumer, replayer, topics, at, opts, sink, report, progress, total
            )
            checked, detail = recheck_snapshots(
                consumer, topics, bounds.start.later, p, at.differing
            )
            result.snapshots_checked += checked
            result.snapshot_detail = result.snapshot_detail or detail
            if bounds.live is not None:
                result.acknowledged = at.ack_at
                result.state_detail, result.events_verdict = verify_partition(
                    consumer,
                    topics,
                    bounds.live,
                    p,
                    (at.snapshot, at.kept, at.acked_events),
                    codec,
                    anchor=(bounds.start.manifest is not None, bounds.start.anchor(p)),
                    markers=with_markers,
                )
            report.partitions.append(result)
        if sink is not None:
            sink.close()
    finally:
        db.close()
    report.seconds = time.perf_counter() - started
    report.dead_letters = replayer.dead_letters
    _write_manifest(report, topics, opts)
    return report


@dataclass
class _Partition:
    """One partition's bounds and what verify needs from its replay."""

    p: int
    start: int
    end: int
    ack_at: int
    checks: list[tuple[int, str, str]]
    """(offset, snapshot id, state sha256) of the snapshots to check on the way."""
    snapshot: dict[bytes, bytes] = field(default_factory=dict)
    kept: list[bytes] = field(default_factory=list)
    acked_events: int = 0
    differing: list[tuple[int, str, str, dict[bytes, bytes]]] = field(default_factory=list)
    """(offset, snapshot id, how the digests differ, the replay's records there) of the
    snapshots whose digest is not the replay's."""


def _replay_partition(
    consumer: Consumer,
    replayer: Replayer,
    topics: Topics,
    at: _Partition,
    opts: ReplayOptions,
    sink: EventSink | None,
    report: ReplayReport,
    progress: Callable[[int, int], None] | None,
    total: int,
) -> PartitionResult:
    result = PartitionResult(at.p, at.end, at.start)
    snapped = False
    # offsets at which the state is looked at: the live fold's committed offset, and the
    # later snapshots to check; each once every record below it is folded
    stops = sorted({o for o, _, _ in at.checks} | {at.ack_at})

    def fold(msgs: list[Message]) -> None:
        sends: list[Outgoing] = replayer.fold([record_of(m) for m in msgs])
        result.events += len(sends)
        if opts.verify:
            at.kept.extend(s.value for s in sends)
        if sink is not None:
            sink.send(sends)

    def reached(offset: int) -> None:
        nonlocal snapped
        state = replayer.snapshot(at.p)
        if offset == at.ack_at and not snapped:  # the state at the live fold's offset
            at.snapshot, at.acked_events, snapped = (
                _with_markers(replayer, at.p, state),
                result.events,
                True,
            )
        digest = state_digest(state.items()) if at.checks else ""
        for o, sid, sha in at.checks:
            if o != offset:
                continue
            if sha == digest:
                result.snapshots_checked += 1
            else:  # compared record by record once the partition is read (recheck_snapshots)
                at.differing.append((o, sid, f"state sha256 {sha[:12]} != {digest[:12]}", state))

    for msgs in read_partition(consumer, topics.commands, at.p, at.start, at.end, opts.batch_size):
        _note_timestamps(msgs, topics, report)
        i = 0
        while i < len(msgs):
            if stops and offset_of(msgs[i]) >= stops[0]:
                reached(stops.pop(0))
                continue
            j = i
            while j < len(msgs) and not (stops and offset_of(msgs[j]) >= stops[0]):
                j += 1
            fold(msgs[i:j])
            i = j
        report.records += len(msgs)
        if progress is not None:
            progress(report.records, total)
    while stops:
        reached(stops.pop(0))
    final = replayer.snapshot(at.p)
    if not snapped:
        at.snapshot, at.acked_events = _with_markers(replayer, at.p, final), result.events
    result.digest, result.jobs = state_digest(final.items()), len(final)
    return result


def _with_markers(replayer: Replayer, p: int, records: dict[bytes, bytes]) -> dict[bytes, bytes]:
    """The replay's table of partition ``p`` as its changelog would hold it: the job records
    and the dedupe markers under their changelog keys (what ``--verify`` compares)."""
    marks = {changelog_key(k): v for k, v in replayer.markers.partition(p)}
    return {**records, **marks}


def _note_timestamps(msgs: list[Message], topics: Topics, report: ReplayReport) -> None:
    note = (
        f"{topics.commands} has records not stamped LogAppendTime: the fold used their "
        f"client timestamps, as the scheduler did"
    )
    if note not in report.notes and any(
        m.timestamp()[0] != TIMESTAMP_LOG_APPEND_TIME for m in msgs
    ):
        report.notes.append(note)


def _write_manifest(report: ReplayReport, topics: Topics, opts: ReplayOptions) -> None:
    manifest = {
        "commands_topic": topics.commands,
        "until": iso(opts.until.astimezone(UTC)) if opts.until else None,
        "snapshot_id": report.snapshot_id,
        "records": report.records,
        "dead_letters": report.dead_letters,
        "replayed_at": iso(datetime.now(UTC)),
        "partitions": {
            str(r.partition): {
                "start_offset": r.start,
                "end_offset": r.end,
                "jobs": r.jobs,
                "events": r.events,
                "state_sha256": r.digest,
            }
            for r in report.partitions
        },
    }
    (report.state_dir / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
