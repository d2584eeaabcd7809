"""The worst cases add up: with every field at its limit, nothing the fold sends is too large.

For each command type, the largest command the codec accepts (strings at their limits in
4-byte UTF-8 characters, arrays full, the definition as large as the job record allows) is
folded by ``BatchFolder`` against a job it acts on, and every message the fold would send
(run events, ready and reply copies, dead letters: value plus key) must stay under 900 KB,
well under the producers' ``message.max.bytes`` of 1,000,000 (schemas/README.md, "Limits").
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog import limits
from cronlog.ids import run_id_for_trigger
from cronlog.model import (
    AfterOn,
    HttpHeader,
    HttpTask,
    JobSpec,
    RetryPolicy,
    Schedule,
    ScheduleKind,
    TaskKind,
    TaskSpec,
    main_task,
)
from cronlog.vocabulary import FailureKind, RejectReason, Reprocess, UpstreamOutcome
from topology.fold.due_index import DueIndex
from topology.fold.folder import BatchFolder, Outgoing, Record
from topology.kafka.config import KafkaSettings
from topology.kafka.partitioning import partition_for
from topology.kafka.topics import Topics
from topology.wire.codec import decode_event, default_codec, encode_command

BUDGET = 900_000
"""Largest message the fold may send, bytes (value + key)."""
WIDE = "\U0001f600"  # 4 bytes of UTF-8, printed as itself
OPAQUE = "\U000e0001"  # 4 bytes of UTF-8, printed by repr() as 10 characters
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
N = 4
TOPICS = Topics.of(KafkaSettings(partitions=N))
ID_CHAR = "~"  # identifiers (job, run, worker ids) are printable ASCII: limits.ID_CHARS
JOB = ID_CHAR * limits.MAX_JOB_ID_CHARS
UPSTREAM = "u" * limits.MAX_JOB_ID_CHARS
WORKER = ID_CHAR * limits.MAX_WORKER_ID_CHARS
ARGV_BYTES = limits.MAX_COMMAND_BYTES  # the core counts argv in bytes: 16384 wide characters
TASKS = 200
BIG_TASKS = 5  # tasks with a full argv: as many as the 512 KiB job record holds beside a run
# and the room its claims need (topology.fold.folder.CLAIM_RESERVE_BYTES)


def idem(n: int) -> str:
    """An idem_key at its limit, distinct per ``n``."""
    return OPAQUE * (limits.MAX_IDEM_KEY_CHARS - 4) + f"{n:04d}"


def name(i: int) -> str:
    return f"{i:03d}" + "t" * (limits.MAX_TASK_NAME - 3)


def big_spec(big_tasks: int = BIG_TASKS) -> JobSpec:
    """A valid DAG job with every field the core allows at its longest."""
    full = (WIDE * (ARGV_BYTES // 4),)
    policy = RetryPolicy(
        non_retryable_exit_codes=tuple(range(1, 256)), max_backoff=limits.MAX_DURATION
    )
    tasks = tuple(
        TaskSpec(
            name(i),
            full if i < big_tasks else ("true",),
            depends_on=(name(0),) if i == TASKS - 1 else (),
            retry_policy=policy if i == 0 else None,
            timeout=limits.MAX_DURATION if i == 0 else None,
            lease_ttl=limits.MAX_DURATION if i == 0 else None,
        )
        for i in range(TASKS)
    )
    return JobSpec(
        name=WIDE * limits.MAX_NAME_CHARS,
        schedule=Schedule(
            ScheduleKind.CRON,
            "0 0 1 1 *",
            "America/Argentina/ComodRivadavia",
            catchup_window=limits.MAX_DURATION,
        ),
        task_specs=tasks,
        max_active_runs=5,  # x 200 tasks: the core's 1000 task instances
        max_active_tasks=TASKS,
        grace=limits.MAX_DURATION,
        run_timeout=limits.MAX_DURATION,
    )


class World:
    """A fold with its store, fed one command record at a time."""

    def __init__(self) -> None:
        self.store: dict[str, bytes] = {}
        due = DueIndex()
        due.reset(range(N))
        self.folder = BatchFolder(
            TOPICS, N, lambda _p, job: self.store.get(job), due, default_codec()
        )
        self.offset = 0
        self.sent: list[Outgoing] = []

    def send(
        self, command: cmd.Command, *, job_id: str = JOB, key: str | None = None
    ) -> list[Outgoing]:
        self.offset += 1
        if isinstance(command, cmd.PollTasks):  # sent to a partition, like a Tick
            job_id = ""
        value = encode_command(
            cmd.Envelope(idem_key=key or idem(self.offset), job_id=job_id, command=command)
        )
        record = Record(
            partition_for(JOB.encode() if not job_id else job_id.encode(), N),
            self.offset,
            int((T0 + timedelta(seconds=self.offset)).timestamp() * 1000),
            job_id.encode() if job_id else None,
            value,
        )
        out = self.folder.fold([record])
        self.store.update({j: w.value for j, w in out.writes.items()})
        self.sent += out.sends
        return out.sends

    def events(self, sends: list[Outgoing]) -> list[ev.Event]:
        return [decode_event(m.value).event for m in sends if m.topic == TOPICS.run_events]


def registered(big_tasks: int = BIG_TASKS) -> tuple[World, str]:
    """A world with the big job registered and one run triggered; returns the run."""
    world = World()
    [registered] = world.events(world.send(cmd.RegisterJob(spec=big_spec(big_tasks))))
    assert isinstance(registered, ev.JobRegistered)
    world.send(cmd.TriggerJob(), key=idem(9999))
    return world, run_id_for_trigger(JOB, idem(9999))


def claimed(big_tasks: int = BIG_TASKS) -> tuple[World, str]:
    """``registered``, and the run's first task claimed by ``WORKER`` (epoch 1)."""
    world, run = registered(big_tasks)
    events = world.events(
        world.send(cmd.ClaimTask(run_id=run, task=name(0), attempt=1, worker_id=WORKER))
    )
    assert [type(e) for e in events] == [ev.TaskClaimed]
    return world, run


