"""DuckDB over the whole run history: the archive's Parquet files and the hot part together.

Views (docs/history.md, "Querying"):

- ``run_events``: one row per record of ``cronlog.run-events`` ever written, archived or hot,
  with the archive's columns plus ``source`` (``archive`` or ``hot``).
- ``runs``: one row per run: its job, tenant, tick, latest state, first and last event time.
"""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds

from services.archive.hot import hot_table
from services.archive.rows import PARTITIONING_SCHEMA, SCHEMA
from services.archive.settings import ArchiveSettings
from services.archive.store import Manifest, Store, open_store

_COLUMNS = ", ".join(f'"{name}"' for name in SCHEMA.names)
RUN_EVENTS_VIEW = (
    f"CREATE VIEW run_events AS SELECT {_COLUMNS}, 'archive' AS source "  # noqa: S608 (constants)
    f"FROM archived_events UNION ALL SELECT {_COLUMNS}, 'hot' AS source FROM hot_events"
)
"""Archive then hot, the same columns in ``SCHEMA``'s order, plus ``source``."""

RUNS_VIEW = """
CREATE VIEW runs AS
SELECT
    run_id,
    any_value(job_id) AS job_id,
    any_value(tenant) AS tenant,
    min(scheduled_for) AS scheduled_for,
    arg_max(state, "offset") FILTER (WHERE state IS NOT NULL) AS state,
    min("at") AS first_at,
    max("at") AS last_at,
    count(*) AS events
FROM run_events
WHERE run_id IS NOT NULL
GROUP BY run_id
HAVING count(state) > 0
"""
"""A run's events all share its job's partition, so the largest offset is the latest event."""


def archived_dataset(store: Store, manifests: list[Manifest]) -> ds.Dataset | None:
    """Return the files the ``manifests`` commit as one Arrow dataset (Hive partitions
    ``day``/``tenant`` from their paths), or None when there are none."""
    paths = [store.full(f.path) for m in manifests for f in m.files]
    if not paths:
        return None
    return ds.dataset(
        paths,
        format="parquet",
        filesystem=store.fs,
        partitioning=ds.partitioning(PARTITIONING_SCHEMA, flavor="hive"),
        partition_base_dir=store.root,
    )


def connect(settings: ArchiveSettings, *, hot: bool = True) -> duckdb.DuckDBPyConnection:
    """Return an in-memory DuckDB connection with the ``run_events`` and ``runs`` views.

    Args:
        settings: the archive's destination and the cluster (for the hot part).
        hot: read the hot part from the topic (default); False: the archive only.

    Raises:
        ArchiveError: the archive or the topic cannot be read (a gap, a bad manifest).
        TimeoutError: the topic stopped answering.

    Scoping: every tenant's rows are visible; this is an operator's tool (docs/history.md).
    """
    store = open_store(settings, create=False)
    manifests = store.manifests()
    archived: ds.Dataset | pa.Table = archived_dataset(store, manifests) or SCHEMA.empty_table()
    recent = hot_table(settings, manifests) if hot else SCHEMA.empty_table()
    con = duckdb.connect()
    con.register("archived_events", archived)
    con.register("hot_events", recent)
    con.execute(RUN_EVENTS_VIEW)
    con.execute(RUNS_VIEW)
    # the views read registered Arrow data only: the SQL may not read or write other files
    con.execute("SET enable_external_access = false")
    return con


def run_query(settings: ArchiveSettings, sql: str, *, hot: bool = True) -> pa.Table:
    """Return the result of ``sql`` over the views of ``connect`` as an Arrow table.

    Raises:
        duckdb.Error: the SQL is invalid (DuckDB's message names what).
        ArchiveError, TimeoutError: as ``connect``.
    """
    con = connect(settings, hot=hot)
    try:
        relation = con.sql(sql)
        return relation.to_arrow_table() if relation is not None else pa.table({})
    finally:
        con.close()
