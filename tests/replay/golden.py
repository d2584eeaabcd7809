"""Golden replay logs: read a recorded command log, fold it the way ``cronlog replay`` does,
and render what it decided so it can be compared with the checked-in expectations.

Files under ``tests/replay/logs/`` (one scenario each):

- ``<name>.jsonl``: the command log. Line 1 is a header (``format``, ``scenario``,
  ``schema_version``, ``partitions``, ``description``; ``definitions`` when they are written
  in the old shape of issue 23, and ``same_as`` when the log must fold to another log's
  expectations and has none of its own); every further line one record in
  append order: ``{"p": partition, "o": offset, "ts": LogAppendTime epoch ms, "key": UTF-8
  key or null, "value": base64 of the record value}``. Values are Avro bytes written with
  the schemas of ``schema_version`` (``schemas/history/<v>/``, or the current schemas).
  Recorded once (``record.py``); never rewritten by ``--regen``.
- ``<name>.events.jsonl``: the run-events the fold publishes, one per line in publication
  order: partition, event_id, job_id, at, idem_key, index, type, the event's fields, and the
  sha256 (first 16 hex digits) of the encoded Avro body, so a change of wire bytes shows.
- ``<name>.state.json``: per partition, the sha256 digest of the job records
  (``topology.snapshots.replay.state_digest``) and each job record as JSON; the dead-letter and
  command counts; and the fingerprint of the RunEvent schema the events were written with (a schema
  change shows there once instead of in every event's hash).

``python -m tests.replay.golden --regen`` rewrites the expectations from the current code, for
review (``git diff tests/replay/logs``): a change there is a change of what cronlog decides.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import enum
import hashlib
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from cronlog.time import iso
from topology.fold.folder import Record
from topology.fold.state_cache import StateCache
from topology.kafka.config import KafkaSettings
from topology.kafka.topics import Topics
from topology.snapshots.replay import Replayer, state_digest
from topology.wire.codec import Codec

LOGS = Path(__file__).resolve().parent / "logs"
FORMAT = "cronlog-golden-log/1"
SO_HEADER = 10
"""Bytes of the single-object header (marker + fingerprint) before the Avro body."""
BATCH = 500
"""Records per fold batch, per partition (as ``cronlog replay`` reads them)."""


def jsonable(value: object) -> Any:
    """Return ``value`` as plain JSON data: dataclasses as objects, instants as ISO-8601 UTC,
    durations as ``"<n>ms"``, enums as their value, tuples as lists, bytes as hex."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, timedelta):
        return f"{value // timedelta(milliseconds=1)}ms"
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple | list):
        return [jsonable(v) for v in value]
    if isinstance(value, bytes):
        return value.hex()
    return value


@dataclass(frozen=True, slots=True)
class Log:
    """A golden command log as read from its file."""

    name: str
    header: dict[str, Any]
    records: tuple[Record, ...]

    @property
    def partitions(self) -> int:
        """Partition count of the recorded commands topic."""
        return int(self.header["partitions"])


def read_log(path: Path) -> Log:
    """Read ``<name>.jsonl``.

    Raises:
        ValueError: not a golden log of this format.
    """
    lines = path.read_text().splitlines()
    header = json.loads(lines[0])
    if header.get("format") != FORMAT:
        raise ValueError(f"{path}: not a {FORMAT} file (header {header!r})")
    records = tuple(
        Record(
            r["p"],
            r["o"],
            r["ts"],
            None if r["key"] is None else r["key"].encode(),
            base64.b64decode(r["value"]),
        )
        for r in map(json.loads, lines[1:])
    )
    return Log(path.name.removesuffix(".jsonl"), header, records)


def write_log(path: Path, header: dict[str, Any], records: list[Record]) -> None:
    """Write a golden command log (``record.py`` only)."""
    out = [json.dumps({"format": FORMAT, **header}, sort_keys=True)]
    out += [
        json.dumps(
            {
                "p": r.partition,
                "o": r.offset,
                "ts": r.timestamp_ms,
                "key": None if r.key is None else r.key.decode(),
                "value": base64.b64encode(r.value).decode(),
            }
        )
        for r in records
    ]
    path.write_text("\n".join(out) + "\n")


@dataclass(frozen=True, slots=True)
class Folded:
    """What folding a log decided, rendered for comparison.

    Attributes:
        events: one JSON line per published run-event, in publication order.
        state: the JSON document of ``<name>.state.json``.
    """

    events: tuple[str, ...]
    state: dict[str, Any]


def _partition_batches(log: Log, size: int = BATCH) -> Iterator[list[Record]]:
    for p in range(log.partitions):
        recs = [r for r in log.records if r.partition == p]
        for i in range(0, len(recs), size):
            yield recs[i : i + size]


