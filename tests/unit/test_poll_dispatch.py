"""Dispatch by polls (docs/dispatch.md), in the fold adapter without Kafka: a poll grants the
partition's ready task instances oldest run first, each once, fenced like a claim, and is
always answered; a completion's ``claim_next`` takes from the whole partition; the ready
index survives batch boundaries and follows every decision."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.ids import run_id_for_trigger
from cronlog.model import JobSpec, Schedule, ScheduleKind, main_task
from cronlog.vocabulary import CommandKind, RejectReason
from tests.builders import completed
from tests.unit.fold_world import (
    TOPICS,
    N,
    P,
    World,
    fold_batch,
    granted_runs,
    record_of,
)
from topology.fold import folder as fold
from topology.fold.folder import BatchResult
from topology.kafka.partitioning import partition_for
from topology.wire.codec import decode_event

MANUAL = JobSpec(name="m", schedule=Schedule(ScheduleKind.MANUAL), task_specs=main_task(("true",)))
JOBS = [j for j in (f"job{i}" for i in range(200)) if partition_for(j, N) == P][:5]
"""Five jobs of partition P, in the order they are triggered below."""


def _replies(out: BatchResult, worker: str = "w1") -> list[ev.Event]:
    return [
        decode_event(s.value).event
        for s in out.sends
        if s.topic == TOPICS.replies and s.key == worker.encode()
    ]


def _triggered(world: World, jobs: list[str]) -> dict[str, str]:
    """Register and trigger each job (one run each, in list order); return job → run_id."""
    world.send(*[(j, cmd.RegisterJob(spec=MANUAL)) for j in jobs])
    runs = {}
    for j in jobs:
        out = world.send((j, cmd.TriggerJob()))
        runs[j] = run_id_for_trigger(j, f"k{world.offset}")
        assert any(s.topic == TOPICS.ready for s in out.sends)  # the notification
    return runs


def test_a_poll_grants_the_oldest_ready_runs_first_and_answers_how_many() -> None:
    world = World()
    runs = _triggered(world, JOBS)
    out = world.send(("", cmd.PollTasks(worker_id="w1", slots=3, poll_id="p1")))
    assert granted_runs(out) == [(j, runs[j]) for j in JOBS[:3]]
    replies = _replies(out)
    assert [type(r) for r in replies] == [ev.TaskClaimed] * 3 + [ev.PollAnswered]
    assert replies[-1] == ev.PollAnswered(worker_id="w1", poll_id="p1", partition=P, granted=3)
    claimed = [r for r in replies if isinstance(r, ev.TaskClaimed)]
    assert {(c.worker_id, c.epoch, c.attempt) for c in claimed} == {("w1", 1, 1)}
    assert not [s for s in out.sends if s.topic == TOPICS.ready]  # a grant is no notification
    # the rest go to the next poll, and then the partition is drained
    out = world.send(("", cmd.PollTasks(worker_id="w2", slots=5, poll_id="p2")))
    assert granted_runs(out) == [(j, runs[j]) for j in JOBS[3:]]
    assert _replies(out, "w2")[-1].granted == 2  # type: ignore[union-attr]
    out = world.send(("", cmd.PollTasks(worker_id="w3", slots=5, poll_id="p3")))
    assert granted_runs(out) == []
    assert _replies(out, "w3") == [
        ev.PollAnswered(worker_id="w3", poll_id="p3", partition=P, granted=0)
    ]
    assert out.writes == {}  # an empty poll writes nothing


def test_a_poll_grants_only_its_own_partition() -> None:
    world = World()
    other = next(j for j in (f"x{i}" for i in range(100)) if partition_for(j, N) != P)
    _triggered(world, [other])
    out = world.send(("", cmd.PollTasks(worker_id="w1", slots=4, poll_id="p")))
    assert granted_runs(out) == []


def test_a_granted_task_is_fenced_like_a_claim() -> None:
    world = World()
    runs = _triggered(world, JOBS[:1])
    world.send(("", cmd.PollTasks(worker_id="w1", slots=1, poll_id="p")))
    job, run = JOBS[0], runs[JOBS[0]]
    # another worker cannot claim it; the holder completes it with the granted epoch
    out = world.send((job, cmd.ClaimTask(run_id=run, task="main", attempt=1, worker_id="w2")))
    [rejected] = _replies(out, "w2")
    assert isinstance(rejected, ev.CommandRejected)
    done = completed(run, at=world.at)
    out = world.send((job, done))
    assert _replies(out) == []  # no worker reads its completion's events on replies


def test_a_completion_with_claim_next_takes_the_oldest_ready_task_of_its_partition() -> None:
    world = World()
    runs = _triggered(world, JOBS[:3])
    world.send(("", cmd.PollTasks(worker_id="w1", slots=1, poll_id="p")))  # JOBS[0]'s run
    done = completed(runs[JOBS[0]], at=world.at, claim_next=1)
    out = world.send((JOBS[0], done))
    assert granted_runs(out) == [(JOBS[1], runs[JOBS[1]])]
    replies = _replies(out)
    poll_id = f"k{world.offset}"  # the completion's idem_key names its poll
    assert replies[-1] == ev.PollAnswered(worker_id="w1", poll_id=poll_id, partition=P, granted=1)
    assert [type(r) for r in replies] == [ev.TaskClaimed, ev.PollAnswered]


def test_the_ready_index_follows_lease_expiry_and_release() -> None:
    """A task given back (lapsed lease, release) is ready again and goes to the next poll."""
    world = World()
    runs = _triggered(world, JOBS[:1])
    job, run = JOBS[0], runs[JOBS[0]]
    world.send(("", cmd.PollTasks(worker_id="w1", slots=1, poll_id="p1")))
    world.send(
        (
            job,
            cmd.ReleaseTask(
                run_id=run, task="main", attempt=1, epoch=1, worker_id="w1", reason="draining"
            ),
        )
    )
    out = world.send(("", cmd.PollTasks(worker_id="w2", slots=1, poll_id="p2")))
    [claimed, answer] = _replies(out, "w2")
    assert isinstance(claimed, ev.TaskClaimed)
    assert (claimed.run_id, claimed.epoch, claimed.attempt) == (run, 2, 1)
    assert answer.granted == 1  # type: ignore[union-attr]
    # the lease lapses (no renewal): a Tick past it gives the task back as attempt 2
    world.at += timedelta(minutes=10)
    world.send(("", cmd.Tick()))
    out = world.send(("", cmd.PollTasks(worker_id="w3", slots=1, poll_id="p3")))
    [claimed, _] = _replies(out, "w3")
    assert isinstance(claimed, ev.TaskClaimed)
    assert (claimed.attempt, claimed.epoch) == (2, 3)


@pytest.mark.parametrize("batch", [1, 3, 100])
def test_batch_boundaries_do_not_change_what_polls_grant(batch: int) -> None:
    def run(batch: int) -> list[tuple[str, str]]:
        world = World()
        world.send(*[(j, cmd.RegisterJob(spec=MANUAL)) for j in JOBS])
        commands: list[tuple[str, cmd.Command]] = []
        for i, j in enumerate(JOBS):
            commands.append((j, cmd.TriggerJob()))
            commands.append(("", cmd.PollTasks(worker_id=f"w{i % 2}", slots=1, poll_id=f"p{i}")))
        granted = []
        for i in range(0, len(commands), batch):
            granted += granted_runs(world.send(*commands[i : i + batch]))
        return granted

    assert run(batch) == run(1)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("trigger"), st.integers(0, len(JOBS) - 1)),
            st.tuples(st.just("poll"), st.integers(1, 4)),
        ),
        max_size=40,
    )
)
def test_no_task_instance_is_granted_twice_and_every_ready_one_is_grantable(
    script: list[tuple[str, int]],
) -> None:
    world = World()
    world.send(*[(j, cmd.RegisterJob(spec=MANUAL)) for j in JOBS])
    granted: list[tuple[str, str]] = []
    triggered = 0
    for i, (kind, arg) in enumerate(script):
        if kind == "trigger":
            world.send((JOBS[arg], cmd.TriggerJob()))
            triggered += 1
        else:
            out = world.send(("", cmd.PollTasks(worker_id="w", slots=arg, poll_id=f"p{i}")))
            got = granted_runs(out)
            assert _replies(out, "w")[-1].granted == len(got)  # type: ignore[union-attr]
            granted += got
    assert len(granted) == len(set(granted))
    # a poll big enough drains the partition: every run triggered was granted exactly once
    granted += granted_runs(world.send(("", cmd.PollTasks(worker_id="w", slots=256, poll_id="z"))))
    assert len(granted) == len(set(granted)) == triggered


def test_a_poll_delivered_twice_gives_each_event_id_one_content() -> None:
    # Polls leave no dedupe marker: the second copy grants what is still ready, under ids of
    # its own (DESIGN.md invariant 6: one event_id, one content).
    world = World()
    _triggered(world, JOBS)
    poll = cmd.PollTasks(worker_id="w1", slots=2, poll_id="p1")
    first = fold_batch(world, record_of(world, "poll:w1:p1", "", poll))
    again = fold_batch(world, record_of(world, "poll:w1:p1", "", poll))
    assert len(granted_runs(first)) == len(granted_runs(again)) == 2
    assert set(granted_runs(first)).isdisjoint(granted_runs(again))
    contents: dict[str, set[bytes]] = {}
    for s in first.sends + again.sends:
        if s.topic in (TOPICS.run_events, TOPICS.replies):
            record = decode_event(s.value)
            contents.setdefault(record.event_id, set()).add(s.value)
    assert all(len(v) == 1 for v in contents.values()), contents
    answers = [r for r in _replies(first) + _replies(again) if isinstance(r, ev.PollAnswered)]
    assert [a.granted for a in answers] == [2, 2]


def test_a_job_that_cannot_be_granted_holds_back_no_other_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The oldest ready job's record is full (a claim would push it past the record limit):
    # the poll is refused for it and looks past it to the next jobs of the partition.
    world = World()
    big = JobSpec(
        name="big", schedule=Schedule(ScheduleKind.MANUAL), task_specs=main_task(("x" * 3000,))
    )
    world.send((JOBS[0], cmd.RegisterJob(spec=big)))
    world.send((JOBS[0], cmd.TriggerJob()))  # the oldest ready run of the partition
    runs = _triggered(world, JOBS[1:3])
    monkeypatch.setattr(fold, "MAX_RECORD_BYTES", len(world.store[JOBS[0]]) + 8)
    out = world.send(("", cmd.PollTasks(worker_id="w1", slots=2, poll_id="p1")))
    assert granted_runs(out) == [(j, runs[j]) for j in JOBS[1:3]]
    rejected = [e for e in _events(out) if isinstance(e, ev.CommandRejected)]
    assert [(r.reason, r.command) for r in rejected] == [
        (RejectReason.RECORD_TOO_LARGE, CommandKind.POLL_TASKS)
    ]
    assert _replies(out)[-1].granted == 2  # type: ignore[union-attr]
    assert world.folder.ready.has_due(P, fold.ANY_TIME_MS)  # JOBS[0] stays ready, for later


def test_manual_starts_leave_room_for_claims_so_a_full_record_drains(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Runs outside max_active_runs (manual triggers) are refused record_too_large while the
    # record still has room for RESERVED_CLAIMS claims: granted runs end and leave the record,
    # so every run accepted is granted in the end.
    monkeypatch.setattr(fold, "MAX_RECORD_BYTES", 20_000)
    world = World()
    job = JOBS[0]
    world.send((job, cmd.RegisterJob(spec=MANUAL)))
    accepted, refused = 0, 0
    for _ in range(200):
        events = _events(world.send((job, cmd.TriggerJob())))
        accepted += sum(isinstance(e, ev.RunScheduled) for e in events)
        refused += sum(
            isinstance(e, ev.CommandRejected) and e.reason is RejectReason.RECORD_TOO_LARGE
            for e in events
        )
    assert accepted > 10 and refused == 200 - accepted
    worker, succeeded = "w" * 128, 0
    for n in range(accepted):
        out = world.send(("", cmd.PollTasks(worker_id=worker, slots=4, poll_id=f"p{n}")))
        assert not [e for e in _events(out) if isinstance(e, ev.CommandRejected)]
        for claim in (e for e in _events(out) if isinstance(e, ev.TaskClaimed)):
            done = completed(
                claim.run_id,
                task=claim.task,
                attempt=claim.attempt,
                epoch=claim.epoch,
                worker=worker,
                at=world.at,
            )
            ended = _events(world.send((job, done)))
            succeeded += sum(isinstance(e, ev.RunSucceeded) for e in ended)
        if succeeded == accepted:
            break
    assert succeeded == accepted
    assert world.state(job).runs == ()


def test_empty_identifiers_are_dead_lettered() -> None:
    world = World()
    dead = TOPICS.dead_letters
    for job_id, command in (
        ("", cmd.RegisterJob(spec=MANUAL)),
        ("", cmd.PollTasks(worker_id="", slots=1, poll_id="p")),
        ("", cmd.PollTasks(worker_id="w1", slots=1, poll_id="")),
    ):
        out = fold_batch(world, record_of(world, "k", job_id, command))
        assert [s.topic for s in out.sends] == [dead], command
    out = fold_batch(world, record_of(world, "", JOBS[0], cmd.RegisterJob(spec=MANUAL)))
    assert [s.topic for s in out.sends] == [dead]
    assert world.store == {}


def _events(out: BatchResult) -> list[ev.Event]:
    return [decode_event(s.value).event for s in out.sends if s.topic == TOPICS.run_events]
