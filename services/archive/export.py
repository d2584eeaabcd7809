"""The exporter: run-events older than the hot window -> Parquet files, one UTC day at a time.

A day is written only once it is complete (``days``), its files under temporary names then
moved, its manifest last; a run resumes from the last manifest's offsets and first clears what
a crashed run left of the day it redoes. So a crash at any point neither loses nor duplicates a
day (docs/history.md, "Resumability").
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

import pyarrow.parquet as pq

from services.archive import days
from services.archive.reader import Item, TopicReader
from services.archive.rows import (
    FILE_SCHEMA,
    learn_tenant,
    tenant_of,
    to_row,
    to_table,
    undecodable_row,
)
from services.archive.settings import ArchiveSettings
from services.archive.store import FileEntry, Manifest, Store, file_path, open_store

log = logging.getLogger("cronlog.archive")
CRASH_ENV = "CRONLOG_ARCHIVE_CRASH_AFTER_FILES"
"""Tests only: exit with status 137 (as ``kill -9``) right after this many files were moved to
their final names, before the next file or manifest (tests/integration/test_archive.py)."""


@dataclass
class ExportReport:
    """What one export did."""

    days: list[date] = field(default_factory=list)
    """The days it committed, oldest first."""
    rows: int = 0
    """Rows written (committed days only)."""
    files: int = 0
    """Parquet files written."""
    bytes: int = 0
    """Their total size, bytes."""
    already: int = 0
    """Days that were committed before this run (skipped)."""


class _Crash:
    def __init__(self, env: Mapping[str, str]) -> None:
        raw = env.get(CRASH_ENV, "")
        self.after = int(raw) if raw.isdigit() and int(raw) > 0 else None
        self.files = 0

    def file_committed(self) -> None:
        self.files += 1
        if self.after is not None and self.files >= self.after:
            log.critical("fault injection: exiting after %d archive files", self.files)
            logging.shutdown()
            os._exit(137)


class _TenantFile:
    """The open file of one (day, tenant): buffered rows, flushed as row groups."""

    def __init__(self, store: Store, day: date, tenant: str, part: int) -> None:
        self.path = file_path(day, tenant, part)
        self.tenant, self.part, self.rows = tenant, part, 0
        self.buffer: list[dict[str, Any]] = []
        self.writer = pq.ParquetWriter(
            store.prepare(self.path), FILE_SCHEMA, filesystem=store.fs, compression="zstd"
        )

    def flush(self) -> None:
        if self.buffer:
            self.writer.write_table(
                to_table(self.buffer, FILE_SCHEMA), row_group_size=len(self.buffer)
            )
            self.buffer = []


class _Day:
    """Everything written so far for one open (not yet committed) day."""

    def __init__(self, store: Store, settings: ArchiveSettings, day: date, crash: _Crash) -> None:
        self.store, self.settings, self.day, self.crash = store, settings, day, crash
        store.clear_day(day)  # leftovers of a crashed run: this day has no manifest
        self.open: dict[str, _TenantFile] = {}
        self.parts: dict[str, int] = {}
        self.files: list[FileEntry] = []
        self.offsets: dict[int, tuple[int, int]] = {}
        self.jobs: dict[str, str] = {}

    def add(self, row: dict[str, Any], item: Item) -> None:
        tenant = row["tenant"]
        f = self.open.get(tenant)
        if f is None:
            part = self.parts.get(tenant, 0)
            f = self.open[tenant] = _TenantFile(self.store, self.day, tenant, part)
            self.parts[tenant] = part + 1
        f.buffer.append(row)
        f.rows += 1
        if len(f.buffer) >= self.settings.archive_row_group_rows:
            f.flush()
        if f.rows >= self.settings.archive_file_rows:
            self._close(self.open.pop(tenant))
        p, o = item.where.partition, item.where.offset
        first, _ = self.offsets.get(p, (o, o))
        self.offsets[p] = (first, o)

    def _close(self, f: _TenantFile) -> None:
        f.flush()
        f.writer.close()
        size = self.store.commit_file(f.path)
        self.files.append(FileEntry(f.path, f.tenant, f.rows, size))
        self.crash.file_committed()

    def commit(self, next_offsets: dict[int, int]) -> Manifest:
        for tenant in sorted(self.open):
            self._close(self.open[tenant])
        self.open = {}
        files = sorted(self.files, key=lambda f: f.path)
        manifest = Manifest(self.day, files, self.offsets, next_offsets, self.jobs)
        self.store.write_manifest(manifest)
        return manifest


def export(
    settings: ArchiveSettings, now: datetime, env: Mapping[str, str] = os.environ
) -> ExportReport:
    """Archive every complete day older than the hot window that is not archived yet.

    Args:
        settings: the cluster, the destination, the hot window.
        now: the current instant, aware (days ending after ``now - hot_window`` stay hot).
        env: where the test-only crash hook (``CRASH_ENV``) is read.

    Returns:
        What was committed; an empty report when nothing was old enough.

    Raises:
        ArchiveError: the destination or a manifest is unusable, run-events were deleted
            before they were archived (a gap), or another exporter holds a local archive.
        TimeoutError: the topic stopped answering before its end.

    Idempotency: a day with a manifest is never read or written again; a day without one is
    redone from its first offset, its leftovers deleted first.
    """
    store = open_store(settings)
    with store.exclusive():
        return _export(store, settings, now, env)


def _export(
    store: Store, settings: ArchiveSettings, now: datetime, env: Mapping[str, str]
) -> ExportReport:
    manifests = store.manifests()
    report = ExportReport(already=len(manifests))
    tenants = {job: t for m in manifests for job, t in m.jobs.items()}
    last = manifests[-1] if manifests else None
    floor = days.day_end(last.day) if last is not None else None
    until = days.horizon(now, settings.archive_hot_window)
    if floor is not None and floor >= until:
        return report
    reader = TopicReader(settings, dict(last.next_offsets) if last else {}, floor, until)
    crash = _Crash(env)
    open_days: dict[date, _Day] = {}

    def commit_complete() -> None:
        sealed = days.sealed(reader.marks, reader.stops, until)
        for d in days.complete_days(open_days, sealed):
            manifest = open_days.pop(d).commit(reader.next_offsets(d))
            report.days.append(d)
            report.rows += manifest.rows
            report.files += len(manifest.files)
            report.bytes += sum(f.bytes for f in manifest.files)
            log.info(
                "day archived", extra={"action": "archive_day", "day": d, "rows": manifest.rows}
            )

    for batch in reader.batches():
        for item in batch:
            day = open_days.get(item.day)
            if day is None:
                day = open_days[item.day] = _Day(store, settings, item.day, crash)
            if item.record is None:
                row = undecodable_row(item.value, item.error, item.where, item.at, item.day)
            else:
                new = learn_tenant(item.record, tenants)
                if new is not None:
                    day.jobs[item.record.job_id] = new
                tenant = tenant_of(item.record, tenants)
                row = to_row(item.record, tenant, item.where, item.day, item.value)
            day.add(row, item)
        commit_complete()
    commit_complete()
    return report