def fold(
    log: Log, codec: Codec | None = None, *, cached: bool = False, batch_size: int = BATCH
) -> Folded:
    """Fold ``log`` with the scheduler's fold (``Replayer``, as ``cronlog replay`` does:
    partition after partition, in batches of ``batch_size``) and render its events and final state.
    ``cached`` keeps decoded states between batches as the scheduler does (``StateCache``)."""
    codec = codec or Codec()
    store: dict[bytes, bytes] = {}
    replayer = Replayer(
        Topics.of(KafkaSettings(partitions=log.partitions)),
        log.partitions,
        store,
        codec,
        StateCache() if cached else None,
    )
    events: list[str] = []
    fingerprints: set[str] = set()
    for batch in _partition_batches(log, batch_size):
        for out in replayer.fold(batch):
            e = codec.decode_event(out.value)
            fingerprints.add(out.value[2:SO_HEADER].hex())
            events.append(
                json.dumps(
                    {
                        "p": batch[0].partition,
                        "event_id": e.event_id,
                        "job_id": e.job_id,
                        "at": iso(e.at),
                        "idem_key": e.idem_key,
                        "index": e.index,
                        "type": type(e.event).__name__,
                        "event": jsonable(e.event),
                        "bytes": hashlib.sha256(out.value[SO_HEADER:]).hexdigest()[:16],
                    },
                    sort_keys=True,
                )
            )
    partitions = {}
    for p in range(log.partitions):
        jobs = replayer.snapshot(p)
        partitions[str(p)] = {
            "digest": state_digest(jobs.items()),
            "jobs": {k.decode(): json.loads(v.split(b":", 1)[1]) for k, v in sorted(jobs.items())},
        }
    return Folded(
        tuple(events),
        {
            "run_event_fingerprints": sorted(fingerprints),
            "dead_letters": replayer.dead_letters,
            "commands": replayer.commands,
            "partitions": partitions,
        },
    )


def expectations_of(name: str) -> str:
    """Return the log whose expectations log ``name`` folds to: its header's ``same_as``, or
    itself."""
    with (LOGS / f"{name}.jsonl").open() as f:
        header = json.loads(f.readline())
    return str(header.get("same_as", name))


def expected(name: str) -> Folded:
    """Read the checked-in expectations of log ``name`` (``expectations_of``)."""
    name = expectations_of(name)
    events = (LOGS / f"{name}.events.jsonl").read_text().splitlines()
    return Folded(tuple(events), json.loads((LOGS / f"{name}.state.json").read_text()))


def write_expected(name: str, folded: Folded) -> None:
    """Write ``folded`` as the expectations of log ``name``."""
    (LOGS / f"{name}.events.jsonl").write_text("".join(e + "\n" for e in folded.events))
    (LOGS / f"{name}.state.json").write_text(
        json.dumps(folded.state, indent=1, sort_keys=True) + "\n"
    )


def first_difference(want: Folded, got: Folded) -> str | None:
    """Name the first difference between expectations and a fold, or None if equal."""
    for i, (a, b) in enumerate(zip(want.events, got.events, strict=False)):
        if a != b:
            return f"event #{i} differs:\n  expected {a}\n  got      {b}"
    if len(want.events) != len(got.events):
        n = min(len(want.events), len(got.events))
        extra = (want.events if len(want.events) > n else got.events)[n]
        return (
            f"{len(want.events)} events expected, {len(got.events)} folded; "
            f"first unmatched: {extra}"
        )
    if want.state != got.state:
        for key in ("run_event_fingerprints", "dead_letters", "commands"):
            if want.state.get(key) != got.state.get(key):
                return f"{key}: expected {want.state.get(key)}, got {got.state.get(key)}"
        for p, part in want.state["partitions"].items():
            mine = got.state["partitions"].get(p, {})
            for job_id in sorted(set(part["jobs"]) | set(mine.get("jobs", {}))):
                a, b = part["jobs"].get(job_id), mine.get("jobs", {}).get(job_id)
                if a != b:
                    return (
                        f"partition {p}, job {job_id!r}: state differs:\n"
                        f"  expected {a}\n  got      {b}"
                    )
            if part["digest"] != mine.get("digest"):
                return f"partition {p}: state digest differs"
    return None


def log_names() -> list[str]:
    """The names of every golden log, sorted."""
    return sorted(
        p.name.removesuffix(".jsonl")
        for p in LOGS.glob("*.jsonl")
        if not p.name.endswith(".events.jsonl")
    )


def main(argv: list[str] | None = None) -> int:
    """Check every golden log (exit 1 on a difference), or ``--regen`` its expectations."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--regen", action="store_true", help="rewrite the expectations")
    parser.add_argument("names", nargs="*", help="logs to handle (default: all)")
    args = parser.parse_args(argv)
    failed = 0
    for name in args.names or log_names():
        got = fold(read_log(LOGS / f"{name}.jsonl"))
        if args.regen and expectations_of(name) == name:
            write_expected(name, got)
            print(f"{name}: {len(got.events)} events written")
            continue
        diff = first_difference(expected(name), got)
        print(f"{name}: {'ok' if diff is None else diff}")
        failed += diff is not None
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
