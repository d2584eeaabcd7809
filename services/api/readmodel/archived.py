"""The API's answer for a run that left its hot history: rebuilt from the archive.

The read model prunes an ended run once it is older than ``CRONLOG_HISTORY_HOT_DAYS``
(``services/api/readmodel/retention.py``); ``GET /api/v1/runs/{run_id}`` then asks this lookup
(``ReadModel.archived``). It reads the run's rows from the Parquet files, decodes each row's
``record`` (the run-event's bytes as they were on the topic, any shipped schema version) and
folds them, in log order, with the read model's own projection into a scratch batch: the
document is the one the read model held, built by the same code, with ``archived: true``.
Only the job's name is missing (the job's events are not among the run's).

Cost: one scan of the ``run_id`` column of every archived file (run ids are hashes, so row
group statistics cannot skip any): about a second per ten million archived run-events here.
It runs only for a run the read model does not hold.
"""

from __future__ import annotations

import logging
from typing import Any, cast

import pyarrow as pa
import pyarrow.compute as pc

from services.api.readmodel import projection
from services.api.readmodel.keys import run_key
from services.api.readmodel.store import Batch, Store
from services.archive.query import archived_dataset
from services.archive.settings import ArchiveSettings
from services.archive.store import ArchiveError, open_store
from topology.wire.codec import DecodeError, decode_event

log = logging.getLogger(__name__)


class _Nothing:
    """A store that holds nothing: the scratch batch reads only its own writes."""

    def get(self, _key: bytes) -> bytes | None:
        return None


class ArchivedRuns:
    """``run_id`` → the run's document rebuilt from the archive, or None.

    Args:
        settings: where the archive is (``CRONLOG_ARCHIVE_DEST``, S3 settings).

    A missing archive, or one without the run, answers None (the API's 404). An archive
    that cannot be read is logged and answers None: the API stays up for the hot history.
    """

    def __init__(self, settings: ArchiveSettings) -> None:
        self.settings = settings

    def __call__(self, run_id: str) -> dict[str, Any] | None:
        """Return run ``run_id``'s document with ``archived: True``, or None."""
        try:
            records = self._records(run_id)
        except (ArchiveError, OSError, pa.ArrowException) as exc:
            log.warning(
                "archive lookup failed",
                extra={"action": "archive.lookup_failed", "run_id": run_id, "error": str(exc)},
            )
            return None
        if not records:
            return None
        batch = Batch(cast(Store, _Nothing()))
        for value in records:
            try:
                projection.apply(batch, decode_event(value))
            except DecodeError:
                continue  # an undecodable row is kept in the archive, it is no run's event
        doc = batch.get_json(run_key(run_id))
        if doc is None:
            return None
        doc["archived"] = True
        return doc

    def _records(self, run_id: str) -> list[bytes]:
        """Return the run's archived records in log order (its job's partition, by offset)."""
        store = open_store(self.settings, create=False)
        dataset = archived_dataset(store, store.manifests())
        if dataset is None:
            return []
        table = dataset.to_table(
            columns=["partition", "offset", "record"], filter=pc.field("run_id") == run_id
        ).sort_by([("partition", "ascending"), ("offset", "ascending")])
        return [bytes(v) for v in table.column("record").to_pylist()]
