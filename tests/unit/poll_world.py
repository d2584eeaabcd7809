"""The fold adapter without Kafka, for the dispatch tests: one ``BatchFolder`` owning every
partition, with its store, folding records one batch at a time a second apart.

``World.send`` folds commands as one batch; ``record_of`` and ``fold_batch`` build and fold
records by hand (a chosen idem_key); ``granted_runs`` reads the grants out of a batch.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.job import JobState
from topology.fold.due_index import DueIndex
from topology.fold.folder import BatchFolder, BatchResult, Record
from topology.kafka.config import KafkaSettings
from topology.kafka.partitioning import partition_for
from topology.kafka.topics import Topics
from topology.wire.codec import Codec, decode_event, encode_command
from topology.wire.state_codec import load_state

N = 4
T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
TOPICS = Topics.of(KafkaSettings(partitions=N))
P = 1


class World:
    """One folder owning every partition, with its store; feeds records one batch at a time."""

    def __init__(self) -> None:
        self.store: dict[str, bytes] = {}
        due = DueIndex()
        due.reset(range(N))
        self.folder = BatchFolder(TOPICS, N, lambda _, j: self.store.get(j), due, Codec())
        self.offset = 0
        self.at = T0

    def send(self, *commands: tuple[str, cmd.Command]) -> BatchResult:
        """Fold ``(job_id or "", command)`` records as one batch, one second apart."""
        records = [record_of(self, f"k{self.offset + 1}", j, c) for j, c in commands]
        return fold_batch(self, *records)

    def state(self, job_id: str) -> JobState:
        return load_state(self.store[job_id])


def completed(
    run_id: str, task: str, attempt: int, epoch: int, worker: str, at: datetime
) -> cmd.CompleteTask:
    """The lease holder's report of a successful attempt (exit 0, no output), at ``at``."""
    return cmd.CompleteTask(
        run_id=run_id,
        task=task,
        attempt=attempt,
        epoch=epoch,
        worker_id=worker,
        succeeded=True,
        exit_code=0,
        failure_kind=None,
        output_tail="",
        started_at=at,
        finished_at=at,
    )


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
