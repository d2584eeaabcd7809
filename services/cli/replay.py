"""``cronlog replay``: rebuild the job table from ``cronlog.commands`` with the scheduler's fold.

Reads every partition from offset 0 up to offsets sampled once at start (or up to ``--until``),
writes a fresh rocksdict state dir (job_id → stored JobState), and optionally verifies it
against the live table and run-events, or re-emits the replayed run-events to a topic.
What ``--verify`` compares, and what may legitimately differ: docs/architecture.md, "Replay".
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Consumer, Message
from rocksdict import Options, Rdict

from cronlog.errors import CronlogError
from cronlog.time import iso, to_ms
from services.cli.replay_io import EventSink, LiveSide, verify_partition
from topology.config import KafkaSettings
from topology.fold import Outgoing, Record
from topology.log_reader import (
    committed,
    offset_of,
    offsets_after,
    partition_count,
    read_partition,
    reader,
    watermarks,
)
from topology.registry import codec_for
from topology.replay import EventVerdict, Replayer, state_digest
from topology.topics import Topics

MANIFEST = "replay.json"
TABLE_DIR = "jobs"


class ReplayError(CronlogError):
    """The replay cannot run as asked (bad option, unusable state dir or log)."""


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
    """

    state_dir: Path | None = None
    force: bool = False
    verify: bool = False
    to_topic: str | None = None
    until: datetime | None = None
    batch_size: int = 500


@dataclass
class PartitionResult:
    """One partition's replay (and, with ``verify``, its comparison).

    Attributes:
        partition: the commands partition.
        end: records at offsets ``[0, end)`` were folded.
        events: run-events the replay produced.
        digest: ``state_digest`` of the partition's replayed job records at ``end``.
        jobs: job records of the partition at ``end``.
        acknowledged: the live fold's committed offset compared at (verify only).
        state_detail: None when the live table equals the replay at ``acknowledged``; else
            the first difference (verify only).
        events_verdict: the run-events comparison (verify only).
    """

    partition: int
    end: int
    events: int = 0
    digest: str = ""
    jobs: int = 0
    acknowledged: int | None = None
    state_detail: str | None = None
    events_verdict: EventVerdict | None = None

    @property
    def ok(self) -> bool:
        """True unless a verification found a difference."""
        return self.state_detail is None and (self.events_verdict is None or self.events_verdict.ok)


@dataclass
class ReplayReport:
    """The whole replay: per-partition results, totals, where the state is."""

    state_dir: Path
    partitions: list[PartitionResult] = field(default_factory=list)
    records: int = 0
    dead_letters: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True unless a partition differs from the live system."""
        return all(p.ok for p in self.partitions)

    @property
    def rate(self) -> float:
        """Records folded per second of wall time (reading included)."""
        return self.records / self.seconds if self.seconds > 0 else 0.0


def prepare_state_dir(path: Path | None, force: bool) -> Path:
    """Return an empty state dir: a new temp dir, or ``path`` checked (and cleared if forced).

    Raises:
        ReplayError: ``path`` is a file, or is not empty and ``force`` is not set.
    """
    if path is None:
        return Path(tempfile.mkdtemp(prefix="cronlog-replay-"))
    if path.exists() and not path.is_dir():
        raise ReplayError(f"--state-dir {path} is not a directory")
    if path.exists() and any(path.iterdir()):
        if not force:
            raise ReplayError(
                f"--state-dir {path} is not empty; replay needs a fresh state "
                f"(use --force to replace its {TABLE_DIR}/ and {MANIFEST})"
            )
        shutil.rmtree(path / TABLE_DIR, ignore_errors=True)
        (path / MANIFEST).unlink(missing_ok=True)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _record(m: Message) -> Record:
    return Record(m.partition() or 0, offset_of(m), m.timestamp()[1], m.key(), m.value() or b"")


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
            partition whose head was deleted (a replay would not start from the first record).
        topology.log_reader.LogReadError: the cluster could not be read.

    Determinism: the same log gives the same state dir and events, bit for bit.
    """
    if opts.verify and opts.until is not None:
        raise ReplayError(
            "--verify compares with the live system now; it cannot be combined with --until"
        )
    topics = Topics.of(settings)
    if opts.to_topic is not None:
        _check_target(topics, opts.to_topic)
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


