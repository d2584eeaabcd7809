"""The archive's storage: a pyarrow filesystem (local or S3-compatible), its layout, manifests.

Layout under the root (docs/history.md, "Layout")::

    day=YYYY-MM-DD/tenant=T/part-00000.parquet   the rows of one UTC day and tenant
    _manifests/day=YYYY-MM-DD.json               written last: the day is committed

A file is written under a ``_tmp-`` name and moved to its final name once closed; a day's
manifest names its files and is the only proof that the day is complete. Readers read the files
manifests name, never a directory listing, so leftovers of a crashed export are invisible.
"""

from __future__ import annotations

import fcntl
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from pyarrow import fs as pafs

from cronlog.errors import CronlogError
from services.archive.settings import ArchiveSettings

MANIFESTS = "_manifests"
TMP = "_tmp-"
MANIFEST_VERSION = 1


class ArchiveError(CronlogError):
    """The archive cannot be read or written as asked (bad destination, gap, corrupt manifest)."""


@dataclass(frozen=True, slots=True)
class FileEntry:
    """One Parquet file of a committed day."""

    path: str
    """Path relative to the archive's root, ``day=…/tenant=…/part-NNNNN.parquet``."""
    tenant: str
    """The tenant of every row in it."""
    rows: int
    """Its row count."""
    bytes: int
    """Its size, bytes."""


