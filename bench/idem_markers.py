"""Benchmark: what the dedupe horizon's marker store costs (issue 25 item 1), no Kafka.

Usage: ``.venv/bin/python bench/idem_markers.py [--commands 40000] [--jobs 400] [--markers
200000] [--rounds 2]``

1. Fold: ``--commands`` Pause/Resume commands for ``--jobs`` jobs through ``BatchFolder`` in
   batches of 1000 (one partition), each batch's job records and markers written to a real
   ``PartitionStore`` (RocksDB) as the runtime writes them after a commit: A = markers stored
   and looked up (the scheduler's set-up), B = no stored markers (each batch's overlay only,
   what the fold did before). Alternated A B A B; commands/s of fold + store write.
2. Restore: ``--markers`` marker records written to a fresh store in batches of 5000 (the
   restore's write path: no read per marker, the expiry index built once at the end),
   markers/s and the store's size on disk; then Ticks expiring them, 1000 a Tick
   (``EXPIRY_SLICE``), ms per Tick (the scan, the overlay, the store write).

Prints figures; asserts nothing about time.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cronlog import commands as cmd  # noqa: E402
from cronlog.idem import IdemRules, Marker  # noqa: E402
from cronlog.ids import horizon_marker  # noqa: E402
from cronlog.model import JobSpec, Schedule, ScheduleKind, main_task  # noqa: E402
from cronlog.time import from_ms  # noqa: E402
from topology.fold.due_index import DueIndex  # noqa: E402
from topology.fold.folder import BatchFolder, Record  # noqa: E402
from topology.fold.markers import EXPIRY_SLICE, FoldMarkers, encode_marker  # noqa: E402
from topology.fold.partition_store import PartitionStore  # noqa: E402
from topology.kafka.config import KafkaSettings  # noqa: E402
from topology.kafka.topics import Topics  # noqa: E402
from topology.wire.codec import Codec, encode_command  # noqa: E402

SPEC = JobSpec(
    name="bench", schedule=Schedule(ScheduleKind.MANUAL), task_specs=main_task(("true",))
)
T0_MS = 1_800_000_000_000


def fold_rate(n: int, jobs: int, stored: bool, tmp: Path) -> float:
    """Return commands/s of fold + store write for ``n`` commands (markers stored or not)."""
    store = PartitionStore(tmp / f"fold-{stored}-{time.monotonic_ns()}")
    due = DueIndex()
    due.reset([0])
    markers = (
        FoldMarkers(IdemRules(), lambda p, k: store.marker(k), lambda p, u, m: store.expiring(u, m))
        if stored
        else None
    )
    folder = BatchFolder(
        Topics.of(KafkaSettings(partitions=1)),
        1,
        lambda p, j: store.get(j),
        due,
        Codec(),
        markers=markers,
    )
    values = [
        encode_command(
            cmd.Envelope(
                idem_key=f"k{i}",
                job_id=f"job-{i % jobs}",
                command=cmd.RegisterJob(spec=SPEC)
                if i < jobs
                else (cmd.PauseJob() if (i // jobs) % 2 else cmd.ResumeJob()),
                issued_at=from_ms(T0_MS + i),
            )
        )
        for i in range(n)
    ]
    started = time.perf_counter()
    for start in range(0, n, 1000):
        recs = [
            Record(0, i, T0_MS + i, f"job-{i % jobs}".encode(), values[i])
            for i in range(start, min(n, start + 1000))
        ]
        out = folder.fold(recs)
        rows = [(j, w.value, w.deadline_ms, w.ready_ms) for j, w in out.writes.items()]
        store.write(rows, start, out.markers if stored else None, before=out.markers_before)
    took = time.perf_counter() - started
    store.close()
    return n / took


def restore_and_expire(n: int, tmp: Path) -> tuple[float, float, float]:
    """Return (markers/s written, MiB on disk, ms per expiring Tick) for ``n`` markers."""
    path = tmp / "restore"
    store = PartitionStore(path)
    started = time.perf_counter()
    for start in range(0, n, 5000):
        batch = {
            (0, horizon_marker("job", f"k{i}")): encode_marker(
                Marker("0123456789abcdef", from_ms(T0_MS + i))
            )
            for i in range(start, min(n, start + 5000))
        }
        store.write([], start, batch, indexed=False)  # the restore's way into a new store
    store.index_markers()
    wrote = n / (time.perf_counter() - started)
    store.close()
    size = sum(f.stat().st_size for f in path.iterdir()) / 2**20
    store = PartitionStore(path)
    book = FoldMarkers(
        IdemRules(), lambda p, k: store.marker(k), lambda p, u, m: store.expiring(u, m)
    )
    ticks, started = 0, time.perf_counter()
    while True:
        book.begin()
        if book.expire(0, from_ms(T0_MS + n + 1)) == 0:
            break
        store.write([], None, book.changes(), before=book.stored_before())
        ticks += 1
    per_tick = (time.perf_counter() - started) * 1000 / max(1, ticks)
    if ticks != -(-n // EXPIRY_SLICE) or list(store.markers()):
        raise SystemExit(f"expiry left markers behind after {ticks} Ticks")
    store.close()
    return wrote, size, per_tick


def main() -> None:
    """Run both parts and print their figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commands", type=int, default=40_000)
    parser.add_argument("--jobs", type=int, default=400)
    parser.add_argument("--markers", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            a = fold_rate(args.commands, args.jobs, True, Path(tmp))
            b = fold_rate(args.commands, args.jobs, False, Path(tmp))
            print(
                f"round {r + 1}: fold + store, {args.commands} user commands: "
                f"A markers stored {a:,.0f}/s, B none {b:,.0f}/s ({a / b:.2f}x)"
            )
        wrote, size, per_tick = restore_and_expire(args.markers, Path(tmp))
        print(
            f"{args.markers} markers: written {wrote:,.0f}/s in restore batches, "
            f"{size:.1f} MiB on disk; expired {EXPIRY_SLICE} a Tick in {per_tick:.1f} ms a Tick"
        )


if __name__ == "__main__":
    main()
