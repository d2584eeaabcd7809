"""Decide: CancelRun (whole run or one task), TaskDeadLettered after the last attempt, and
ReplayTask (a dead-lettered task instance run again as a new run). Given events / when command
/ then events."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.ids import run_id_for_replay
from cronlog.model import OverlapPolicy
from cronlog.vocabulary import CancelReason, FailureKind, RejectReason, RunTrigger, TaskState
from tests.builders import (
    CLAIMED,
    DAG,
    FINISHED,
    JOB,
    READY,
    RUN,
    SPEC,
    TICK,
    claimed,
    complete,
    given,
    ready,
    registered,
    rejected,
    renew,
    scheduled,
    succeeded,
    when,
)

CLAIMED_DAG = given(
    registered(DAG),
    scheduled(spec=DAG),
    ready(task="extract"),
    ready(task="load"),
    claimed(task="extract", spec=DAG),
    clock=TICK,
)


def test_cancel_of_a_whole_run_emits_run_cancelled_user_and_drops_the_run() -> None:
    state, events = when(CLAIMED, cmd.CancelRun(run_id=RUN), TICK)
    assert events == [
        ev.RunCancelled(run_id=RUN, reason=CancelReason.USER, scheduled_for=TICK, tenant="default")
    ]
    assert state is not None and state.runs == ()


def test_renewal_of_a_cancelled_run_is_rejected_so_the_worker_kills_it() -> None:
    state, _ = when(CLAIMED, cmd.CancelRun(run_id=RUN), TICK, key="cancel")
    command = renew()
    _, events = when(state, command, TICK, key="renew")
    assert events == [
        rejected(command, RejectReason.UNKNOWN_TASK_INSTANCE, f"no active task instance {RUN}/main")
    ]


def test_cancel_of_one_task_is_terminal_for_it_and_revokes_its_lease() -> None:
    state, events = when(CLAIMED_DAG, cmd.CancelRun(run_id=RUN, task="extract"), TICK, key="cancel")
    assert events == [
        ev.TaskCancelled(run_id=RUN, task="extract", attempt=1, worker_id="w1")
    ]  # load still runs
    assert state is not None
    ti = state.runs[0].task("extract")
    assert ti is not None and ti.state is TaskState.CANCELLED and ti.lease_expires_at is None
    command = replace(renew(), task="extract")
    _, events = when(state, command, TICK, key="renew")
    assert events == [
        rejected(
            command,
            RejectReason.STALE_EPOCH,
            "epoch 1 is not the current lease (epoch 1, cancelled)",
        )
    ]


def test_a_run_whose_only_task_is_cancelled_ends_failed() -> None:
    state, events = when(CLAIMED, cmd.CancelRun(run_id=RUN, task="main"), TICK)
    assert events == [
        ev.TaskCancelled(run_id=RUN, task="main", attempt=1, worker_id="w1"),
        ev.RunFailed(run_id=RUN, scheduled_for=TICK, tenant="default"),
    ]
    assert state is not None and state.runs == ()


def test_a_cancelled_task_counts_as_failed_once_the_other_tasks_end() -> None:
    state, _ = when(CLAIMED_DAG, cmd.CancelRun(run_id=RUN, task="load"), TICK, key="cancel")
    _, events = when(state, complete(task="extract"), FINISHED, key="done")
    assert events == [
        succeeded(task="extract"),
        ev.RunFailed(run_id=RUN, scheduled_for=TICK, tenant="default"),
    ]


def test_cancel_of_a_ready_task_has_no_holder() -> None:
    _, events = when(READY, cmd.CancelRun(run_id=RUN, task="main"), TICK)
    assert events == [
        ev.TaskCancelled(run_id=RUN, task="main", attempt=1, worker_id=None),
        ev.RunFailed(run_id=RUN, scheduled_for=TICK, tenant="default"),
    ]


def test_cancel_of_an_unknown_run_or_task_or_a_terminal_task_is_rejected() -> None:
    unknown = cmd.CancelRun(run_id="r-nope")
    _, events = when(CLAIMED, unknown, TICK)
    assert events == [rejected(unknown, RejectReason.UNKNOWN_TASK_INSTANCE, "no active run r-nope")]
    no_task = cmd.CancelRun(run_id=RUN, task="nope")
    _, events = when(CLAIMED, no_task, TICK)
    assert events == [
        rejected(no_task, RejectReason.UNKNOWN_TASK_INSTANCE, f"run {RUN} has no task 'nope'")
    ]
    state, _ = when(CLAIMED_DAG, cmd.CancelRun(run_id=RUN, task="load"), TICK, key="c1")
    again = cmd.CancelRun(run_id=RUN, task="load")
    _, events = when(state, again, TICK, key="c2")
    assert events == [rejected(again, RejectReason.ALREADY_IN_STATE, "task 'load' is cancelled")]


def test_cancel_starts_the_buffered_tick_of_a_buffer_one_job() -> None:
    spec = replace(SPEC, overlap=OverlapPolicy.BUFFER_ONE)
    later = TICK + timedelta(minutes=5)
    state, _ = when(
        given(registered(spec), scheduled(spec=spec), ready(), clock=TICK),
        cmd.Tick(),
        later,
        key="tick",
    )
    assert state is not None and state.buffered is not None
    _, events = when(state, cmd.CancelRun(run_id=RUN), later, key="cancel")
    assert [type(e) for e in events] == [ev.RunCancelled, ev.RunScheduled, ev.TaskReady]


def test_the_last_failed_attempt_is_dead_lettered_with_its_exit_code_and_output() -> None:
    _, events = when(CLAIMED, complete(ok=False, exit_code=7), FINISHED)
    assert events[1:] == [
        ev.TaskDeadLettered(
            run_id=RUN,
            task="main",
            attempt=1,
            failure_kind=FailureKind.NONZERO_EXIT,
            exit_code=7,
            output_tail="tail",
        ),
        ev.RunFailed(run_id=RUN, scheduled_for=TICK, tenant="default"),
    ]


def test_replay_starts_a_new_run_holding_only_that_task_at_attempt_1() -> None:
    state = given(registered(DAG), clock=FINISHED)
    new_run = run_id_for_replay(JOB, RUN, "load", "replay-1")
    state2, events = when(
        state, cmd.ReplayTask(run_id=RUN, task="load", scheduled_for=TICK), FINISHED, key="replay-1"
    )
    assert events == [
        ev.RunScheduled(
            run_id=new_run,
            scheduled_for=TICK,
            trigger=RunTrigger.REPLAY,
            tasks=("load",),
            next_fire_at=TICK,
            runs_remaining=None,
            replay_of=RUN,
            ready=("load",),
            created_at=FINISHED,  # its priority rank starts now, not at the old tick
        ),
        ev.TaskReady(run_id=new_run, task="load", attempt=1, scheduled_for=TICK),
    ]
    assert state2 is not None and state2.next_fire_at == state.next_fire_at
    ti = state2.runs[0].tasks[0]
    assert (ti.task, ti.state, ti.attempt, ti.epoch) == ("load", TaskState.READY, 1, 0)
    _, again = when(
        state2,
        cmd.ReplayTask(run_id=RUN, task="load", scheduled_for=TICK),
        FINISHED,
        key="replay-1",
    )
    assert again == []  # a re-delivered replay adds nothing


def test_replay_of_a_task_the_job_no_longer_has_is_rejected() -> None:
    command = cmd.ReplayTask(run_id=RUN, task="gone", scheduled_for=TICK)
    _, events = when(given(registered(), clock=FINISHED), command, FINISHED)
    assert events == [
        rejected(command, RejectReason.UNKNOWN_TASK_INSTANCE, f"job {JOB!r} has no task 'gone'")
    ]


def test_replay_runs_are_outside_the_overlap_policy() -> None:
    spec = replace(SPEC, overlap=OverlapPolicy.SKIP)
    state, _ = when(
        given(registered(spec), clock=FINISHED),
        cmd.ReplayTask(run_id=RUN, task="main", scheduled_for=TICK),
        TICK - timedelta(seconds=1),
        key="replay",
    )
    _, events = when(state, cmd.Tick(), TICK, key="tick")
    assert [type(e) for e in events] == [ev.RunScheduled, ev.TaskReady]
