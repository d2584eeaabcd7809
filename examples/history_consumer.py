"""A run-history consumer written only against cronlog's wire contract (``schemas/*.avsc``).

It reads ``cronlog.run-events`` with confluent-kafka and decodes it with fastavro; it imports no
cronlog code, as another team's service would. From the events it rebuilds each job's run
history: runs, their states, their attempts. ``tests/integration/test_replay.py`` checks that
its history agrees with the API's.

    python examples/history_consumer.py --bootstrap 127.0.0.1:19092 \\
        --topic cronlog.run-events [--job JOB_ID]

Wire format (schemas/README.md): Avro single-object encoding, ``C3 01`` + the 8-byte
CRC-64-AVRO fingerprint of the writer schema + the Avro body. The writer schema is looked up
by fingerprint among ``schemas/`` and ``schemas/history/*/`` and resolved against the current
``cronlog.RunEvent`` (Avro schema resolution), so records written by older versions still read.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from fastavro import schemaless_reader
from fastavro.schema import fingerprint, load_schema, to_parsing_canonical_form

SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"
MAGIC = b"\xc3\x01"
"""Avro single-object encoding marker (Avro spec, "Single-object encoding")."""
TERMINAL = {"succeeded", "failed", "cancelled"}


class UndecodableRecord(ValueError):
    """A record that is not a RunEvent this consumer can read (framing or unknown schema)."""


class RunEventDecoder:
    """Decodes ``cronlog.RunEvent`` values from their single-object encoding.

    Args:
        schema_dir: the ``schemas/`` folder (its ``history/*`` snapshots are read too).
    """

    def __init__(self, schema_dir: Path = SCHEMAS) -> None:
        self.reader = load_schema(str(schema_dir / "cronlog.RunEvent.avsc"))
        self.writers: dict[bytes, Any] = {}
        for folder in [schema_dir, *sorted((schema_dir / "history").glob("*"))]:
            path = folder / "cronlog.RunEvent.avsc"
            if path.exists():
                writer = load_schema(str(path))
                fp = fingerprint(to_parsing_canonical_form(writer), "CRC-64-AVRO")
                self.writers[bytes.fromhex(fp)] = writer

    def decode(self, data: bytes) -> dict[str, Any]:
        """Return the event as a dict: envelope fields, ``type`` (e.g. ``TaskClaimed``) and
        ``body`` (the event's own fields; instants as aware UTC datetimes).

        Raises:
            UndecodableRecord: not single-object encoded, or written with an unknown schema
                (e.g. the Confluent framing, which needs a schema registry).
        """
        if data[:2] != MAGIC or len(data) < 10:
            raise UndecodableRecord(f"not Avro single-object encoding: starts {data[:5]!r}")
        writer = self.writers.get(data[2:10])
        if writer is None:
            raise UndecodableRecord(f"unknown writer schema fingerprint {data[2:10].hex()}")
        record = schemaless_reader(
            io.BytesIO(data[10:]),
            writer,
            self.reader,
            return_record_name=True,
            return_record_name_override=True,
        )
        name, body = record.pop("body")
        return {**record, "type": name.rsplit(".", 1)[-1], "body": body}


@dataclass
class Attempt:
    """One attempt of one task instance."""

    task: str
    attempt: int
    state: str = "ready"
    worker_id: str | None = None
    epoch: int | None = None
    exit_code: int | None = None
    failure_kind: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None


@dataclass
class Run:
    """One run of a job: its state, its attempts in the order they appeared."""

    run_id: str
    job_id: str
    scheduled_for: datetime
    trigger: str
    state: str
    exit_code: int | None = None
    failure_kind: str | None = None
    output_tail: str = ""
    attempts: list[Attempt] = field(default_factory=list)
    dead_lettered: list[str] = field(default_factory=list)

    def attempt(self, task: str, number: int) -> Attempt:
        """Return the (task, number) attempt, created in state ``ready`` if new."""
        for a in self.attempts:
            if (a.task, a.attempt) == (task, number):
                return a
        self.attempts.append(Attempt(task, number))
        return self.attempts[-1]


@dataclass
class History:
    """Every run seen so far, deduplicated by event_id (the fold may re-deliver)."""

    runs: dict[str, Run] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)

    def apply(self, event: dict[str, Any]) -> None:
        """Apply one decoded RunEvent; duplicates and events of unknown runs change nothing."""
        if event["event_id"] in self.seen:
            return
        self.seen.add(event["event_id"])
        kind, body = event["type"], event["body"]
        if kind in ("RunScheduled", "RunBuffered"):
            run = self.runs.get(body["run_id"])
            if run is None:
                self.runs[body["run_id"]] = Run(
                    body["run_id"],
                    event["job_id"],
                    body["scheduled_for"],
                    body["trigger"],
                    "scheduled" if kind == "RunScheduled" else "buffered",
                )
            elif run.state == "buffered" and kind == "RunScheduled":
                run.state = "scheduled"
            return
        run = self.runs.get(body.get("run_id", ""))
        if run is None or run.state in TERMINAL:
            return  # job-level events, or a run that already ended: terminal states absorb
        self._run_event(run, kind, body)

    @staticmethod
    def _run_event(run: Run, kind: str, body: dict[str, Any]) -> None:
        if kind == "TaskReady":
            run.state = "ready"
            run.attempt(body["task"], body["attempt"])
        elif kind == "TaskClaimed":
            run.state = "running"
            a = run.attempt(body["task"], body["attempt"])
            a.state, a.worker_id, a.epoch = "running", body["worker_id"], body["epoch"]
        elif kind in ("TaskSucceeded", "TaskFailed"):
            a = run.attempt(body["task"], body["attempt"])
            a.state = "succeeded" if kind == "TaskSucceeded" else "failed"
            a.worker_id, a.epoch, a.exit_code = body["worker_id"], body["epoch"], body["exit_code"]
            a.failure_kind = body.get("failure_kind")
            a.started_at, a.finished_at = body["started_at"], body["finished_at"]
            run.exit_code, run.failure_kind = a.exit_code, a.failure_kind
            run.output_tail = body["output_tail"]
        elif kind == "RetryScheduled":
            run.state = "retrying"
        elif kind == "TaskCancelled":
            run.attempt(body["task"], body["attempt"]).state = "cancelled"
        elif kind == "TaskDeadLettered":
            run.dead_lettered.append(body["task"])
        elif kind in ("RunSucceeded", "RunFailed", "RunCancelled"):
            run.state = {
                "RunSucceeded": "succeeded",
                "RunFailed": "failed",
                "RunCancelled": "cancelled",
            }[kind]

    def of_job(self, job_id: str) -> list[Run]:
        """Return a job's runs, oldest tick first."""
        return sorted(
            (r for r in self.runs.values() if r.job_id == job_id),
            key=lambda r: (r.scheduled_for, r.run_id),
        )


def read_history(
    bootstrap: str, topic: str, schema_dir: Path = SCHEMAS, timeout_s: float = 30.0
) -> History:
    """Read ``topic`` from its beginning to the end offsets seen at start into a History.

    Raises:
        UndecodableRecord: a record could not be decoded (its partition and offset named).
        TimeoutError: the end was not reached within ``timeout_s`` of silence.
    """
    decoder, history = RunEventDecoder(schema_dir), History()
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "enable.auto.commit": False,
            "group.id": f"history-{uuid.uuid4().hex}",
            # run-events are written in transactions: read only committed ones
            "isolation.level": "read_committed",
        }
    )
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in meta.partitions
        }
        pending = {p for p, end in ends.items() if end > 0}
        left = sum(ends.values())  # records still to read (consume() waits for all it asks)
        consumer.assign([TopicPartition(topic, p, 0) for p in pending])
        silent = 0.0
        while pending:
            msgs = consumer.consume(max(1, min(500, left)), timeout=1.0)
            if not msgs:
                # cronlog writes run-events in transactions: each ends with a commit marker
                # that takes an offset but is never delivered, so the consumer's position
                # (which skips it), not the last record's offset, says a partition is done.
                for tp in consumer.position([TopicPartition(topic, p) for p in pending]):
                    if tp.offset >= ends[tp.partition]:
                        pending.discard(tp.partition)
            silent = 0.0 if msgs else silent + 1.0
            if pending and silent >= timeout_s:
                raise TimeoutError(f"{topic}: no records for {timeout_s}s before the end")
            for m in msgs:
                if m.error() is not None or m.offset() >= ends[m.partition()]:
                    continue
                left -= 1
                try:
                    history.apply(decoder.decode(m.value()))
                except UndecodableRecord as exc:
                    raise UndecodableRecord(f"{topic}/{m.partition()}@{m.offset()}: {exc}") from exc
                if m.offset() + 1 >= ends[m.partition()]:
                    pending.discard(m.partition())
    finally:
        consumer.close()
    return history


def main() -> int:
    """Print the run history (JSON) of every job, or of ``--job``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:19092")
    parser.add_argument("--topic", default="cronlog.run-events")
    parser.add_argument("--job", help="only this job_id")
    args = parser.parse_args()
    history = read_history(args.bootstrap, args.topic)
    jobs = sorted({r.job_id for r in history.runs.values()})
    out = {job: [asdict(r) for r in history.of_job(job)] for job in jobs if args.job in (None, job)}
    json.dump(out, sys.stdout, indent=2, default=str)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
