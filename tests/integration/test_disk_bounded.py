"""Disk stays bounded (issue 16): with small retention settings, segments roll and go, the
snapshotter keeps the state rebuildable, the API prunes its hot history, and the sizes of the
broker's cronlog topics, the scheduler's RocksDB and the API's read model stay flat, while the
API still answers a run it pruned, from the cold archive.

The broker is the test's own (``PrivateBroker``: its data dir is measured; its retention
check runs every 2 s here, 30 s in ``ops/kafka.d/server.properties``). Every cronlog topic gets
5 s segments and 15 s retention (compacted ones: a cleaner that runs at once), as an operator
would set days (after the services start: their topic bootstrap brings a retention back up to the
settings', which count whole days). The archive takes the first phase's runs with the
exporter's clock a day ahead (a day is archived once it is over; the test cannot wait for
midnight), before retention deletes them.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
)

from services.archive.export import export
from services.archive.settings import ArchiveSettings
from tests.chaos.harness import PrivateBroker
from tests.integration.harness import Cluster, Proc
from tests.integration.helpers import start_api
from topology.kafka.bootstrap import ensure_topics
from topology.kafka.config import KafkaSettings
from topology.kafka.topics import topic_specs

pytestmark = [
    pytest.mark.own_broker,
    pytest.mark.broker,
    pytest.mark.slow,
    pytest.mark.timeout(900),
]
JOBS = 4
WARM_S = 30.0
"""Long enough for the first segments to roll (5 s), pass retention (15 s) and be deleted (a
retention check every 2 s, deletion 1 s after)."""
WATCH_S = 60.0
SAMPLE_S = 10.0
HOT_DAYS = 20 / 86_400
"""The API's hot history: 20 s."""


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[PrivateBroker]:
    b = PrivateBroker(tmp_path / "kafka", properties="log.retention.check.interval.ms=2000")
    b.start()
    yield b
    b.destroy()


