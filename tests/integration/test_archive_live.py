"""The archive of a real system's run-events: a scheduler and a worker run a cron job and a
failing one for a few seconds; then everything they wrote is archived (the export's clock set a
day ahead, so today is old enough) and ``history query`` sees the same history."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cronlog import commands as cmd
from cronlog import events as ev
from services.api.readmodel.archived import ArchivedRuns
from services.api.shapes.responses import RunOut
from services.archive.export import export
from services.archive.query import run_query
from services.archive.settings import ArchiveSettings
from services.archive.store import open_store
from tests.integration.harness import Cluster, EventLog
from tests.integration.helpers import cron_job

pytestmark = [pytest.mark.broker, pytest.mark.slow]


def test_a_live_systems_history_is_archived_whole_and_queries_agree(
    cluster: Cluster, events: EventLog, tmp_path: Path
) -> None:
    cluster.scheduler()
    cluster.worker()
    cluster.send("ok", cmd.RegisterJob(spec=cron_job("*/2 * * * * *")), idem_key="reg-ok")
    failing = cron_job("*/2 * * * * *", ("false",))
    cluster.send("bad", cmd.RegisterJob(spec=failing), idem_key="reg-bad")

    def enough(log: EventLog) -> bool:
        ended = [e.job_id for e in log.of_type(ev.RunSucceeded) + log.of_type(ev.RunFailed)]
        return ended.count("ok") >= 2 and ended.count("bad") >= 2

    assert events.wait_until(enough, 90), [type(e.event).__name__ for e in events.events()]
    cluster.stop_all()
    events.poll(3)  # whatever the last transactions committed
    written = events.events()

    settings = ArchiveSettings(
        bootstrap=cluster.settings.bootstrap,
        topic_prefix=cluster.settings.topic_prefix,
        partitions=cluster.settings.partitions,
        archive_dest=str(tmp_path / "archive"),
        archive_hot_window=timedelta(seconds=1),
    )
    report = export(settings, datetime.now(UTC) + timedelta(days=1))
    assert report.rows == len(written)
    files = [f.path for m in open_store(settings).manifests() for f in m.files]
    table = pa.concat_tables(pq.read_table(tmp_path / "archive" / p) for p in files)
    assert Counter(table.column("event_id").to_pylist()) == Counter(e.event_id for e in written)
    assert Counter(table.column("event_type").to_pylist()) == Counter(
        type(e.event).__name__ for e in written
    )
    assert "_undecodable" not in table.column("event_type").to_pylist()

    counts = run_query(
        settings, "SELECT source, count(*) AS n FROM run_events GROUP BY 1"
    ).to_pylist()
    assert counts == [{"source": "archive", "n": len(written)}]
    ended = {
        e.event.run_id: "succeeded" if isinstance(e.event, ev.RunSucceeded) else "failed"
        for e in written
        if isinstance(e.event, ev.RunSucceeded | ev.RunFailed)
    }
    runs = run_query(settings, "SELECT run_id, state, tenant FROM runs").to_pylist()
    states = {r["run_id"]: r["state"] for r in runs}
    assert {run: states[run] for run in ended} == ended
    assert {r["tenant"] for r in runs} == {"default"}

    # The API's answer for a run past its hot history (services/api/readmodel/archived.py): the
    # read model's own projection over the run's archived records.
    lookup = ArchivedRuns(settings)
    for run_id, state in ended.items():
        doc = lookup(run_id)
        assert doc is not None, run_id
        assert (doc["run_id"], doc["state"], doc["archived"]) == (run_id, state, True)
        assert doc["job_id"] in ("ok", "bad")
        assert doc["attempts"] and doc["finished_at"] is not None
        assert RunOut.model_validate(doc).archived
    assert lookup("no-such-run") is None
