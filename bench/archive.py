"""Benchmark: the history archive's export throughput (run-events/s) and its storage cost
(bytes of Parquet per million run-events), on a real broker.

Usage: ``.venv/bin/python bench/archive.py [--runs 40000] [--jobs 500] [--partitions 12]``
(needs a broker: ``KAFKA_BOOTSTRAP`` or the local one from ``ops/kafka start``).

Produces ``--jobs`` JobRegistered and ``--runs`` one-task runs (RunScheduled, TaskReady,
TaskClaimed, TaskSucceeded with a 3-byte output tail, RunSucceeded: 5 run-events each, as the
fold writes them) spread over the three days before yesterday onto a fresh topic prefix, then
times one export (read_committed, decode, map, Parquet zstd, manifests) into a temporary
directory, and one ``history query`` (DuckDB) count over archive + hot. The topics are deleted
at the end. Figures vary with output tails and job definitions: measure with your own mix.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka.admin import AdminClient  # noqa: E402

from services.archive import days  # noqa: E402
from services.archive.export import export  # noqa: E402
from services.archive.query import run_query  # noqa: E402
from services.archive.settings import ArchiveSettings  # noqa: E402
from tests.archive_events import EVENTS_PER_RUN, history, produce  # noqa: E402
from topology.kafka.bootstrap import ensure_topics  # noqa: E402
from topology.kafka.topics import topic_specs  # noqa: E402


@dataclass(frozen=True, slots=True)
class Figures:
    events: int
    """Run-events produced."""
    archived: int
    """Rows the export wrote."""
    export_s: float
    """Wall time of the export, seconds."""
    export_cpu_s: float
    """CPU time of this process during the export (every thread, librdkafka's included), s."""
    bytes: int
    """Parquet bytes written."""
    query_s: float
    """Wall time of one count over archive + hot, seconds."""
    counted: int
    """What that count answered."""

    @property
    def events_per_s(self) -> float:
        return self.archived / self.export_s if self.export_s else 0.0

    @property
    def bytes_per_million(self) -> float:
        return self.bytes / self.archived * 1_000_000 if self.archived else 0.0


def run_once(runs: int, jobs: int, partitions: int = 12) -> Figures:
    """Produce, export and query once on a fresh topic prefix; return the figures."""
    settings = ArchiveSettings(
        topic_prefix=f"bench-archive-{uuid.uuid4().hex[:8]}.",
        partitions=partitions,
        archive_hot_window=timedelta(days=1),
    )
    ensure_topics(settings)
    try:
        now = datetime.now(UTC)
        start = days.day_start(days.day_of(now) - timedelta(days=4))
        per_job = max(1, runs // jobs)
        every = timedelta(days=3) / (per_job + 1)  # ticks start + every .. start + per_job*every
        people = [(f"bench-{i:06d}", f"team-{i % 7}") for i in range(jobs)]
        end = start + every * per_job + every / 2
        events = produce(settings, history(people, start, end, every))
        with tempfile.TemporaryDirectory() as tmp:
            archive = settings.model_copy(update={"archive_dest": tmp})
            started, cpu = time.perf_counter(), time.process_time()
            report = export(archive, now)
            export_s = time.perf_counter() - started
            export_cpu_s = time.process_time() - cpu
            started = time.perf_counter()
            counted = run_query(archive, "SELECT count(*) AS n FROM run_events").to_pylist()[0]
            query_s = time.perf_counter() - started
        return Figures(
            events, report.rows, export_s, export_cpu_s, report.bytes, query_s, int(counted["n"])
        )
    finally:
        admin = AdminClient(settings.admin_config())
        for future in admin.delete_topics([s.name for s in topic_specs(settings)]).values():
            future.result(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=40_000, help="runs (5 run-events each)")
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--partitions", type=int, default=12)
    args = parser.parse_args()
    f = run_once(args.runs, args.jobs, args.partitions)
    print(f"produced {f.events:,} run-events ({EVENTS_PER_RUN} per run, {args.jobs} jobs)")
    print(
        f"export: {f.archived:,} run-events in {f.export_s:.2f}s = {f.events_per_s:,.0f} "
        f"run-events/s; {f.bytes:,} bytes of Parquet = {f.bytes_per_million / 1e6:.1f} MB per "
        f"million run-events"
    )
    print(
        f"export CPU: {f.export_cpu_s:.2f}s = {f.archived / max(f.export_cpu_s, 1e-9):,.0f} "
        "run-events per CPU-second (the figure that does not depend on the box's load)"
    )
    print(f"query: count(*) over archive + hot = {f.counted:,} in {f.query_s:.2f}s")


if __name__ == "__main__":
    main()