def _shrink(settings: KafkaSettings) -> None:
    """Give every cronlog topic 5 s segments and 15 s retention, deleted at once."""
    admin = AdminClient(settings.admin_config())
    resources = []
    for spec in topic_specs(settings):
        configs = {"segment.ms": "5000", "file.delete.delay.ms": "1000"}
        if "delete" in spec.config.get("cleanup.policy", "delete"):
            configs["retention.ms"] = "15000"
        if "compact" in spec.config.get("cleanup.policy", ""):
            configs.update({"min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "1000"})
        entries = [
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
            for k, v in configs.items()
        ]
        resources.append(
            ConfigResource(ConfigResource.Type.TOPIC, spec.name, incremental_configs=entries)
        )
    for fut in admin.incremental_alter_configs(resources).values():
        fut.result(30)


def _size(path: Path, prefix: str = "") -> int:
    """Bytes on disk of the files under ``path`` (only entries named ``prefix…`` at its top):
    allocated blocks, not apparent sizes (a segment's index files are sparse, 10 MiB each)."""
    if not path.exists():
        return 0
    tops = [p for p in path.iterdir() if p.name.startswith(prefix)]
    return sum(
        f.stat().st_blocks * 512
        for top in tops
        for f in ([top] if top.is_file() else top.rglob("*"))
        if f.is_file()
    )


def test_sizes_stay_flat_with_small_retention_and_old_runs_come_from_the_archive(
    broker: PrivateBroker, tmp_path: Path
) -> None:
    settings = KafkaSettings(
        bootstrap=broker.bootstrap, topic_prefix=f"disk{uuid.uuid4().hex[:6]}.", partitions=4
    )
    ensure_topics(settings)
    archive = tmp_path / "archive"
    cluster = Cluster(settings, tmp_path)
    try:
        cluster.scheduler()
        cluster.worker(CRONLOG_SLOTS="8")
        snap = cluster.env(CRONLOG_SNAPSHOT_INTERVAL_S="5")
        cluster.procs.append(Proc("snapshotter", snap, tmp_path / "snapshotter.log").start())
        api = start_api(
            cluster,
            CRONLOG_HISTORY_HOT_DAYS=str(HOT_DAYS),
            CRONLOG_HISTORY_PRUNE_INTERVAL_S="2",
            CRONLOG_ARCHIVE_DEST=str(archive),
        )
        for i in range(JOBS):
            body = {
                "job_id": f"every-second-{i}",
                "name": "every second",
                "schedule": {"type": "cron", "expression": "* * * * * *", "timezone": "UTC"},
                "command": ["true"],
            }
            assert api.post("/api/v1/jobs", json=body).status_code == 201

        time.sleep(10)
        first = api.get("/api/v1/jobs/every-second-0/runs", params={"limit": 5}).json()["runs"]
        old = [r["run_id"] for r in first if r["state"] == "succeeded"]
        assert old, first
        # the archive takes today so far (its clock a day ahead: today counts as over)
        report = export(
            ArchiveSettings(
                bootstrap=settings.bootstrap,
                topic_prefix=settings.topic_prefix,
                partitions=settings.partitions,
                archive_dest=str(archive),
                archive_hot_window=timedelta(seconds=1),
            ),
            datetime.now(UTC) + timedelta(days=1),
        )
        assert report.rows > 0
        # now (every service has bootstrapped its topics, which lengthens a retention shorter
        # than the settings': those are whole days), as an operator would with kafka-configs
        _shrink(settings)

        time.sleep(WARM_S)
        data = broker.home / "data"
        samples: list[tuple[int, int, int]] = []
        hot: list[int] = []
        end = time.monotonic() + WATCH_S
        while time.monotonic() < end:
            page = api.get("/api/v1/jobs/every-second-0/runs", params={"limit": 1000}).json()
            assert page["next_cursor"] is None
            hot.append(len(page["runs"]))
            samples.append(
                (
                    _size(data, settings.topic_prefix),
                    _size(tmp_path / "state-s1"),
                    _size(tmp_path / "state-api"),
                )
            )
            time.sleep(SAMPLE_S)
        for proc in cluster.procs:
            assert proc.popen is not None and proc.popen.poll() is None, proc.log_tail()

        mib = [tuple(round(b / 2**20, 2) for b in s) for s in samples]
        print(
            f"\n[figures] (broker topics, scheduler RocksDB, API read model) MiB every "
            f"{SAMPLE_S:.0f} s after a {WARM_S:.0f} s warm-up: {mib}"
        )
        print(f"[figures] runs of every-second-0 the API lists (hot history of 20 s): {hot}")
        # the read model holds the hot window (20 s, pruned every 2 s), not the whole history
        assert max(hot) <= 60, hot
        half = len(samples) // 2
        for column, name in enumerate(("broker topics", "scheduler RocksDB", "API read model")):
            early = max(s[column] for s in samples[:half])
            late = max(s[column] for s in samples[half:])
            # flat: the second half holds no more than the first (sawtooth of segments and
            # memtable flushes: 50 % and 1 MiB of slack). RocksDB's write-ahead log grows
            # until its memtable is flushed (64 MiB by default), so the stores' bytes are a
            # weak signal over minutes; the listed hot runs above are the strong one
            assert late <= early * 1.5 + 2**20, (name, mib)

        # retention deleted the head of the commands and run-events topics
        admin_consumer = Consumer(settings.consumer_config(f"disk-{uuid.uuid4().hex[:6]}"))
        try:
            lows = [
                admin_consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[0]
                for topic in (cluster.topics.commands, cluster.topics.run_events)
                for p in range(settings.partitions)
            ]
        finally:
            admin_consumer.close()
        assert sum(lows) > 0, lows

        # the first runs left the hot history: the API answers them from the archive
        for run_id in old:
            answer = api.get(f"/api/v1/runs/{run_id}")
            assert answer.status_code == 200, answer.text
            doc = answer.json()
            assert (doc["run_id"], doc["state"], doc["archived"]) == (run_id, "succeeded", True)
        listed = api.get("/api/v1/jobs/every-second-0/runs", params={"limit": 1000}).json()
        assert not {r["run_id"] for r in listed["runs"]} & set(old)
    finally:
        cluster.stop_all()