def lease(run: str) -> dict[str, typing.Any]:
    return {"run_id": run, "task": name(0), "attempt": 1, "epoch": 1, "worker_id": WORKER}


def _register(world: World, run: str) -> cmd.Command:
    return cmd.RegisterJob(spec=big_spec())  # a second registration: job_exists


def _update(world: World, run: str) -> cmd.Command:
    return cmd.UpdateJob(spec=replace(big_spec(), name=OPAQUE * limits.MAX_NAME_CHARS))


def _backfill_one_task(world: World, run: str) -> cmd.Command:
    plain = JobSpec(
        WIDE * limits.MAX_NAME_CHARS, Schedule(ScheduleKind.CRON, "0 * * * *"), main_task(("x",))
    )
    world.send(cmd.DeleteJob())
    world.send(cmd.RegisterJob(spec=plain))
    ticks = tuple(T0 - timedelta(days=365 * 5, hours=k) for k in range(limits.MAX_BACKFILL_TICKS))
    return cmd.BackfillJob(ticks=ticks, reprocess=Reprocess.ALL)  # 1000 runs


def _claim(world: World, run: str) -> cmd.Command:
    return cmd.ClaimTask(run_id=run, task=name(1), attempt=1, worker_id=WORKER)


def _complete(world: World, run: str) -> cmd.Command:
    return cmd.CompleteTask(
        **lease(run),
        succeeded=False,
        exit_code=-(2**31),
        failure_kind=FailureKind.NONZERO_EXIT,
        output_tail=WIDE * limits.MAX_OUTPUT_TAIL_CHARS,
        started_at=limits.LATEST,
        finished_at=limits.LATEST,
    )