def _bounds(
    settings: KafkaSettings, consumer: Consumer, topics: Topics, n: int, opts: ReplayOptions
) -> _Bounds:
    # Sampling order matters: the live fold's committed offsets first, then the live topics'
    # ends, then the commands' ends, so everything live we compare was caused by commands the
    # replay reads (docs/architecture.md, "Replay").
    acked = committed(settings, topics.scheduler_app, topics.commands, n) if opts.verify else {}
    live = LiveSide.sample(consumer, topics, n) if opts.verify else None
    marks = watermarks(consumer, topics.commands, n)
    heads = [p for p, (low, _) in marks.items() if low > 0]
    if heads:
        raise ReplayError(
            f"partitions {heads} of {topics.commands} no longer start at offset "
            f"0 (retention deleted their head): a replay cannot rebuild the state"
        )
    ends = {p: high for p, (_, high) in marks.items()}
    if opts.until is not None:
        ends = offsets_after(consumer, topics.commands, n, to_ms(opts.until))
    return _Bounds(ends, acked, live)


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
    if opts.verify and all(a is None for a in bounds.acked.values()):
        report.notes.append(
            "the scheduler's group has no committed offsets: compared at the high-water marks"
        )
    total = sum(bounds.ends.values())
    started = time.perf_counter()
    codec = codec_for(settings)  # Confluent-framed commands need the registry, as in the fold
    db = Rdict(str(state_dir / TABLE_DIR), options=Options(raw_mode=True))
    try:
        store: MutableMapping[bytes, bytes] = db  # type: ignore[assignment]  # untyped rocksdict
        replayer = Replayer(topics, n, store, codec)
        sink = EventSink(settings, opts.to_topic, n) if opts.to_topic else None
        for p in range(n):
            ack = bounds.acked.get(p)
            at = _Partition(p, bounds.ends[p], ack if ack is not None else bounds.ends[p])
            result = _replay_partition(
                consumer, replayer, topics, at, opts, sink, report, progress, total
            )
            if bounds.live is not None:
                result.acknowledged = at.ack_at
                result.state_detail, result.events_verdict = verify_partition(
                    consumer, topics, bounds.live, p, at.snapshot, at.kept, at.acked_events, codec
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


def _check_target(topics: Topics, target: str) -> None:
    own = {
        topics.commands,
        topics.run_events,
        topics.ready,
        topics.replies,
        topics.dead_letters,
        topics.job_table_changelog,
    }
    if target in own:
        raise ReplayError(
            f"--to-topic {target!r} is one of cronlog's live topics; re-emitting "
            f"there would duplicate history for every consumer"
        )
    if not target or len(target) > 249:
        raise ReplayError(f"--to-topic {target!r} is not a valid topic name")


@dataclass
class _Partition:
    """One partition's bounds and what verify needs from its replay."""

    p: int
    end: int
    ack_at: int
    snapshot: dict[bytes, bytes] = field(default_factory=dict)
    kept: list[bytes] = field(default_factory=list)
    acked_events: int = 0


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
    result = PartitionResult(at.p, at.end)
    snapped = False

    def fold(msgs: list[Message]) -> None:
        sends: list[Outgoing] = replayer.fold([_record(m) for m in msgs])
        result.events += len(sends)
        if opts.verify:
            at.kept.extend(s.value for s in sends)
        if sink is not None:
            sink.send(sends)

    for msgs in read_partition(consumer, topics.commands, at.p, 0, at.end, opts.batch_size):
        _note_timestamps(msgs, topics, report)
        head = [m for m in msgs if offset_of(m) < at.ack_at]
        tail = msgs[len(head) :]
        if head:
            fold(head)
        if tail and not snapped:  # the state exactly at the live fold's committed offset
            at.snapshot, at.acked_events, snapped = replayer.snapshot(at.p), result.events, True
        if tail:
            fold(tail)
        report.records += len(msgs)
        if progress is not None:
            progress(report.records, total)
    final = replayer.snapshot(at.p)
    if not snapped:
        at.snapshot, at.acked_events = final, result.events
    result.digest, result.jobs = state_digest(final.items()), len(final)
    return result


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
        "records": report.records,
        "dead_letters": report.dead_letters,
        "replayed_at": iso(datetime.now(UTC)),
        "partitions": {
            str(r.partition): {
                "end_offset": r.end,
                "jobs": r.jobs,
                "events": r.events,
                "state_sha256": r.digest,
            }
            for r in report.partitions
        },
    }
    (report.state_dir / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
