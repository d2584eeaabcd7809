"""DAG rules: every trigger rule against every combination of two upstream outcomes, cycle and
dependency validation, and how a run's tasks become ready, skipped or upstream_failed."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.dag import RuleOutcome, Upstream, downstream_of, find_cycle, rule_outcome
from cronlog.errors import InvalidDefinition
from cronlog.job import JobState
from cronlog.model import JobSpec, RetryPolicy, TaskSpec, TriggerRule, main_task
from cronlog.validation import validate_spec
from cronlog.vocabulary import CancelReason, FailureKind, RejectReason, RunTrigger, TaskState
from tests.builders import (
    FINISHED,
    JOB,
    RUN,
    SPEC,
    TICK,
    claim,
    complete,
    given,
    registered,
    rejected,
    scheduled,
    when,
)

S, F, K, R = Upstream.SUCCESS, Upstream.FAILED, Upstream.SKIPPED, Upstream.RUNNING
COMBOS = [(S, S), (S, F), (S, K), (S, R), (F, F), (F, K), (F, R), (K, K), (K, R), (R, R)]
"""Every multiset of two upstream outcomes, in the order of the table's columns."""
OUT = {
    "R": RuleOutcome.RUN,
    "W": RuleOutcome.WAIT,
    "S": RuleOutcome.SKIP,
    "U": RuleOutcome.UPSTREAM_FAILED,
}
# Columns: SS SF SK SR FF FK FR KK KR RR (S success, F failed, K skipped, R still running).
# From Airflow's trigger rule docs and TriggerRuleDep: outcomes are decided as soon as the
# upstream states allow (a failure fails all_success at once, a success runs one_success).
TABLE = {
    TriggerRule.ALL_SUCCESS: "RUSWUUUSSW",
    TriggerRule.ALL_FAILED: "SSSSRSWSSW",
    TriggerRule.ALL_DONE: "RRRWRRWRWW",
    TriggerRule.ONE_SUCCESS: "RRRRUUWSWW",
    TriggerRule.ONE_FAILED: "SRSWRRRSWW",
    TriggerRule.NONE_FAILED: "RURWUUURWW",
    TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS: "RURWUUUSWW",
    TriggerRule.ALWAYS: "RRRRRRRRRR",
}


def test_the_table_covers_every_rule() -> None:
    assert set(TABLE) == set(TriggerRule)


@pytest.mark.parametrize(
    ("rule", "combo", "expected"),
    [(rule, combo, OUT[row[i]]) for rule, row in TABLE.items() for i, combo in enumerate(COMBOS)],
    ids=lambda v: (
        v.value
        if isinstance(v, TriggerRule | RuleOutcome)
        else "".join(u.value[0] for u in v)
        if isinstance(v, tuple)
        else str(v)
    ),
)
def test_trigger_rule_outcome(
    rule: TriggerRule, combo: tuple[Upstream, Upstream], expected: RuleOutcome
) -> None:
    assert rule_outcome(rule, combo) == expected
    assert rule_outcome(rule, combo[::-1]) == expected  # order of upstreams does not matter


@pytest.mark.parametrize("rule", list(TriggerRule))
def test_a_task_without_upstream_runs(rule: TriggerRule) -> None:
    assert rule_outcome(rule, []) is RuleOutcome.RUN


def test_a_decision_to_run_or_not_never_flips_as_upstream_tasks_end() -> None:
    # Once decided (not WAIT), ending more upstream tasks never turns "run" into "not run"
    # or back. (Which of skipped/upstream_failed can change: all_success with one upstream
    # skipped and one running is skipped at once, as in Airflow; the fold ends the task
    # there, so a later failure upstream does not relabel it.)
    for rule in TriggerRule:
        for combo in itertools.product([S, F, K, R], repeat=3):
            first = rule_outcome(rule, combo)
            if first is RuleOutcome.WAIT:
                continue
            for ended in itertools.product([S, F, K], repeat=combo.count(R)):
                it = iter(ended)
                later = [next(it) if u is R else u for u in combo]
                now_runs = rule_outcome(rule, later) is RuleOutcome.RUN
                assert now_runs == (first is RuleOutcome.RUN), (rule, combo, later)


# --- validation -------------------------------------------------------------------------------


def dag(*tasks: TaskSpec, **kw: object) -> JobSpec:
    return replace(SPEC, task_specs=tasks, **kw)  # type: ignore[arg-type]


