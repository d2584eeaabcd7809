"""Priorities with aging (cronlog.priority): under backlog a higher class is granted first; a
lower-class task that waited ``priority_aging`` longer counts as the next class. In the fold
adapter (ready index + grants, no Kafka) and in the core's rank."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from cronlog import commands as cmd
from cronlog.model import JobSpec, Schedule, ScheduleKind, TaskSpec, main_task
from cronlog.priority import rank, task_priority
from tests.unit.fold_world import N, P, World, fold_batch, granted_runs, record_of
from topology.kafka.partitioning import partition_for

MANUAL = JobSpec(name="m", schedule=Schedule(ScheduleKind.MANUAL), task_specs=main_task(("true",)))
IDS = (j for j in (f"job{i}" for i in range(100_000)) if partition_for(j, N) == P)
T0 = datetime(2026, 3, 1, 12, tzinfo=UTC)


def _trigger_all(world: World, jobs: list[str], spec: JobSpec) -> None:
    world.send(*[(j, cmd.RegisterJob(spec=spec)) for j in jobs])
    for start in range(0, len(jobs), 500):  # a batch of triggers, as a busy partition folds
        records = [
            record_of(world, f"t-{j}", j, cmd.TriggerJob()) for j in jobs[start : start + 500]
        ]
        fold_batch(world, *records)


def _poll(world: World, slots: int) -> list[str]:
    out = world.send(("", cmd.PollTasks(worker_id="w1", slots=slots, poll_id=f"p{world.offset}")))
    return [job for job, _ in granted_runs(out)]


def test_behind_2000_low_priority_tasks_a_high_priority_one_is_granted_first() -> None:
    world = World()  # each record is folded 1 s after the one before: the backlog spans 33 min
    hour = timedelta(hours=1)
    low = [next(IDS) for _ in range(2000)]
    _trigger_all(world, low, replace(MANUAL, priority=-1, priority_aging=hour))
    high = next(IDS)
    _trigger_all(world, [high], replace(MANUAL, priority=3, priority_aging=hour))
    assert _poll(world, 1) == [high]
    assert _poll(world, 3) == low[:3]  # then the backlog, oldest first


def test_a_low_task_that_waited_past_its_aging_goes_before_a_newer_high_one() -> None:
    aging = timedelta(seconds=60)
    low_spec = replace(MANUAL, priority=0, priority_aging=aging)
    high_spec = replace(MANUAL, priority=1, priority_aging=aging)
    for gap, first in ((30, "high"), (90, "low")):
        world = World()
        low, high = next(IDS), next(IDS)
        _trigger_all(world, [low], low_spec)
        world.at += timedelta(seconds=gap)  # the high task becomes ready this much later
        _trigger_all(world, [high], high_spec)
        assert _poll(world, 1) == [high if first == "high" else low], gap


def test_a_tasks_own_class_orders_the_tasks_of_one_job() -> None:
    dag = replace(
        MANUAL,
        task_specs=(TaskSpec("a", ("true",)), TaskSpec("b", ("true",), priority=5)),
    )
    assert task_priority(dag, "a") == 0 and task_priority(dag, "b") == 5
    assert rank(dag, T0, "b") == T0 - 5 * dag.priority_aging
    assert rank(dag, T0, "a") == T0  # class 0 ranks at its tick: the order before classes


@given(
    p=st.integers(-9, 9),
    q=st.integers(-9, 9),
    wait_s=st.integers(0, 3600),
    aging_s=st.integers(1, 600),
)
def test_rank_orders_by_class_and_ages_one_class_per_aging(
    p: int, q: int, wait_s: int, aging_s: int
) -> None:
    aging = timedelta(seconds=aging_s)
    a = rank(replace(MANUAL, priority=p, priority_aging=aging), T0, "main")
    b = rank(
        replace(MANUAL, priority=q, priority_aging=aging), T0 + timedelta(seconds=wait_s), "main"
    )
    # a (ready wait_s earlier, class p) goes first exactly when its head start in waiting plus
    # its class advantage, in agings, beats b's
    assert (a < b) == (wait_s + (p - q) * aging_s > 0)


def test_an_old_backfill_waits_from_its_creation_not_from_its_old_tick() -> None:
    # found by an adversarial run: ranked at a year-old tick, a class -9 backfill outranked
    # a class 9 task readied now
    from cronlog.decide import handle

    week = timedelta(days=7)
    cron = JobSpec(
        "b", Schedule(ScheduleKind.CRON, expression="0 0 1 1 *"), main_task(("true",)), priority=-9
    )
    cron = replace(cron, priority_aging=week)
    now = T0

    def apply(state: object, job: str, command: cmd.Command, key: str) -> object:
        env = cmd.Envelope(idem_key=key, job_id=job, command=command)
        return handle(state, env, now)[0]  # type: ignore[arg-type]

    low = apply(None, "low", cmd.RegisterJob(spec=cron), "r1")
    low = apply(low, "low", cmd.BackfillJob(ticks=(datetime(2025, 1, 1, tzinfo=UTC),)), "b1")
    high_spec = replace(MANUAL, priority=9, priority_aging=week)
    high = apply(None, "high", cmd.RegisterJob(spec=high_spec), "r2")
    high = apply(high, "high", cmd.TriggerJob(), "t2")
    assert low.ready_rank() == now + 9 * week  # type: ignore[attr-defined]
    assert high.ready_rank() == now - 9 * week  # type: ignore[attr-defined]
    assert high.ready_rank() < low.ready_rank()  # type: ignore[attr-defined]
