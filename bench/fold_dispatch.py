"""Benchmark: the fold's dispatch cycle in process (no Kafka): completions with eager grants.

Usage: ``.venv/bin/python bench/fold_dispatch.py [--jobs 6000] [--workers 4] [--slots 32]
[--rounds 3] [--tenant team-a]`` (``--profile out.raw`` to run it under py-spy is done from
outside).

What the burst's fold does once the runs exist (bench/burst.py's steady part, where the fold
is the bound): ``--jobs`` manual jobs are registered and triggered (not timed), every worker
polls each partition once, then each granted claim is completed with ``claim_next=1`` (the
slot it frees asks for the next ready task, as the worker does) in batches of
``--workers x --slots / 2`` records, until nothing is left. Timed: the CPU time of
``BatchFolder.fold`` only (``time.process_time``: other load on the box counts less; decode,
decide, evolve, size checks, event encoding), with the state cache as the scheduler
uses it. Prints completions per second of fold time and microseconds per completion.

``--tenant team-a``: the jobs belong to a tenant of the tenant ledger (docs/tenants.md), with a
fleet of ``--workers x --slots``; what the fold appends for the ledger (asks, grants,
returns) is folded as the log would, and timed too (not the asks of the triggers). Measured
2026-12-02 on the 2-core box, 1,000 jobs: 2,343 completions/s for the default tenant, 770/s
for a ledger tenant (each task: the ledger's ask, grant and return, and the job's grant).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.ledger import FLEET, LEDGER_KEY
from cronlog.model import JobSpec, Schedule, ScheduleKind, main_task
from tests.builders import completed
from topology.fold.due_index import DueIndex
from topology.fold.folder import BatchFolder, BatchResult, Record
from topology.fold.state_cache import StateCache
from topology.kafka.config import KafkaSettings
from topology.kafka.partitioning import partition_for
from topology.kafka.topics import Topics
from topology.wire.codec import Codec, decode_event, encode_command

N = 12
MANUAL = JobSpec(
    name="bench", schedule=Schedule(ScheduleKind.MANUAL), task_specs=main_task(("true",))
)
T0 = datetime(2026, 1, 1, tzinfo=UTC)


class Bench:
    """One folder owning every partition, with a dict store and the scheduler's state cache."""

    def __init__(self) -> None:
        self.topics = Topics.of(KafkaSettings(partitions=N))
        self.store: dict[str, bytes] = {}
        self.cache = StateCache(50_000)
        due, ready = DueIndex(), DueIndex()
        due.reset(range(N))
        ready.reset(range(N))
        self.folder = BatchFolder(
            self.topics,
            N,
            lambda _, j: self.store.get(j),
            due,
            Codec(),
            ready=ready,
            cache=self.cache,
        )
        self.offset = 0
        self.fold_s = 0.0

    def record(
        self,
        job_id: str,
        command: cmd.Command,
        partition: int | None = None,
        tenant: str = "default",
    ) -> Record:
        self.offset += 1
        value = encode_command(
            cmd.Envelope(idem_key=f"k{self.offset}", job_id=job_id, command=command, tenant=tenant)
        )
        p = partition_for(job_id, N) if job_id else partition
        at = T0 + timedelta(milliseconds=self.offset)
        return Record(
            p or 0, self.offset, int(at.timestamp() * 1000), job_id.encode() or None, value
        )

    def fold(self, records: list[Record], timed: bool = True) -> BatchResult:
        started = time.process_time()
        out = self.folder.fold(records)
        if timed:
            self.fold_s += time.process_time() - started
        self.store.update({j: w.value for j, w in out.writes.items()})
        self.cache.update(out.states)
        return out

    def fold_appended(self, out: BatchResult, timed: bool = True) -> BatchResult:
        """Fold what ``out`` appended to the commands topic (the tenant ledger's commands),
        and what that appends, as the log would; return everything folded merged."""
        merged = BatchResult(sends=list(out.sends))
        appended = [s for s in out.sends if s.topic == self.topics.commands]
        while appended:
            records = []
            for s in appended:
                self.offset += 1
                p = s.partition if s.partition is not None else partition_for(s.key or b"", N)
                at = int((T0 + timedelta(milliseconds=self.offset)).timestamp() * 1000)
                records.append(Record(p, self.offset, at, s.key, s.value))
            more = self.fold(records, timed)
            merged.sends += more.sends
            appended = [s for s in more.sends if s.topic == self.topics.commands]
        return merged

    def claims(self, out: BatchResult) -> list[tuple[str, ev.TaskClaimed]]:
        found = []
        for s in out.sends:
            if s.topic == self.topics.run_events:
                e = decode_event(s.value)
                if isinstance(e.event, ev.TaskClaimed):
                    found.append((e.job_id, e.event))
        return found


def _poll_all(b: Bench, workers: int, slots: int) -> list[tuple[str, ev.TaskClaimed]]:
    """Every worker polls every partition once."""
    claims = []
    for w in range(workers):
        polls = [
            b.record("", cmd.PollTasks(worker_id=f"w{w}", slots=slots // N + 1, poll_id=f"p{p}"), p)
            for p in range(N)
        ]
        claims += b.claims(b.fold_appended(b.fold(polls)))
    return claims


def run_once(jobs: int, workers: int, slots: int, tenant: str) -> tuple[float, int]:
    """Return (completions per second of fold time, completions)."""
    b = Bench()
    names = [f"job-{i}" for i in range(jobs)]
    spec = replace(MANUAL, tenant=tenant)
    if tenant != "default":  # the ledger shares a fleet of the workers' slots
        fleet = cmd.SetTenantLimits(tenant=FLEET, max_running_tasks=workers * slots)
        b.fold([b.record(LEDGER_KEY, fleet)], False)
    for i in range(0, jobs, 500):
        chunk = names[i : i + 500]
        b.fold([b.record(j, cmd.RegisterJob(spec=spec), tenant=tenant) for j in chunk], False)
        out = b.fold([b.record(j, cmd.TriggerJob(), tenant=tenant) for j in chunk], False)
        b.fold_appended(out, False)
    pending = _poll_all(b, workers, slots)
    done, batch = 0, max(1, workers * slots // 2)
    now = T0 + timedelta(seconds=1)
    while pending:
        take, pending = pending[:batch], pending[batch:]
        records = [
            b.record(
                job,
                completed(
                    c.run_id,
                    task=c.task,
                    attempt=c.attempt,
                    epoch=c.epoch,
                    worker=c.worker_id,
                    at=now,
                    claim_next=1,
                ),
            )
            for job, c in take
        ]
        pending += b.claims(b.fold_appended(b.fold(records)))
        done += len(take)
        if not pending:  # grants that came after the last completion: a poll finds them
            pending = _poll_all(b, workers, slots)
    return done / b.fold_s, done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=6000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--slots", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--tenant",
        default="default",
        help="the jobs' tenant; any but 'default' goes through the tenant ledger (a fleet of "
        "the workers' slots), whose commands are folded and timed too",
    )
    args = parser.parse_args()
    rates = []
    for _ in range(args.rounds):
        rate, done = run_once(args.jobs, args.workers, args.slots, args.tenant)
        rates.append(rate)
        print(f"  {done} completions: {rate:,.0f}/s of fold time ({1e6 / rate:,.0f} µs each)")
    print(
        f"dispatch cycle in process: median {statistics.median(rates):,.0f} completions/s "
        f"(each: decode, the completion's decision, an eager grant, events, size checks)"
    )


if __name__ == "__main__":
    main()