def t(name: str, *deps: str, rule: TriggerRule = TriggerRule.ALL_SUCCESS) -> TaskSpec:
    return TaskSpec(name, ("echo", name), depends_on=deps, trigger_rule=rule)


def test_find_cycle_names_the_path() -> None:
    assert find_cycle({"a": ("b",), "b": ("c",), "c": ("a",), "d": ()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": (), "b": ("a",), "c": ("a", "b")}) is None


@pytest.mark.parametrize(
    ("spec", "field", "reason"),
    [
        (dag(t("a", "c"), t("b", "a"), t("c", "b")), "tasks", "dependency cycle: a → c → b → a"),
        (dag(t("a"), t("b", "nope")), "tasks[1].depends_on", "unknown task 'nope' (tasks: a, b)"),
        (dag(t("a", "a")), "tasks[0].depends_on", "task 'a' depends on itself"),
        (dag(t("a"), t("a")), "tasks[1].name", "duplicate task name 'a'"),
        (
            dag(t("a"), TaskSpec("b")),
            "tasks[1].command",
            "must be a non-empty argv list of strings",
        ),
        (dag(t("a"), max_active_tasks=0), "max_active_tasks", "must be 1..200"),
    ],
)
def test_bad_dags_are_refused_naming_the_problem(spec: JobSpec, field: str, reason: str) -> None:
    with pytest.raises(InvalidDefinition) as info:
        validate_spec(spec)
    assert (info.value.field, info.value.reason) == (field, reason)


def test_downstream_of_is_transitive_in_definition_order() -> None:
    specs = (t("a"), t("b", "a"), t("c", "a"), t("d", "b", "c"), t("e"))
    assert downstream_of(specs, "b") == ["d"]
    assert downstream_of(specs, "a") == ["b", "c", "d"]


# --- runs ---------------------------------------------------------------------------------------

ETL = dag(t("extract"), t("transform", "extract"), t("load", "transform"))


def _states(state: JobState | None) -> dict[str, TaskState]:
    assert state is not None and len(state.runs) == 1
    return {ti.task: ti.state for ti in state.runs[0].tasks}


def _start(spec: JobSpec) -> JobState:
    return given(registered(spec), scheduled(spec=spec), clock=TICK)


def _run(
    state: JobState | None, worker_task: str, ok: bool = True, n: int = 0, exit_code: int = 0
) -> tuple[JobState | None, list[ev.Event]]:
    state, _ = when(state, claim(task=worker_task), TICK, key=f"claim-{worker_task}-{n}")
    return when(
        state,
        complete(task=worker_task, ok=ok, exit_code=exit_code),
        FINISHED,
        key=f"done-{worker_task}-{n}",
    )


def test_a_new_run_readies_only_its_roots() -> None:
    assert _states(_start(ETL)) == {
        "extract": TaskState.READY,
        "transform": TaskState.PENDING,
        "load": TaskState.PENDING,
    }


def test_claiming_a_task_whose_upstream_has_not_succeeded_is_refused() -> None:
    command = claim(task="transform")
    _, events = when(_start(ETL), command, TICK)
    assert events == [
        rejected(command, RejectReason.NOT_READY, "task instance is pending at attempt 1")
    ]


def test_extract_success_readies_transform_then_load_and_the_run_succeeds() -> None:
    state, events = _run(_start(ETL), "extract")
    assert events[1:] == [ev.TaskReady(run_id=RUN, task="transform", attempt=1, scheduled_for=TICK)]
    state, events = _run(state, "transform")
    assert events[1:] == [ev.TaskReady(run_id=RUN, task="load", attempt=1, scheduled_for=TICK)]
    _, events = _run(state, "load")
    assert events[1:] == [ev.RunSucceeded(run_id=RUN, scheduled_for=TICK, tenant="default")]


def test_extract_dead_lettered_fails_everything_downstream_without_running_it() -> None:
    _, events = _run(_start(ETL), "extract", ok=False, exit_code=1)
    assert events[1:] == [
        ev.TaskDeadLettered(
            run_id=RUN,
            task="extract",
            attempt=1,
            failure_kind=FailureKind.NONZERO_EXIT,
            exit_code=1,
            output_tail="tail",
        ),
        ev.TaskUpstreamFailed(run_id=RUN, task="transform", trigger_rule="all_success"),
        ev.TaskUpstreamFailed(run_id=RUN, task="load", trigger_rule="all_success"),
        ev.RunFailed(run_id=RUN, scheduled_for=TICK, tenant="default"),
    ]


DIAMOND = dag(t("a"), t("b", "a"), t("c", "a"), t("d", "b", "c", rule=TriggerRule.ALL_DONE))


def test_diamond_joins_after_both_branches_and_follows_its_rule_when_one_fails() -> None:
    state, events = _run(_start(DIAMOND), "a")
    assert events[1:] == [
        ev.TaskReady(run_id=RUN, task="b", attempt=1, scheduled_for=TICK),
        ev.TaskReady(run_id=RUN, task="c", attempt=1, scheduled_for=TICK),
    ]
    state, events = _run(state, "b", ok=False, exit_code=2)
    assert [type(e) for e in events] == [ev.TaskFailed, ev.TaskDeadLettered]  # d waits for c
    assert _states(state)["d"] is TaskState.PENDING
    state, events = _run(state, "c")
    assert events[1:] == [
        ev.TaskReady(run_id=RUN, task="d", attempt=1, scheduled_for=TICK)
    ]  # all_done: runs despite b
    _, events = _run(state, "d")
    assert events[1:] == [
        ev.RunFailed(run_id=RUN, scheduled_for=TICK, tenant="default")
    ]  # b failed: the run fails


def test_skips_propagate_and_a_run_of_successes_and_skips_succeeds() -> None:
    spec = dag(t("a"), t("cleanup", "a", rule=TriggerRule.ONE_FAILED), t("after", "cleanup"))
    _, events = _run(_start(spec), "a")
    assert events[1:] == [
        ev.TaskSkipped(run_id=RUN, task="cleanup", trigger_rule="one_failed"),
        ev.TaskSkipped(run_id=RUN, task="after", trigger_rule="all_success"),
        ev.RunSucceeded(run_id=RUN, scheduled_for=TICK, tenant="default"),
    ]


def test_max_active_tasks_holds_ready_tasks_back_until_a_slot_frees() -> None:
    spec = dag(t("a"), t("b"), t("c"), max_active_tasks=2)
    state = _start(spec)
    assert _states(state) == {"a": TaskState.READY, "b": TaskState.READY, "c": TaskState.PENDING}
    _, events = _run(state, "a")
    assert events[1:] == [ev.TaskReady(run_id=RUN, task="c", attempt=1, scheduled_for=TICK)]


def test_an_always_task_is_ready_at_once() -> None:
    spec = dag(t("a"), t("notify", "a", rule=TriggerRule.ALWAYS))
    assert _states(_start(spec)) == {"a": TaskState.READY, "notify": TaskState.READY}


def test_each_task_is_claimed_with_its_own_command_and_settings() -> None:
    spec = dag(t("a"), replace(t("b", "a"), timeout=FINISHED - TICK))
    state, _ = _run(_start(spec), "a")
    _, [grant] = when(state, claim(task="b"), TICK, key="claim-b")
    assert isinstance(grant, ev.TaskClaimed)
    assert (grant.command, grant.timeout) == (("echo", "b"), FINISHED - TICK)


def test_cancelling_an_upstream_task_fails_its_downstream() -> None:
    state = _start(ETL)
    _, events = when(state, cmd.CancelRun(run_id=RUN, task="extract"), TICK, key="cancel")
    assert events == [
        ev.TaskCancelled(run_id=RUN, task="extract", attempt=1, worker_id=None),
        ev.TaskUpstreamFailed(run_id=RUN, task="transform", trigger_rule="all_success"),
        ev.TaskUpstreamFailed(run_id=RUN, task="load", trigger_rule="all_success"),
        ev.RunFailed(run_id=RUN, scheduled_for=TICK, tenant="default"),
    ]


# --- redefinition and delete while a run is active (adversarial findings F1-F5) --------------


def _a_running_b_pending() -> JobState:
    spec = dag(t("a"), t("b", "a"))
    state, _ = when(_start(spec), claim(task="a"), TICK, key="claim-a")
    assert state is not None
    return state


def test_a_redefinition_dropping_a_pending_task_skips_it_and_never_runs_it() -> None:
    state, events = when(_a_running_b_pending(), cmd.UpdateJob(spec=dag(t("a"))), TICK, key="upd")
    assert [type(e) for e in events] == [ev.JobRedefined, ev.TaskSkipped]
    assert events[1] == ev.TaskSkipped(run_id=RUN, task="b", trigger_rule="removed")
    _, events = when(state, complete(task="a"), FINISHED, key="done-a")
    assert events[1:] == [ev.RunSucceeded(run_id=RUN, scheduled_for=TICK, tenant="default")]


def test_a_dag_turned_into_a_one_task_job_stops_the_old_tasks() -> None:
    one_task = replace(SPEC, task_specs=main_task(("echo", "main")))
    state, events = when(_a_running_b_pending(), cmd.UpdateJob(spec=one_task), TICK, key="upd")
    assert events[1:] == [
        ev.TaskCancelled(run_id=RUN, task="a", attempt=1, worker_id="w1"),
        ev.TaskSkipped(run_id=RUN, task="b", trigger_rule="removed"),
        ev.RunFailed(run_id=RUN, scheduled_for=TICK, tenant="default"),
    ]
    assert state is not None and state.runs == ()


def test_a_one_task_job_turned_into_a_dag_cancels_main_waiting_for_its_retry() -> None:
    spec = replace(SPEC, retry_policy=replace(SPEC.retry_policy, max_attempts=3))
    state: JobState | None = given(registered(spec), scheduled(spec=spec), clock=TICK)
    state, _ = _run(state, "main", ok=False, exit_code=3)
    assert _states(state)["main"] is TaskState.RETRY_WAIT
    _, events = when(state, cmd.UpdateJob(spec=dag(t("x"))), TICK, key="upd")
    assert events[1:] == [
        ev.TaskCancelled(run_id=RUN, task="main", attempt=2, worker_id=None),
        ev.RunFailed(run_id=RUN, scheduled_for=TICK, tenant="default"),
    ]


def test_a_deleted_jobs_active_dag_run_goes_on_to_its_end_and_can_be_cancelled() -> None:
    state, _ = when(_a_running_b_pending(), cmd.DeleteJob(), TICK, key="del")
    after_a, events = when(state, complete(task="a"), FINISHED, key="done-a")
    assert events[1:] == [ev.TaskReady(run_id=RUN, task="b", attempt=1, scheduled_for=TICK)]
    state, events = when(after_a, claim(task="b"), FINISHED, key="claim-b")
    assert [type(e) for e in events] == [ev.TaskClaimed]
    _, events = when(after_a, cmd.CancelRun(run_id=RUN), FINISHED, key="cancel")
    assert events == [
        ev.RunCancelled(run_id=RUN, reason=CancelReason.USER, scheduled_for=TICK, tenant="default")
    ]


@pytest.mark.parametrize(
    ("name", "ok"),
    [("load-2.v1_x", True), ("x\x00y", False), ("a/b", False), ("..", False), ("-x", False)],
)
def test_task_names_are_path_and_environment_safe(name: str, ok: bool) -> None:
    spec = dag(t(name))
    if ok:
        validate_spec(spec)
        return
    with pytest.raises(InvalidDefinition) as info:
        validate_spec(spec)
    assert info.value.field == "tasks[0].name"


def test_a_run_past_its_run_timeout_cancels_what_has_not_ended_and_fails() -> None:
    spec = dag(t("a"), t("b", "a"), run_timeout=FINISHED - TICK)
    state = given(registered(spec), replace(scheduled(spec=spec), timeout_at=FINISHED), clock=TICK)
    state, _ = when(state, claim(task="a"), TICK, key="claim-a")  # type: ignore[assignment]
    assert state.next_deadline() == FINISHED
    _, events = when(state, cmd.Tick(), FINISHED, key="tick")
    assert events == [
        ev.RunTimedOut(run_id=RUN, timeout_at=FINISHED),
        ev.TaskCancelled(run_id=RUN, task="a", attempt=1, worker_id="w1"),
        ev.TaskCancelled(run_id=RUN, task="b", attempt=1, worker_id=None),
        ev.RunFailed(run_id=RUN, scheduled_for=TICK, tenant="default"),
    ]


def test_a_scheduled_run_carries_its_timeout_instant() -> None:
    spec = replace(SPEC, run_timeout=FINISHED - TICK)
    state = given(registered(spec, next_fire_at=TICK), clock=TICK)
    _, events = when(state, cmd.Tick(), TICK, key="tick")
    [run] = [e for e in events if isinstance(e, ev.RunScheduled)]
    assert run.timeout_at == TICK + (FINISHED - TICK)


# --- re-run (RerunTask) ---------------------------------------------------------------------


def snap(*rows: tuple[str, str, int, int]) -> tuple[cmd.TaskSnapshot, ...]:
    return tuple(cmd.TaskSnapshot(task=t, state=s, attempt=a, epoch=e) for t, s, a, e in rows)


def _etl_failed_at_transform(spec: JobSpec = ETL) -> JobState | None:
    state, _ = _run(_start(spec), "extract")
    state, events = _run(state, "transform", ok=False, exit_code=1)
    assert events[-1] == ev.RunFailed(run_id=RUN, scheduled_for=TICK, tenant="default")
    return state


FAILED_RUN = snap(
    ("extract", "succeeded", 1, 1), ("transform", "failed", 1, 2), ("load", "upstream_failed", 1, 0)
)


def rerun(
    task: str, downstream: bool, tasks: tuple[cmd.TaskSnapshot, ...] = FAILED_RUN
) -> cmd.RerunTask:
    return cmd.RerunTask(
        run_id=RUN,
        task=task,
        downstream=downstream,
        scheduled_for=TICK,
        trigger="schedule",
        tasks=tasks,
    )


def test_rerun_of_a_failed_middle_task_with_downstream_reopens_the_run_and_it_succeeds() -> None:
    state, events = when(
        _etl_failed_at_transform(), rerun("transform", True), FINISHED, key="rerun"
    )
    assert events == [
        ev.RunReopened(
            run_id=RUN, scheduled_for=TICK, trigger=RunTrigger.SCHEDULE, tasks=FAILED_RUN
        ),
        ev.TaskReset(run_id=RUN, task="transform", attempt=2),
        ev.TaskReset(run_id=RUN, task="load", attempt=1),
        ev.TaskReady(run_id=RUN, task="transform", attempt=2, scheduled_for=TICK),
    ]
    state, _ = when(state, claim(task="transform", attempt=2), FINISHED, key="c-t2")
    state, events = when(
        state, complete(task="transform", attempt=2, epoch=3), FINISHED, key="d-t2"
    )
    assert events[1:] == [ev.TaskReady(run_id=RUN, task="load", attempt=1, scheduled_for=TICK)]
    _, events = _run(state, "load", n=2)
    assert events[1:] == [ev.RunSucceeded(run_id=RUN, scheduled_for=TICK, tenant="default")]


def test_rerun_without_downstream_leaves_downstream_as_it_ended() -> None:
    state, events = when(
        _etl_failed_at_transform(), rerun("transform", False), FINISHED, key="rerun"
    )
    assert [type(e) for e in events] == [ev.RunReopened, ev.TaskReset, ev.TaskReady]
    state, _ = when(state, claim(task="transform", attempt=2), FINISHED, key="c-t2")
    _, events = when(state, complete(task="transform", attempt=2, epoch=3), FINISHED, key="d-t2")
    assert events[1:] == [
        ev.RunFailed(run_id=RUN, scheduled_for=TICK, tenant="default")
    ]  # load stays upstream_failed


def test_a_rerun_series_gets_its_own_max_attempts() -> None:
    retrying = replace(
        ETL,
        task_specs=(
            ETL.task_specs[0],
            replace(
                ETL.task_specs[1],
                retry_policy=RetryPolicy(max_attempts=2, backoff=FINISHED - FINISHED),
            ),
            ETL.task_specs[2],
        ),
    )
    state, _ = when(_etl_failed_at_transform(), cmd.UpdateJob(spec=retrying), FINISHED, key="upd")
    state, _ = when(state, rerun("transform", True), FINISHED, key="rerun")
    state, _ = when(state, claim(task="transform", attempt=2), FINISHED, key="c2")
    state, events = when(
        state,
        complete(task="transform", attempt=2, epoch=3, ok=False, exit_code=1),
        FINISHED,
        key="d2",
    )
    assert events[1] == ev.RetryScheduled(
        run_id=RUN, task="transform", attempt=3, retry_at=FINISHED
    )  # 1 of 2 in series


def test_rerun_of_a_task_that_has_not_ended_is_refused() -> None:
    state = _start(ETL)
    state, _ = when(state, claim(task="extract"), TICK, key="c")  # type: ignore[assignment]
    command = rerun("extract", True)
    _, events = when(state, command, TICK, key="rerun")
    assert events == [
        rejected(
            command, RejectReason.ALREADY_IN_STATE, f"tasks extract of run {RUN} have not ended"
        )
    ]


def test_rerun_of_an_ended_run_whose_snapshot_is_not_ended_is_refused() -> None:
    command = rerun(
        "transform",
        True,
        snap(
            ("extract", "succeeded", 1, 1),
            ("transform", "running", 1, 2),
            ("load", "pending", 1, 0),
        ),
    )
    _, events = when(_etl_failed_at_transform(), command, FINISHED, key="rerun")
    assert [(type(e), e.reason) for e in events] == [  # type: ignore[attr-defined]
        (ev.CommandRejected, RejectReason.ALREADY_IN_STATE)
    ]


def test_rerun_of_an_unknown_task_is_refused() -> None:
    command = rerun("nope", False)
    _, events = when(_etl_failed_at_transform(), command, FINISHED, key="rerun")
    assert [(type(e), e.reason) for e in events] == [  # type: ignore[attr-defined]
        (ev.CommandRejected, RejectReason.UNKNOWN_TASK_INSTANCE)
    ]


# --- eager dispatch: the completing worker takes the run's next task (issue 13) -------------


def test_a_completion_with_claim_next_is_granted_the_task_it_readies() -> None:
    state, _ = when(_start(ETL), claim(task="extract"), TICK, key="claim-extract")
    done = replace(complete(task="extract"), claim_next=1)
    state, events = when(state, done, FINISHED, key="done-extract")
    assert [type(e) for e in events] == [ev.TaskSucceeded, ev.TaskReady, ev.TaskClaimed]
    granted = events[2]
    assert isinstance(granted, ev.TaskClaimed)
    assert (granted.task, granted.attempt, granted.epoch, granted.worker_id) == (
        "transform",
        1,
        1,
        "w1",
    )
    assert _states(state)["transform"] is TaskState.CLAIMED


def test_claim_next_takes_at_most_that_many_and_nothing_past_the_last_task() -> None:
    wide = dag(t("a"), t("b", "a"), t("c", "a"), t("d", "a"))
    state, _ = when(_start(wide), claim(task="a"), TICK, key="claim-a")
    _, events = when(state, replace(complete(task="a"), claim_next=2), FINISHED, key="done-a")
    granted = [e.task for e in events if isinstance(e, ev.TaskClaimed)]
    assert granted == ["b", "c"]  # the first two readied, in definition order
    one = dag(t("only"))
    state, _ = when(_start(one), claim(task="only"), TICK, key="claim-only")
    _, events = when(state, replace(complete(task="only"), claim_next=1), FINISHED, key="done")
    assert [type(e) for e in events] == [ev.TaskSucceeded, ev.RunSucceeded]


def test_the_adapter_keeps_an_eagerly_granted_task_off_the_ready_topic() -> None:
    from topology.fold.due_index import DueIndex
    from topology.fold.folder import BatchFolder, Record
    from topology.kafka.config import KafkaSettings
    from topology.kafka.partitioning import partition_for
    from topology.kafka.topics import Topics
    from topology.wire.codec import Codec, decode_event, encode_command
    from topology.wire.state_codec import dump_state

    topics = Topics.of(KafkaSettings(partitions=4))
    state, _ = when(_start(ETL), claim(task="extract"), TICK, key="claim-extract")
    assert state is not None
    store = {JOB: dump_state(state)}
    due = DueIndex()
    due.reset(range(4))
    folder = BatchFolder(topics, 4, lambda _, j: store.get(j), due, Codec())
    done = replace(complete(task="extract"), claim_next=1)
    value = encode_command(cmd.Envelope(idem_key="done", job_id=JOB, command=done))
    p = partition_for(JOB, 4)
    out = folder.fold([Record(p, 0, int(FINISHED.timestamp() * 1000), JOB.encode(), value)])
    on = {
        s.topic: [type(decode_event(m.value).event) for m in out.sends if m.topic == s.topic]
        for s in out.sends
    }
    assert on[topics.run_events] == [ev.TaskSucceeded, ev.TaskReady, ev.TaskClaimed]
    assert topics.ready not in on  # granted in the same decision: nobody else may claim it
    # then the answer to the completion's poll (claim_next): one granted
    assert on[topics.replies] == [ev.TaskClaimed, ev.PollAnswered]  # the worker's answers
    answer = decode_event(out.sends[-1].value)
    assert answer.event == ev.PollAnswered(worker_id="w1", poll_id="done", partition=p, granted=1)
    assert answer.job_id == ""
