"""The read model's embedded RocksDB (rocksdict, raw bytes) and a write batch that reads its writes.

Key layout (all bytes; ``\\x00`` separates parts, which never contain NUL):

    meta:format                          FORMAT tag; another tag → wipe and rebuild
    off:<topic>\\x00<partition>          next offset to consume (decimal)
    job:<job_id>                         job document (JSON)
    run:<run_id>                         run document (JSON)
    jr:<job_id>\\x00<inverted ms>\\x00<run_id>   per-job run index, newest scheduled_for first
    ev:<idem_key>\\x00<job_id>\\x00<index>   each applied event (read-your-writes); the refusal
                                         of a re-used idem_key adds ``\\x00<event_id>``
    eid:<event_id>                       dedupe marker of each applied event (empty value)
    meta:newest                          the newest run-event ``at`` applied, epoch ms (decimal)
    evt:<ms>\\x00<event_id>              time index of applied events (value: their ev: key)
    end:<ms>\\x00<run_id>                time index of ended runs by end (value: job_id)
    dlt:<inverted ms>\\x00<job_id>\\x00<run_id>\\x00<task>   dead letters, newest first
    dlj:<job_id>\\x00<inverted ms>\\x00<run_id>\\x00<task>   one job's dead letters, newest first

(``services/api/readmodel/retention.py`` prunes by ``end:`` and ``evt:``; ``dead_letters`` keeps
``dl*``.)
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rocksdict import Options, Rdict, WriteBatch

# v2: run documents carry task_instances; v3: queued runs (RunQueued) have documents, events
# are deduped by event_id (eid:), a refused re-use of an idem_key is kept (ev:...\x00<event_id>);
# v4: the live-run index (live:), recent run durations (dur:) and critical jobs (crit:) that
# GET /metrics reads (services/api/readmodel/live_runs.py); v5: time indexes for hot-history
# retention
# (meta:newest, evt:, end:) and the dead-letter indexes listings page by cursor (dlt:, dlj:);
# v6: a run's summary names the task that decided it (``decided_by``, issue 24) and keeps the
# outcome of each failed task (``failed_tasks``), so old documents cannot be read as v6 ones
FORMAT = b"cronlog-api-read-model/v6"
"""Version of what the keys and documents mean; bump it to rebuild from offset 0."""


class Store:
    """The projection's RocksDB. Reads are thread-safe; one writer (the consumer thread)."""

    def __init__(self, path: Path, format_tag: bytes = FORMAT) -> None:
        """Open (creating if needed) the DB at ``path``; wipe it if its format tag differs
        from ``format_tag`` (default ``FORMAT``; the task-log store keeps its own)."""
        self.path = path
        self.format_tag = format_tag
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = Rdict(str(path), Options(raw_mode=True))
        if self._db.get(b"meta:format") != format_tag:
            self.wipe()

    def wipe(self) -> None:
        """Delete everything and start empty (rebuild from offset 0 follows)."""
        self._db.close()
        shutil.rmtree(self.path, ignore_errors=True)
        self._db = Rdict(str(self.path), Options(raw_mode=True))
        self._db.put(b"meta:format", self.format_tag)

    def get(self, key: bytes) -> bytes | None:
        """Return the value at ``key``, or None."""
        value: bytes | None = self._db.get(key)
        return value

    def get_json(self, key: bytes) -> dict[str, Any] | None:
        """Return the JSON document at ``key``, or None."""
        raw = self.get(key)
        return json.loads(raw) if raw is not None else None

    def scan(
        self, prefix: bytes, limit: int | None = None, start: bytes | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        """Yield ``(key, value)`` of keys starting with ``prefix``, in order, at most ``limit``,
        from ``start`` (a key at or after ``prefix``; default ``prefix``) on."""
        for n, (key, value) in enumerate(self._db.items(from_key=max(start or prefix, prefix))):
            if (
                not isinstance(key, bytes)
                or not key.startswith(prefix)
                or (limit is not None and n >= limit)
            ):
                return
            yield key, value

    def write(self, puts: dict[bytes, bytes | None]) -> None:
        """Write ``puts`` atomically (one RocksDB write batch); a None value deletes its key."""
        if not puts:
            return
        batch = WriteBatch(raw_mode=True)
        for key, value in puts.items():
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        self._db.write(batch)

    def close(self) -> None:
        """Flush and close the DB."""
        self._db.close()


class Batch:
    """Writes buffered for one atomic commit; ``get`` sees them (reads its own writes)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.puts: dict[bytes, bytes | None] = {}
        """Pending writes; None is a pending delete."""
        self._docs: dict[bytes, dict[str, Any]] = {}

    def get(self, key: bytes) -> bytes | None:
        """Return the pending value at ``key``, else the stored one, else None."""
        return self.puts[key] if key in self.puts else self.store.get(key)

    def get_json(self, key: bytes) -> dict[str, Any] | None:
        """Return the JSON document at ``key`` (pending or stored), or None."""
        raw = self.get(key)
        return json.loads(raw) if raw is not None else None

    def put(self, key: bytes, value: bytes) -> None:
        """Buffer ``value`` at ``key``."""
        self.puts[key] = value
        self._docs.pop(key, None)

    def peek_json(self, key: bytes) -> dict[str, Any] | None:
        """Return the JSON document at ``key`` for reading, without parsing it again when this
        batch put it: then it is the very object given to ``put_json`` (do not mutate it
        without putting it again)."""
        doc = self._docs.get(key)
        return doc if doc is not None else self.get_json(key)

    def delete(self, key: bytes) -> None:
        """Buffer the deletion of ``key`` (reads of this batch see it gone)."""
        self.puts[key] = None
        self._docs.pop(key, None)

    def put_json(self, key: bytes, doc: dict[str, Any]) -> None:
        """Buffer the JSON document ``doc`` at ``key``."""
        self.puts[key] = json.dumps(doc, separators=(",", ":")).encode()
        self._docs[key] = doc

    def commit(self) -> None:
        """Write every buffered put in one atomic RocksDB batch, then forget them."""
        self.store.write(self.puts)
        self.puts = {}
        self._docs = {}
