"""The cold archive (services/archive/) against the real broker: run-events produced with the
project's codec as the fold writes them, exported with a 1 s hot window, a crash between files
(the exporter exits 137 as under ``kill -9``), a resume, then ``cronlog history query``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cronlog import events as ev
from services.archive import days
from services.archive.export import CRASH_ENV
from services.archive.settings import ArchiveSettings
from services.archive.store import open_store
from tests.archive_events import history, produce, run_life
from tests.integration.harness import Cluster
from topology.kafka.config import KafkaSettings

pytestmark = [pytest.mark.broker, pytest.mark.slow]

JOBS = [("j0", "team-a"), ("j1", "team-b"), ("j2", "team-a"), ("j3", "team-b")]
TENANT = dict(JOBS)


def env_of(settings: KafkaSettings, dest: Path, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "KAFKA_BOOTSTRAP": settings.bootstrap,
        "CRONLOG_TOPIC_PREFIX": settings.topic_prefix,
        "CRONLOG_PARTITIONS": str(settings.partitions),
        "CRONLOG_ARCHIVE_DEST": str(dest),
        "CRONLOG_ARCHIVE_HOT_WINDOW": "1",
        **extra,
    }


def run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *argv], env=env, capture_output=True, text=True, timeout=180
    )


def query(env: dict[str, str], sql: str, *flags: str) -> list[dict[str, object]]:
    done = run(["services.cli", "history", "query", sql, "--json", *flags], env)
    assert done.returncode == 0, done.stderr
    rows: list[dict[str, object]] = json.loads(done.stdout)
    return rows


def test_a_crash_between_files_then_a_resume_archives_every_event_once_and_queries_see_all(
    cluster: Cluster, tmp_path: Path
) -> None:
    now = datetime.now(UTC)
    today = days.day_of(now)
    start = days.day_start(today - timedelta(days=3)) + timedelta(hours=1)
    records = list(history(JOBS, start, now - timedelta(minutes=1), timedelta(hours=3)))
    straddle = run_life("j0", days.day_start(today) - timedelta(milliseconds=2))
    running = run_life("j1", now - timedelta(seconds=30), finished=False)
    records = sorted([*records, *straddle, *running], key=lambda r: r.at)
    assert produce(cluster.settings, records) == len(records)
    horizon = days.horizon(now, timedelta(seconds=1))
    cold = {r.event_id for r in records if r.at < horizon}
    assert 0 < len(cold) < len(records)
    dest = tmp_path / "archive"
    env = env_of(cluster.settings, dest)

    # 3 days x 2 tenants = 6 files: die after the 3rd (day 1 committed, day 2 half written)
    crashed = run(["services.archive", "--once"], {**env, CRASH_ENV: "3"})
    assert crashed.returncode == 137, crashed.stderr
    store = open_store(ArchiveSettings(archive_dest=str(dest)))
    assert [m.day for m in store.manifests()] == [today - timedelta(days=3)]
    leftover = dest / f"day={today - timedelta(days=2)}" / "tenant=team-a" / "part-00000.parquet"
    assert leftover.exists()  # moved to its final name, but its day has no manifest

    resumed = run(["services.cli", "history", "export"], env)
    assert resumed.returncode == 0, resumed.stderr
    assert "archived 2 day(s)" in resumed.stdout
    manifests = store.manifests()
    assert [m.day for m in manifests] == [today - timedelta(days=d) for d in (3, 2, 1)]
    listed = {f.path for m in manifests for f in m.files}
    on_disk = {p.relative_to(dest).as_posix() for p in dest.rglob("*.parquet")}
    assert on_disk == listed  # nothing stray: leftovers were overwritten, no temp files
    table = pa.concat_tables(pq.read_table(dest / p) for p in sorted(listed))
    ids = table.column("event_id").to_pylist()
    assert len(ids) == len(cold) and set(ids) == cold  # every archived event exactly once
    positions = list(
        zip(
            table.column("partition").to_pylist(),
            table.column("offset").to_pylist(),
            strict=True,
        )
    )
    assert len(set(positions)) == len(positions)
    assert {f.tenant for f in manifests[0].files} == {"team-a", "team-b"}
    assert manifests[0].jobs == TENANT  # registered on the first day
    assert sum(m.rows for m in manifests) == len(cold)

    again = run(["services.cli", "history", "export"], env)
    assert again.returncode == 0, again.stderr
    assert "archived 0 day(s)" in again.stdout and "3 day(s) archived before" in again.stdout

    by_source = query(
        env,
        "SELECT source, count(*) AS n, count(DISTINCT event_id) AS ids "
        "FROM run_events GROUP BY source ORDER BY source",
    )
    hot = len(records) - len(cold)
    assert by_source == [
        {"source": "archive", "n": len(cold), "ids": len(cold)},
        {"source": "hot", "n": hot, "ids": hot},
    ]
    tenants = query(env, "SELECT tenant, count(*) AS n FROM run_events GROUP BY 1 ORDER BY 1")
    expected: dict[str, int] = {}
    for r in records:
        expected[TENANT[r.job_id]] = expected.get(TENANT[r.job_id], 0) + 1
    assert tenants == [{"tenant": t, "n": n} for t, n in sorted(expected.items())]

    straddle_run = straddle[0].event.run_id  # type: ignore[union-attr]
    joined = query(
        env,
        "SELECT a.run_id, a.day AS scheduled_day, h.day AS ended_day FROM run_events a "
        "JOIN run_events h USING (run_id) WHERE a.source = 'archive' AND h.source = 'hot' "
        "AND a.event_type = 'RunScheduled' AND h.event_type = 'RunSucceeded'",
    )
    assert joined == [
        {
            "run_id": straddle_run,
            "scheduled_day": (today - timedelta(days=1)).isoformat(),
            "ended_day": today.isoformat(),
        }
    ]
    running_run = running[0].event.run_id  # type: ignore[union-attr]
    wanted = f"('{straddle_run}', '{running_run}')"  # run ids made by the test
    runs = query(env, f"SELECT run_id, state, tenant FROM runs WHERE run_id IN {wanted} ORDER BY 2")  # noqa: S608
    assert runs == [
        {"run_id": running_run, "state": "running", "tenant": "team-b"},
        {"run_id": straddle_run, "state": "succeeded", "tenant": "team-a"},
    ]
    scheduled = sum(isinstance(r.event, ev.RunScheduled) for r in records)
    assert query(env, "SELECT count(*) AS n FROM runs") == [{"n": scheduled}]
    archived_only = query(env, "SELECT count(*) AS n FROM run_events", "--archive-only")
    assert archived_only == [{"n": len(cold)}]

    csv_out = run(["services.cli", "history", "query", "SELECT 1 AS a, 'x' AS b", "--csv"], env)
    assert csv_out.stdout.splitlines() == ["a,b", "1,x"]
    bad = run(["services.cli", "history", "query", "SELECT nope FROM run_events"], env)
    assert bad.returncode == 2 and "SQL:" in bad.stderr


def test_the_first_days_rows_keep_their_day_and_tenant_partitions(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Standard Hive layout: the keys are in the path only, and a file under day=D/tenant=T
    holds only events of day D and tenant T."""
    now = datetime.now(UTC)
    start = days.day_start(days.day_of(now) - timedelta(days=2)) + timedelta(hours=20)
    records = list(history(JOBS[:2], start, now - timedelta(minutes=1), timedelta(hours=6)))
    produce(cluster.settings, records)
    settings = ArchiveSettings(
        **{
            "bootstrap": cluster.settings.bootstrap,
            "topic_prefix": cluster.settings.topic_prefix,
            "partitions": cluster.settings.partitions,
            "archive_dest": str(tmp_path / "a"),
            "archive_hot_window": timedelta(seconds=1),
        }
    )
    from services.archive.export import export

    report = export(settings, now)
    assert report.days == [days.day_of(start), days.day_of(start) + timedelta(days=1)]
    for m in open_store(settings).manifests():
        for f in m.files:
            t = pq.read_table(tmp_path / "a" / f.path)
            assert "day" not in t.column_names and "tenant" not in t.column_names
            assert {days.day_of(at) for at in t.column("at").to_pylist()} == {m.day}
            assert {TENANT[j] for j in t.column("job_id").to_pylist()} == {f.tenant}
            assert t.num_rows == f.rows
            assert f.path.startswith(f"day={m.day.isoformat()}/tenant={f.tenant}/")
    assert isinstance(report.days[0], date)