@dataclass(frozen=True, slots=True)
class Manifest:
    """What one committed day holds; written after all its files (docs/history.md)."""

    day: date
    """The UTC day."""
    files: list[FileEntry]
    """Its files, tenant then part order."""
    offsets: dict[int, tuple[int, int]]
    """partition -> (first, last) offset of its rows of this day; partitions without rows
    are absent."""
    next_offsets: dict[int, int]
    """partition -> the first offset not in this day or an earlier one: where the next export
    (and the hot part of a query) starts reading."""
    jobs: dict[str, str] = field(default_factory=dict)
    """job_id -> tenant of the jobs first registered in this day (read on start: the tenant
    of later events whose JobRegistered is archived)."""
    version: int = MANIFEST_VERSION
    """Manifest format version."""

    @property
    def rows(self) -> int:
        """Rows of the day, all tenants."""
        return sum(f.rows for f in self.files)

    def to_json(self) -> str:
        """Return the manifest as JSON (partition numbers as string keys)."""
        doc: dict[str, Any] = asdict(self)
        doc["day"] = self.day.isoformat()
        doc["offsets"] = {str(p): list(r) for p, r in sorted(self.offsets.items())}
        doc["next_offsets"] = {str(p): o for p, o in sorted(self.next_offsets.items())}
        return json.dumps(doc, indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        """Parse ``to_json``'s output. Raises ArchiveError naming what is wrong."""
        try:
            doc = json.loads(text)
            if not isinstance(doc, dict):
                raise ArchiveError(f"corrupt manifest: a JSON {type(doc).__name__}, not an object")
            if doc.get("version") != MANIFEST_VERSION:
                raise ArchiveError(f"manifest version {doc.get('version')!r} is not supported")
            return cls(
                day=date.fromisoformat(doc["day"]),
                files=[FileEntry(**f) for f in doc["files"]],
                offsets={int(p): (int(r[0]), int(r[1])) for p, r in doc["offsets"].items()},
                next_offsets={int(p): int(o) for p, o in doc["next_offsets"].items()},
                jobs={str(k): str(v) for k, v in doc.get("jobs", {}).items()},
            )
        except ArchiveError:
            raise
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
            raise ArchiveError(f"corrupt manifest: {type(exc).__name__}: {exc}") from exc


def day_dir(day: date) -> str:
    """Return the Hive directory of a day, ``day=YYYY-MM-DD``."""
    return f"day={day.isoformat()}"


def file_path(day: date, tenant: str, part: int) -> str:
    """Return a file's path relative to the root: ``day=…/tenant=…/part-NNNNN.parquet``."""
    return f"{day_dir(day)}/tenant={tenant}/part-{part:05d}.parquet"


def tmp_path(path: str) -> str:
    """Return the temporary name ``path`` is written under (``_`` hides it from readers)."""
    head, _, name = path.rpartition("/")
    return f"{head}/{TMP}{name}" if head else f"{TMP}{name}"


LOCK = ".export.lock"
"""The export lock's file name under a local archive's root (``Store.exclusive``)."""


class Store:
    """The archive's root on a pyarrow filesystem.

    Args:
        filesystem: where the archive lives (``open_store`` picks it).
        root: the root directory on it (local: absolute path; S3: ``bucket/prefix``).
    """

    def __init__(self, filesystem: pafs.FileSystem, root: str) -> None:
        self.fs = filesystem
        self.root = root.rstrip("/")

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the archive's export lock while the block runs (a local archive only).

        Two exporters of one archive write the same temporary names and commit each other's
        half-written files (found by an adversarial run): a local archive takes an exclusive
        ``flock`` on ``<root>/.export.lock``, released when the process ends however it ends.
        An S3 bucket has no lock: run one exporter per bucket (docs/history.md).

        Raises:
            ArchiveError: another exporter holds the lock.
        """
        if not isinstance(self.fs, pafs.LocalFileSystem):
            yield
            return
        Path(self.root).mkdir(parents=True, exist_ok=True)
        with (Path(self.root) / LOCK).open("a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError as exc:
                raise ArchiveError(
                    f"another exporter is running on {self.root} (it holds {LOCK})"
                ) from exc
            yield

    def full(self, relative: str) -> str:
        """Return ``relative`` under the root."""
        return f"{self.root}/{relative}"

    def manifests(self) -> list[Manifest]:
        """Return every committed day's manifest, oldest day first; [] for a new archive.

        Raises:
            ArchiveError: a manifest cannot be read or parsed (its path named).
        """
        selector = pafs.FileSelector(self.full(MANIFESTS), allow_not_found=True)
        out = []
        for info in self.fs.get_file_info(selector):
            name = info.base_name
            if info.type != pafs.FileType.File or name.startswith(TMP):
                continue
            try:
                with self.fs.open_input_stream(info.path) as stream:
                    text = stream.read().decode()
                out.append(Manifest.from_json(text))
            except UnicodeDecodeError as exc:
                raise ArchiveError(f"{info.path}: corrupt manifest: not UTF-8") from exc
            except ArchiveError as exc:
                raise ArchiveError(f"{info.path}: {exc}") from exc
        return sorted(out, key=lambda m: m.day)

    def clear_day(self, day: date) -> None:
        """Delete whatever a crashed export left of an uncommitted day (no manifest yet)."""
        self.fs.delete_dir_contents(self.full(day_dir(day)), missing_dir_ok=True)

    def prepare(self, relative: str) -> str:
        """Create the directory of ``relative`` and return the full temporary path to write."""
        self.fs.create_dir(self.full(relative.rpartition("/")[0]), recursive=True)
        return self.full(tmp_path(relative))

    def commit_file(self, relative: str) -> int:
        """Move a closed file from its temporary name to ``relative``; return its size, bytes."""
        self.fs.move(self.full(tmp_path(relative)), self.full(relative))
        return int(self.fs.get_file_info(self.full(relative)).size or 0)

    def write_manifest(self, manifest: Manifest) -> None:
        """Write a day's manifest (temporary name, then moved): the day's commit."""
        final = f"{MANIFESTS}/{day_dir(manifest.day)}.json"
        self.fs.create_dir(self.full(MANIFESTS), recursive=True)
        with self.fs.open_output_stream(self.full(tmp_path(final))) as out:
            out.write(manifest.to_json().encode())
        self.fs.move(self.full(tmp_path(final)), self.full(final))


def open_store(settings: ArchiveSettings, *, create: bool = True) -> Store:
    """Return the Store of ``settings.archive_dest``: S3 for ``s3://bucket/prefix``, else a
    local directory, created if missing when ``create`` (a reader passes False: a missing
    directory is an empty archive, and a mistyped path leaves nothing behind).

    Raises:
        ArchiveError: the filesystem cannot be set up (its message names the cause).
    """
    dest = settings.archive_dest
    if dest.startswith("s3://"):
        endpoint = settings.archive_s3_endpoint
        scheme = "http" if endpoint.startswith("http://") else "https"
        options: dict[str, Any] = {"region": settings.archive_s3_region, "scheme": scheme}
        if endpoint:
            options["endpoint_override"] = endpoint.split("://", 1)[-1]
        if settings.archive_s3_access_key:
            options["access_key"] = settings.archive_s3_access_key
            options["secret_key"] = settings.archive_s3_secret_key.get_secret_value()
        try:
            s3 = pafs.S3FileSystem(**options)
        except Exception as exc:
            raise ArchiveError(f"cannot set up S3 for {dest}: {exc}") from exc
        return Store(s3, dest.removeprefix("s3://").strip("/"))
    root = Path(dest).resolve()
    if create:
        root.mkdir(parents=True, exist_ok=True)
    return Store(pafs.LocalFileSystem(), root.as_posix())
