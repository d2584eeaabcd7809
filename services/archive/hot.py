"""The hot part of the history: run-events after the archive's last offsets, as an Arrow table."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from services.archive import days
from services.archive.reader import TopicReader
from services.archive.rows import learn_tenant, tenant_of, to_row, to_table, undecodable_row
from services.archive.settings import ArchiveSettings
from services.archive.store import Manifest


def hot_table(settings: ArchiveSettings, manifests: list[Manifest]) -> pa.Table:
    """Return every run-event not in the archive described by ``manifests``, as archive rows.

    Reads each partition from the last manifest's ``next_offsets`` (from its beginning when
    there is no manifest) to the end offsets seen at start, read_committed. The archive holds
    exactly the offsets below those, so archive + hot is the whole history, each record once.
    Rows are filed under days as the exporter would file them (same watermark floor).

    Args:
        settings: the cluster and topic prefix.
        manifests: the archive's manifests, oldest first (``Store.manifests``).

    Returns:
        A table of ``rows.SCHEMA``; 0 rows when nothing is hot. It is held in memory.

    Raises:
        ArchiveError: offsets after the archive's end were deleted (a gap), or no topic.
        TimeoutError: the topic stopped answering before its end.
    """
    tenants = {job: t for m in manifests for job, t in m.jobs.items()}
    last = manifests[-1] if manifests else None
    floor = days.day_end(last.day) if last is not None else None
    reader = TopicReader(settings, dict(last.next_offsets) if last else {}, floor, None)
    rows: list[dict[str, Any]] = []
    for batch in reader.batches():
        for item in batch:
            if item.record is None:
                rows.append(undecodable_row(item.value, item.error, item.where, item.at, item.day))
                continue
            learn_tenant(item.record, tenants)
            tenant = tenant_of(item.record, tenants)
            rows.append(to_row(item.record, tenant, item.where, item.day, item.value))
    return to_table(rows)