def _rerun(world: World, run: str) -> cmd.Command:
    snapshots = tuple(
        cmd.TaskSnapshot(
            task=name(i), state="failed", attempt=2**31 - 1, epoch=2**31 - 1
        )  # an ended run the fold no longer holds, as the API's read model saw it
        for i in range(TASKS)
    )
    return cmd.RerunTask(
        run_id=ID_CHAR * limits.MAX_RUN_ID_CHARS,
        task=name(0),
        downstream=True,
        scheduled_for=limits.LATEST,
        trigger=OPAQUE * limits.MAX_LABEL_CHARS,
        tasks=snapshots,
    )


def _upstream(world: World, run: str) -> cmd.Command:
    after = replace(
        big_spec(big_tasks=1),
        schedule=Schedule(ScheduleKind.AFTER, after_job_id=UPSTREAM, after_on=AfterOn.DONE),
    )
    world.send(cmd.DeleteJob())
    world.send(cmd.RegisterJob(spec=after))
    return cmd.UpstreamRunEnded(
        upstream_job_id=UPSTREAM,
        upstream_run_id=ID_CHAR * limits.MAX_RUN_ID_CHARS,
        upstream_scheduled_for=limits.LATEST,
        outcome=UpstreamOutcome.FAILED,
        upstream_event_id=ID_CHAR * limits.MAX_EVENT_ID_CHARS,
    )


ROOMY = 2
"""Big tasks of the job a case runs against when its events grow the record (a run of 200
tasks, reopened snapshots): with the full definition the fold refuses it (record_too_large)."""
LARGEST: dict[type, Callable[[World, str], cmd.Command]] = {
    cmd.RegisterJob: _register,
    cmd.UpdateJob: _update,
    cmd.PauseJob: lambda w, r: cmd.PauseJob(),
    cmd.ResumeJob: lambda w, r: cmd.ResumeJob(catchup=True),
    cmd.DeleteJob: lambda w, r: cmd.DeleteJob(),
    cmd.TriggerJob: lambda w, r: cmd.TriggerJob(),
    cmd.Tick: lambda w, r: cmd.Tick(),
    cmd.ClaimTask: _claim,
    cmd.RenewLease: lambda w, r: cmd.RenewLease(**lease(r)),
    cmd.CompleteTask: _complete,
    cmd.BackfillJob: _backfill_one_task,  # on the 200-task job: 22 s of decide, then refused
    cmd.CancelRun: lambda w, r: cmd.CancelRun(run_id=r, task=name(0)),
    cmd.ReplayTask: lambda w, r: cmd.ReplayTask(run_id=r, task=name(0), scheduled_for=T0),
    cmd.ReleaseTask: lambda w, r: cmd.ReleaseTask(
        **lease(r), reason=OPAQUE * limits.MAX_REASON_CHARS
    ),
    cmd.RerunTask: _rerun,
    cmd.UpstreamRunEnded: _upstream,
    cmd.PollTasks: lambda w, r: cmd.PollTasks(
        worker_id=WORKER, slots=limits.MAX_CLAIM_NEXT, poll_id=ID_CHAR * limits.MAX_EVENT_ID_CHARS
    ),
    # the ledger's commands sent to a job are refused; a grant to a default job goes back
    cmd.AskSlots: lambda w, r: cmd.AskSlots(
        tenant="t" * limits.MAX_TENANT_CHARS, asker=ID_CHAR * 128, count=2**31 - 1, rank_at=T0
    ),
    cmd.ReturnSlots: lambda w, r: cmd.ReturnSlots(
        tenant="t" * limits.MAX_TENANT_CHARS, asker=ID_CHAR * 128, count=2**31 - 1
    ),
    cmd.GrantSlots: lambda w, r: cmd.GrantSlots(
        tenant="t" * limits.MAX_TENANT_CHARS, count=2**31 - 1
    ),
    cmd.SetTenantLimits: lambda w, r: cmd.SetTenantLimits(
        tenant="t" * limits.MAX_TENANT_CHARS, weight=1000, max_running_tasks=2**31 - 1
    ),
}


