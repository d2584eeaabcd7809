"""Benchmark: replay time as the system ages, from offset 0 vs from the newest snapshot.

Usage: ``.venv/bin/python bench/year.py [--jobs 1000] [--days 1 3 7] [--tick-s 60]
[--snapshot-every-h 6]`` (no broker: in memory, through ``topology.snapshots.replay.Replayer``).

Simulates a ``--jobs`` system on 12 partitions: every job is an hourly cron job (minute
``i % 60``), a scripted worker claims each ready task in the next step and completes it in
the one after (ClaimTask, CompleteTask, as a real worker sends them), and every partition
gets a Tick every ``--tick-s`` simulated seconds. Snapshots (``topology/snapshots/snapshot.py``,
encoded as written to Kafka) are taken every ``--snapshot-every-h``. At each age in
``--days`` it times (a) a replay of the whole log from offset 0 and (b) the newest snapshot
at least one interval old (worst case: a full interval of tail) decoded, seeded and the tail
folded, and checks both give the same job records (values, not time). Times are CPU
seconds of this process (``time.process_time``): the machine's two cores are shared, and
wall time would measure the neighbours.

The production ticker appends a Tick per partition per *second* (86,400 x 12 a day), which a
simulation of months cannot afford here: the log is simulated at ``--tick-s`` and the figures
for 1 tick/s are extrapolated from the measured cost of a Tick with nothing due (said so in
the output). Reading from Kafka adds to both (``bench/replay.py``: ~3,400 records/s end to
end vs ~10,300 folding alone).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cronlog import commands as cmd  # noqa: E402
from cronlog import events as ev  # noqa: E402
from cronlog.ids import claim_idem_key, complete_idem_key, tick_idem_key  # noqa: E402
from cronlog.model import JobSpec, Schedule, ScheduleKind, main_task  # noqa: E402
from cronlog.time import from_ms  # noqa: E402
from tests.builders import completed  # noqa: E402
from topology.fold.folder import Record  # noqa: E402
from topology.kafka.config import KafkaSettings  # noqa: E402
from topology.kafka.partitioning import partition_for  # noqa: E402
from topology.kafka.topics import Topics  # noqa: E402
from topology.snapshots.replay import Replayer  # noqa: E402
from topology.snapshots.snapshot import Manifest, seed, take  # noqa: E402
from topology.snapshots.wire import (  # noqa: E402
    assemble,
    decode_manifest,
    encode_chunks,
    encode_manifest,
    make_manifest,
    snapshot_id,
)
from topology.wire.codec import Codec  # noqa: E402

PARTITIONS = 12
DAY_MS = 86_400_000
T0_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
WORKER = "bench-w1"


@dataclass
class Stored:
    """A snapshot as written: its manifest and chunk values."""

    manifest: Manifest
    chunks: list[bytes]


@dataclass
class World:
    """The simulated log and the live fold that produced it."""

    jobs: int
    tick_ms: int
    codec: Codec = field(default_factory=Codec)
    records: dict[int, list[Record]] = field(default_factory=lambda: defaultdict(list))
    snapshots: list[Stored] = field(default_factory=list)
    now_ms: int = T0_MS
    pending: list[tuple[str, cmd.Command, str]] = field(default_factory=list)
    last_event: dict[int, str] = field(default_factory=dict)
    seq: int = 0

    def __post_init__(self) -> None:
        self.topics = Topics.of(KafkaSettings(partitions=PARTITIONS))
        self.live = Replayer(self.topics, PARTITIONS, {}, self.codec)

    def _record(self, partition: int, key: bytes | None, value: bytes) -> Record:
        rec = Record(partition, len(self.records[partition]), self.now_ms, key, value)
        self.records[partition].append(rec)
        return rec

    def _command(self, job_id: str, command: cmd.Command, idem_key: str) -> Record:
        env = cmd.Envelope(idem_key=idem_key, job_id=job_id, command=command)
        key = job_id.encode()
        return self._record(partition_for(key, PARTITIONS), key, self.codec.encode_command(env))

    def register(self) -> None:
        batch = []
        for i in range(self.jobs):
            spec = JobSpec(
                name=f"job {i}",
                schedule=Schedule(ScheduleKind.CRON, f"{i % 60} * * * *"),
                task_specs=main_task(("true",)),
            )
            batch.append(self._command(f"job-{i:05d}", cmd.RegisterJob(spec=spec), f"reg:{i}"))
        self._fold(batch)

    def step(self) -> None:
        """One tick interval: worker commands decided last step, then a Tick per partition."""
        self.now_ms += self.tick_ms
        batch = [self._command(*p) for p in self.pending]
        self.pending = []
        for p in range(PARTITIONS):
            self.seq += 1
            tick = cmd.Envelope(
                idem_key=tick_idem_key("bench", p, self.seq), job_id="", command=cmd.Tick()
            )
            batch.append(self._record(p, None, self.codec.encode_command(tick)))
        self._fold(batch)

    def _fold(self, batch: list[Record]) -> None:
        while batch:
            sends = self.live.fold(batch)
            batch = [
                self._record(
                    s.partition if s.partition is not None else partition_for(s.key, PARTITIONS),
                    s.key,
                    s.value,
                )
                for s in self.live.appended
            ]
            for s in sends:
                e = self.codec.decode_event(s.value)
                self.last_event[partition_for(e.job_id.encode(), PARTITIONS)] = e.event_id
                self._react(e)

    def _react(self, e: ev.RunEvent) -> None:
        match e.event:
            case ev.TaskReady(run_id=run_id, task=task, attempt=attempt):
                claim = cmd.ClaimTask(run_id=run_id, task=task, attempt=attempt, worker_id=WORKER)
                key = claim_idem_key(run_id, task, attempt, WORKER, str(self.seq))
                self.pending.append((e.job_id, claim, key))
            case ev.TaskClaimed(run_id=run_id, task=task, attempt=attempt, epoch=epoch):
                done = completed(
                    run_id,
                    task=task,
                    attempt=attempt,
                    epoch=epoch,
                    worker=WORKER,
                    at=from_ms(self.now_ms + 1),
                    started_at=from_ms(self.now_ms),
                )
                self.pending.append((e.job_id, done, complete_idem_key(run_id, task, epoch)))
            case _:
                pass

    def snapshot(self) -> None:
        """Snapshot the live fold as ``cronlog snapshot`` would write it."""
        parts = [
            take(
                self.live,
                p,
                len(self.records[p]),
                self.records[p][-1].timestamp_ms if self.records[p] else None,
                self.last_event.get(p),
            )
            for p in range(PARTITIONS)
        ]
        sid = snapshot_id(parts)
        chunks = encode_chunks(sid, parts)
        commands = sum(len(r) for r in self.records.values())
        m = make_manifest(sid, None, commands, parts, chunks, (0, len(chunks) - 1))
        self.snapshots.append(Stored(decode_manifest(encode_manifest(m)), chunks))

    def total(self) -> int:
        return sum(len(r) for r in self.records.values())


def replay_from_zero(world: World, batch: int = 500) -> tuple[float, dict[bytes, bytes]]:
    """Fold every partition from offset 0 as ``cronlog replay`` does; (seconds, store)."""
    started = time.process_time()
    r = Replayer(world.topics, PARTITIONS, {}, world.codec)
    for p in range(PARTITIONS):
        recs = world.records[p]
        for i in range(0, len(recs), batch):
            r.fold(recs[i : i + batch])
    return time.process_time() - started, dict(r.store)


def replay_from_snapshot(
    world: World, stored: Stored, batch: int = 500
) -> tuple[float, int, dict[bytes, bytes]]:
    """Decode ``stored``, seed it, fold the tail; (seconds, tail records, store)."""
    started = time.process_time()
    r = Replayer(world.topics, PARTITIONS, {}, world.codec)
    tail = 0
    for part in assemble(stored.manifest, stored.chunks):
        seed(r, part)
        recs = world.records[part.partition][part.offset :]
        tail += len(recs)
        for i in range(0, len(recs), batch):
            r.fold(recs[i : i + batch])
    return time.process_time() - started, tail, dict(r.store)


def idle_tick_s(world: World, n: int = 12_000) -> float:
    """Seconds one Tick with nothing due costs the fold (measured on the final state)."""
    r = Replayer(world.topics, PARTITIONS, dict(world.live.store), world.codec)
    for s in world.snapshots[-1:]:
        for part in assemble(s.manifest, s.chunks):
            seed(r, part)
    at = world.now_ms + 1  # just after the last step: nothing new is due for a while
    recs = [
        Record(
            i % PARTITIONS,
            10**9 + i,
            at,
            None,
            world.codec.encode_command(
                cmd.Envelope(idem_key=f"idle:{i}", job_id="", command=cmd.Tick())
            ),
        )
        for i in range(n)
    ]
    started = time.process_time()
    for i in range(0, n, 500):
        r.fold(recs[i : i + 500])
    return (time.process_time() - started) / n


@dataclass(frozen=True, slots=True)
class Row:
    """One age: log size and both replay times."""

    days: float
    records: int
    zero_s: float
    snap_s: float
    tail: int


def run(jobs: int, days: list[float], tick_s: int, every_h: float) -> tuple[World, list[Row]]:
    """Simulate up to ``max(days)`` and measure at each age; raise if the two replays differ."""
    world = World(jobs, tick_s * 1000)
    world.register()
    every_ms = int(every_h * 3_600_000)
    next_snap = T0_MS + every_ms
    rows = []
    for age in sorted(days):
        end = T0_MS + int(age * DAY_MS)
        while world.now_ms < end:
            world.step()
            if world.now_ms >= next_snap:
                world.snapshot()
                next_snap += every_ms
        zero_s, full = replay_from_zero(world)
        # the worst case: the newest snapshot at least one interval old (a full tail)
        old = [s for s in world.snapshots if (s.manifest.time_ms or 0) <= end - every_ms]
        stored = old[-1] if old else world.snapshots[0]
        snap_s, tail, bounded = replay_from_snapshot(world, stored)
        if bounded != full:
            raise SystemExit(f"day {age}: snapshot + tail differs from the replay from 0")
        rows.append(Row(age, world.total(), zero_s, snap_s, tail))
    return world, rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--days", type=float, nargs="+", default=[1, 3, 7])
    parser.add_argument("--tick-s", type=int, default=60)
    parser.add_argument("--snapshot-every-h", type=float, default=6.0)
    args = parser.parse_args()
    started = time.process_time()
    world, rows = run(args.jobs, args.days, args.tick_s, args.snapshot_every_h)
    print(
        f"{args.jobs} hourly jobs, 12 partitions, a Tick per partition every {args.tick_s} s, "
        f"snapshot every {args.snapshot_every_h} h (simulated in "
        f"{time.process_time() - started:.0f} s CPU); times are CPU seconds"
    )
    print(
        f"{'age (d)':>8} {'records':>10} {'from 0 (s)':>11} {'snapshot+tail (s)':>18} {'tail':>8}"
    )
    for r in rows:
        print(f"{r.days:>8g} {r.records:>10,} {r.zero_s:>11.2f} {r.snap_s:>18.2f} {r.tail:>8,}")
    last = rows[-1]
    per_day_s = last.zero_s / last.days
    per_day = last.records / last.days
    tick = idle_tick_s(world)
    extra_ticks = 12 * 86_400 - 12 * 86_400 // args.tick_s
    print(
        f"measured: {per_day:,.0f} records and {per_day_s:.1f} s of fold per simulated day; "
        f"an idle Tick costs {tick * 1e6:.0f} us"
    )
    print("extrapolated (linear in age; not measured):")
    for d in (30, 90, 365):
        sim = per_day_s * d
        prod = (per_day_s + extra_ticks * tick) * d
        print(
            f"  {d:>3} d: from 0 ≈ {sim / 60:,.0f} min at this tick rate, ≈ {prod / 3600:,.1f} h "
            f"at 1 Tick/s/partition; from a snapshot: as measured above, whatever the age"
        )
    tail_prod = (per_day_s + extra_ticks * tick) * args.snapshot_every_h / 24
    print(
        f"  snapshot + a full {args.snapshot_every_h:g} h tail at 1 Tick/s/partition ≈ "
        f"{tail_prod:,.0f} s (the default CRONLOG_SNAPSHOT_INTERVAL_S=3600 makes it 1/"
        f"{args.snapshot_every_h:g} of that)"
    )


if __name__ == "__main__":
    main()
