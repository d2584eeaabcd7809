"""The cold archive on an S3-compatible bucket: moto's S3 server (a local process), reached
through pyarrow's S3FileSystem with ``endpoint_override``, as an operator's MinIO or Ceph."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from pyarrow import fs as pafs

from services.archive import days
from services.archive.export import export
from services.archive.query import run_query
from services.archive.settings import ArchiveSettings
from services.archive.store import open_store
from tests.archive_events import history, produce
from tests.integration.harness import Cluster
from tests.integration.helpers import free_port, wait_for

pytestmark = [pytest.mark.broker, pytest.mark.slow]


@pytest.fixture
def s3_endpoint(tmp_path: Path) -> Iterator[str]:
    """``http://127.0.0.1:PORT`` of a moto S3 server, stopped (by its pid) afterwards."""
    port = free_port()
    log = (tmp_path / "moto.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"

    def up() -> bool | None:
        try:
            return httpx.get(url, timeout=1).status_code < 500 or None
        except httpx.HTTPError:
            return None

    try:
        wait_for(up, 60, "moto's S3 server answers")
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def test_export_and_query_through_an_s3_compatible_bucket(
    cluster: Cluster, s3_endpoint: str
) -> None:
    now = datetime.now(UTC)
    start = days.day_start(days.day_of(now) - timedelta(days=2)) + timedelta(hours=12)
    jobs = [("s0", "team-a"), ("s1", "team-b")]
    records = list(history(jobs, start, now - timedelta(minutes=1), timedelta(hours=4)))
    produce(cluster.settings, records)
    settings = ArchiveSettings(
        bootstrap=cluster.settings.bootstrap,
        topic_prefix=cluster.settings.topic_prefix,
        partitions=cluster.settings.partitions,
        archive_dest="s3://history/cronlog",
        archive_hot_window=timedelta(seconds=1),
        archive_s3_endpoint=s3_endpoint,
        archive_s3_access_key="testing",
        archive_s3_secret_key="testing",  # noqa: S106 (moto accepts any key)
    )
    store = open_store(settings)
    pafs.S3FileSystem(  # the bucket, made as an operator would; the exporter never makes one
        access_key="testing",
        secret_key="testing",  # noqa: S106
        endpoint_override=s3_endpoint.removeprefix("http://"),
        scheme="http",
        region="us-east-1",
        allow_bucket_creation=True,
    ).create_dir("history")
    report = export(settings, now)
    horizon = days.horizon(now, timedelta(seconds=1))
    cold = [r for r in records if r.at < horizon]
    assert report.days == [days.day_of(start), days.day_of(start) + timedelta(days=1)]
    assert report.rows == len(cold)
    names = {
        info.path.removeprefix("history/cronlog/")
        for info in store.fs.get_file_info(pafs.FileSelector("history/cronlog", recursive=True))
        if info.type == pafs.FileType.File
    }
    listed = {f.path for m in store.manifests() for f in m.files}
    assert listed <= names and not any("_tmp-" in n for n in names)
    assert {n for n in names if n.startswith("_manifests/")} == {
        f"_manifests/day={d.isoformat()}.json" for d in report.days
    }
    assert export(settings, now).days == []  # idempotent: both days have their manifest
    counts = run_query(
        settings,
        "SELECT source, count(DISTINCT event_id) AS n FROM run_events GROUP BY 1 ORDER BY 1",
    ).to_pylist()
    assert counts == [
        {"source": "archive", "n": len(cold)},
        {"source": "hot", "n": len(records) - len(cold)},
    ]