CASES = [
    *((kind, BIG_TASKS, make) for kind, make in LARGEST.items()),
    (cmd.TriggerJob, ROOMY, LARGEST[cmd.TriggerJob]),  # RunScheduled: 200 tasks, 200 ready
    (cmd.RerunTask, ROOMY, _rerun),  # RunReopened: 200 task snapshots
]


def test_every_command_type_has_a_largest_case() -> None:
    assert set(LARGEST) == set(typing.get_args(cmd.Command))


@pytest.mark.parametrize(
    ("kind", "big_tasks", "make"),
    CASES,
    ids=[f"{k.__name__}-{b}-{m.__name__}" for k, b, m in CASES],
)
def test_the_largest_command_of_each_type_gives_messages_under_the_budget(
    kind: type, big_tasks: int, make: Callable[[World, str], cmd.Command]
) -> None:
    world, run = claimed(big_tasks)
    command = make(world, run)
    assert type(command) is kind
    sends = world.send(command)
    assert not [m for m in sends if m.topic == TOPICS.dead_letters]  # the codec accepted it
    assert sends or kind is cmd.Tick  # it did something (a Tick at this instant: nothing due)
    assert max(len(m.value) + len(m.key or b"") for m in world.sent) < BUDGET


def test_the_largest_definition_the_record_holds_is_sent_whole() -> None:
    world, _ = claimed()
    registration = next(m for m in world.sent if m.topic == TOPICS.run_events)
    assert 350_000 < len(registration.value) < BUDGET  # the definition really is large
    claims = [e for e in world.events(world.sent) if isinstance(e, ev.TaskClaimed)]
    assert claims[0].command == (WIDE * (ARGV_BYTES // 4),)


def test_a_definition_past_the_record_is_refused_with_a_small_event() -> None:
    spec = big_spec(big_tasks=11)  # the largest RegisterJob the codec accepts
    size = len(
        encode_command(
            cmd.Envelope(idem_key=idem(1), job_id=JOB, command=cmd.RegisterJob(spec=spec))
        )
    )
    assert 700_000 < size <= limits.MAX_COMMAND_RECORD_BYTES
    world = World()
    sends = world.send(cmd.RegisterJob(spec=spec))
    [rejected] = world.events(sends)
    assert isinstance(rejected, ev.CommandRejected)
    assert rejected.reason is RejectReason.RECORD_TOO_LARGE
    assert max(len(m.value) for m in sends) < 10_000


def test_an_http_definition_at_its_limits_fits() -> None:
    request = HttpTask(
        "https://h/" + "p" * 20_000,
        "PATCH",
        tuple(HttpHeader(f"h{i}", "v" * 100) for i in range(limits.MAX_HTTP_HEADERS)),
        "b" * 16_000,
        tuple(range(100, 600)),
    )
    spec = JobSpec(
        WIDE * limits.MAX_NAME_CHARS,
        Schedule(ScheduleKind.MANUAL),
        main_task(kind=TaskKind.HTTP, http=request),
    )
    world = World()
    [registered] = world.events(world.send(cmd.RegisterJob(spec=spec)))
    assert isinstance(registered, ev.JobRegistered)
    world.send(cmd.TriggerJob())
    run = next(e.run_id for e in world.events(world.sent) if isinstance(e, ev.RunScheduled))
    world.send(cmd.ClaimTask(run_id=run, task="main", attempt=1, worker_id=WORKER))
    claims = [e for e in world.events(world.sent) if isinstance(e, ev.TaskClaimed)]
    assert claims and claims[0].action is not None and claims[0].action.http == request
    assert max(len(m.value) + len(m.key or b"") for m in world.sent) < BUDGET
