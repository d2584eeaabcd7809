"""The fold adapter without Kafka, for its tests: ``BatchFolder`` over ``N`` partitions, all
owned by this process, with a dict for a store.

- ``folder_over`` makes the folder over a dict. The dispatch tests' ``World`` folds records
  one batch at a time, a second apart: ``World.send`` folds commands as one batch;
  ``record_of`` and ``fold_batch`` build and fold records by hand (a chosen idem_key);
  ``granted_runs`` reads the grants out of a batch.
- The adapter's and replay's tests fold ``sample_log`` (three jobs every 2 s, ticks on every
  partition, some duplicated) with ``fold_in_batches``; ``record_at`` builds one record.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.ids import run_id_for_tick
from cronlog.job import JobState
from cronlog.model import JobSpec, Schedule, ScheduleKind, main_task
from topology.fold.due_index import DueIndex
from topology.fold.folder import BatchFolder, BatchResult, Outgoing, Record
from topology.kafka.config import KafkaSettings
from topology.kafka.partitioning import partition_for
from topology.kafka.topics import Topics
from topology.wire.codec import Codec, decode_event, encode_command
from topology.wire.state_codec import load_state

N = 4
T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
TOPICS = Topics.of(KafkaSettings(partitions=N))
P = 1


def folder_over(store: dict[str, bytes]) -> BatchFolder:
    """A folder owning all ``N`` partitions whose job table is ``store`` (job_id → record):
    the caller writes each batch's ``writes`` back into it."""
    due = DueIndex()
    due.reset(range(N))
    return BatchFolder(TOPICS, N, lambda _, job_id: store.get(job_id), due, Codec())


class World:
    """One folder owning every partition, with its store; feeds records one batch at a time."""

    def __init__(self) -> None:
        self.store: dict[str, bytes] = {}
        self.folder = folder_over(self.store)
        self.offset = 0
        self.at = T0

    def send(self, *commands: tuple[str, cmd.Command]) -> BatchResult:
        """Fold ``(job_id or "", command)`` records as one batch, one second apart."""
        records = [record_of(self, f"k{self.offset + 1}", j, c) for j, c in commands]
        return fold_batch(self, *records)

    def state(self, job_id: str) -> JobState:
        return load_state(self.store[job_id])


def granted_runs(out: BatchResult) -> list[tuple[str, str]]:
    return [
        (decode_event(s.value).job_id, e.run_id)
        for s in out.sends
        if s.topic == TOPICS.run_events
        and isinstance(e := decode_event(s.value).event, ev.TaskClaimed)
    ]


def record_of(world: World, idem_key: str, job_id: str, command: cmd.Command) -> Record:
    """One record with a chosen idem_key (a re-sent command keeps its key)."""
    world.offset += 1
    world.at += timedelta(seconds=1)
    value = encode_command(cmd.Envelope(idem_key=idem_key, job_id=job_id, command=command))
    p = partition_for(job_id, N) if job_id else P
    key = job_id.encode() if job_id else None
    return Record(p, world.offset, int(world.at.timestamp() * 1000), key, value)


def fold_batch(world: World, *records: Record) -> BatchResult:
    out = world.folder.fold(list(records))
    world.store.update({j: w.value for j, w in out.writes.items()})
    return out


EVERY_2S = JobSpec(
    name="e2",
    schedule=Schedule(ScheduleKind.CRON, "*/2 * * * * *"),
    task_specs=main_task(("true",)),
)


def record_at(
    offset: int,
    at: datetime,
    job_id: str | None,
    command: cmd.Command,
    partition: int | None = None,
) -> Record:
    """Record ``offset`` of ``command`` at ``at`` (idem_key ``c<offset>``); no job: a Tick."""
    p = partition if partition is not None else partition_for(job_id or "", N)
    key = job_id.encode() if job_id else None
    value = encode_command(
        cmd.Envelope(idem_key=f"c{offset}", job_id=job_id or "", command=command)
    )
    return Record(p, offset, int(at.timestamp() * 1000), key, value)


def sample_log() -> list[Record]:
    """Three jobs every 2 s, 8 s of Ticks on every partition (some twice), a claim, a pause."""
    jobs = ["alpha", "beta", "gamma"]
    recs: list[Record] = []
    for j in jobs:
        recs.append(record_at(len(recs), T0, j, cmd.RegisterJob(spec=EVERY_2S)))
    for s in range(1, 9):  # a Tick per second on every partition, some duplicated
        for p in range(N):
            for _ in range(2 if s % 3 == 0 else 1):
                recs.append(record_at(len(recs), T0 + timedelta(seconds=s), None, cmd.Tick(), p))
    run = run_id_for_tick("alpha", T0 + timedelta(seconds=2))
    recs.append(
        record_at(
            len(recs),
            T0 + timedelta(seconds=9),
            "alpha",
            cmd.ClaimTask(run_id=run, task="main", attempt=1, worker_id="w1"),
        )
    )
    recs.append(record_at(len(recs), T0 + timedelta(seconds=9), "alpha", cmd.PauseJob()))
    return recs


def fold_in_batches(records: list[Record], batch: int) -> tuple[list[Outgoing], dict[str, bytes]]:
    """Fold ``records`` from an empty store, ``batch`` at a time; return the sends and store."""
    store: dict[str, bytes] = {}
    due = DueIndex()
    due.reset(range(N))  # this process owns every partition
    folder = BatchFolder(TOPICS, N, lambda _, job_id: store.get(job_id), due, Codec())
    sends: list[Outgoing] = []
    for i in range(0, len(records), batch):
        out = folder.fold(records[i : i + batch])
        sends.extend(out.sends)
        store.update({job: w.value for job, w in out.writes.items()})
    return sends, store
