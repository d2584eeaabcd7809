"""The tenant ledger on a real broker (docs/tenants.md, "The tenant ledger").

- A cap of 4 running tasks holds over 3 schedulers and 4 workers, across a ``kill -9`` of a
  scheduler: checked from the run-events (claims less ends, in broker time).
- A tenant flooding thousands of tasks does not delay another tenant's every-second job,
  and with weights 3:1 a full fleet is split 3:1 while both have backlog. The figures are
  printed with the fleet's size set (fair sharing) and without (first come, first served).
"""

from __future__ import annotations

import re
import time
import uuid
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from confluent_kafka import Producer

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.ledger import FLEET, LEDGER_KEY
from cronlog.model import JobSpec, Schedule, ScheduleKind, main_task
from tests.integration.harness import Cluster, EventLog, Proc
from tests.integration.helpers import cron_job
from topology.kafka.partitioning import partition_for
from topology.wire.codec import encode_command

pytestmark = [pytest.mark.broker, pytest.mark.timeout(900)]
ENDS = (ev.TaskSucceeded, ev.TaskFailed, ev.TaskReleased, ev.TaskCancelled, ev.LeaseExpired)


def _spec(tenant: str, command: tuple[str, ...]) -> JobSpec:
    return JobSpec("t", Schedule(ScheduleKind.MANUAL), main_task(command), tenant=tenant)


def _send_all(cluster: Cluster, commands: list[tuple[str, cmd.Command, str]]) -> None:
    """Produce ``(job_id, command, tenant)`` commands with one producer."""
    producer = Producer(cluster.settings.producer_config())
    for job, command, tenant in commands:
        env = cmd.Envelope(idem_key=uuid.uuid4().hex, job_id=job, command=command, tenant=tenant)
        producer.produce(cluster.topics.commands, key=job.encode(), value=encode_command(env))
        producer.poll(0)
    assert producer.flush(30) == 0


def _limits(cluster: Cluster, tenant: str, weight: int = 1, cap: int | None = None) -> None:
    cluster.send(
        LEDGER_KEY, cmd.SetTenantLimits(tenant=tenant, weight=weight, max_running_tasks=cap)
    )


def _flood(
    cluster: Cluster, tenant: str, jobs: int, runs: int, command: tuple[str, ...]
) -> list[str]:
    ids = [f"{tenant}-{i:03d}" for i in range(jobs)]
    _send_all(cluster, [(j, cmd.RegisterJob(spec=_spec(tenant, command)), tenant) for j in ids])
    _send_all(cluster, [(j, cmd.TriggerJob(), tenant) for j in ids for _ in range(runs)])
    return ids


def _peak(events: EventLog, jobs: set[str]) -> int:
    """Most task instances of ``jobs`` claimed and not ended at once, in broker time."""
    changes = [
        (r.at, 0 if isinstance(r.event, ENDS) else 1)
        for r in events.events()
        if r.job_id in jobs and isinstance(r.event, (ev.TaskClaimed, *ENDS))
    ]
    running = peak = 0
    for _, kind in sorted(changes):  # at the same instant, ends first
        running += 1 if kind else -1
        peak = max(peak, running)
    return peak


def _ledger_owner(schedulers: list[Proc], partitions: int, within_s: float = 120.0) -> Proc:
    """The scheduler whose last ``partitions_owned`` line holds the ledger's partition,
    waited for up to ``within_s``: mid-rebalance (a loaded box) nobody holds it yet, which is
    "not yet", not a fault."""
    ledger = partition_for(LEDGER_KEY.encode(), partitions)
    deadline = time.monotonic() + within_s
    while True:
        for proc in schedulers:
            owned = re.findall(r"partitions_owned partitions=\[([0-9, ]*)\]", proc.log_tail(400))
            if owned and str(ledger) in owned[-1].replace(" ", "").split(","):
                return proc
        if time.monotonic() > deadline:
            raise AssertionError(
                f"no scheduler owned the ledger's partition {ledger} in {within_s:.0f} s"
            )
        time.sleep(0.5)


def test_a_cap_of_4_holds_over_3_schedulers_4_workers_and_a_kill_9(
    cluster: Cluster, events: EventLog
) -> None:
    _limits(cluster, "team-a", cap=4)
    jobs = _flood(cluster, "team-a", jobs=12, runs=4, command=("sh", "-c", "sleep 0.5"))
    schedulers = [cluster.scheduler(f"s{i}") for i in range(3)]
    for i in range(4):
        cluster.worker(f"w{i}", CRONLOG_SLOTS="4")
    assert events.wait_until(lambda log: len(log.of_type(ev.TaskSucceeded)) >= 12, 240)
    victim = _ledger_owner(schedulers, cluster.settings.partitions)
    victim.kill9()  # the ledger's own partition moves to another scheduler
    killed_at = time.time()
    assert events.wait_until(lambda log: len(log.of_type(ev.RunSucceeded)) >= 48, 400)
    ends = [r for r in events.of_type(ev.TaskSucceeded) if r.at.timestamp() > killed_at]
    peak = _peak(events, set(jobs))
    print(
        f"\n[figures] cap 4: peak {peak} running over 3 schedulers, 4 workers (16 slots); "
        f"48 tasks, {len(ends)} ended after the kill -9 of the ledger partition's owner"
    )
    assert peak == 4  # reached, never passed
    assert ends  # work went on after the kill
    starts = Counter((r.job_id, r.event.run_id) for r in events.of_type(ev.RunSucceeded))  # type: ignore[attr-defined]
    assert len(starts) == 48 and set(starts.values()) == {1}


def _every_second_lag(events: EventLog, job: str, since: float, until: float) -> list[float]:
    """Tick → claim, seconds, of ``job``'s runs scheduled within [since, until] (epoch s)."""
    ticks = {
        r.event.run_id: r.event.scheduled_for  # type: ignore[attr-defined]
        for r in events.of_type(ev.RunScheduled, job)
        if since <= r.event.scheduled_for.timestamp() <= until  # type: ignore[attr-defined]
    }
    claimed = {
        r.event.run_id: r.at  # type: ignore[attr-defined]
        for r in events.of_type(ev.TaskClaimed, job)
        if r.event.run_id in ticks  # type: ignore[attr-defined]
    }
    now = datetime.now(UTC)  # a tick not claimed yet counts with its wait so far
    return sorted((claimed.get(run, now) - at).total_seconds() for run, at in ticks.items())


def _p99(values: list[float]) -> float:
    return values[min(len(values) - 1, int(len(values) * 0.99))] if values else float("nan")


def _share(events: EventLog, a: set[str], b: set[str]) -> tuple[int, int]:
    """Claims of ``a`` and ``b`` while both had backlog: from b's first claim to the earlier
    of the two last claims, less a tenth at each end (ramp-up, tail)."""
    claims = sorted((r.at, r.job_id) for r in events.of_type(ev.TaskClaimed) if r.job_id in a | b)
    first = min(t for t, j in claims if j in b)
    until = min(max(t for t, j in claims if j in a), max(t for t, j in claims if j in b))
    window = [j for t, j in claims if first <= t <= until]
    cut = len(window) // 10
    window = window[cut : len(window) - cut]
    return sum(j in a for j in window), sum(j in b for j in window)


def _count(log: EventLog, kind: type, jobs: set[str]) -> int:
    return sum(r.job_id in jobs for r in log.of_type(kind))


def _run_flood(cluster: Cluster, events: EventLog, fair: bool) -> dict[str, float]:
    """team-b's every-second job runs; team-a queues 5,000 tasks; for 30 s the job's trigger
    lag is measured; then team-b queues 600 tasks of its own and the claims are counted."""
    if fair:
        _limits(cluster, FLEET, cap=16)
        _limits(cluster, "team-a", weight=3)
        _limits(cluster, "team-b", weight=1)
    every = replace(cron_job("* * * * * *"), tenant="team-b")
    _send_all(cluster, [("b-every-second", cmd.RegisterJob(spec=every), "team-b")])
    cluster.scheduler("s1")
    cluster.scheduler("s2")
    cluster.worker("w1", CRONLOG_SLOTS="8")
    cluster.worker("w2", CRONLOG_SLOTS="8")
    assert events.wait_until(lambda log: bool(log.of_type(ev.TaskSucceeded, "b-every-second")), 120)
    a = set(_flood(cluster, "team-a", jobs=50, runs=100, command=("true",)))  # 5,000 tasks
    assert events.wait_until(lambda log: _count(log, ev.RunScheduled, a) >= 5000, 300)
    t0 = time.time()  # the backlog is queued: from here team-b's job must keep its pace
    assert events.wait_until(lambda log: time.time() > t0 + 35, 60)  # reading meanwhile
    lag = _every_second_lag(events, "b-every-second", t0, t0 + 30)
    left = 5000 - _count(events, ev.RunSucceeded, a)
    b = set(_flood(cluster, "team-b", jobs=10, runs=60, command=("true",)))  # 600 tasks
    assert events.wait_until(lambda log: _count(log, ev.RunSucceeded, b) >= 600, 600)
    got_a, got_b = _share(events, a, b)
    return {"lag_p99": _p99(lag), "lag_n": len(lag), "a": got_a, "b": got_b, "left": left}


@pytest.mark.parametrize("fair", [True, False], ids=["fair", "first-come"])
def test_a_flooding_tenant_leaves_another_its_share(
    cluster: Cluster, events: EventLog, fair: bool
) -> None:
    f = _run_flood(cluster, events, fair)
    share = f["a"] / max(1, f["a"] + f["b"])
    print(
        f"\n[figures] {'fair sharing 3:1, fleet 16' if fair else 'no fleet size (first come)'}: "
        f"team-b every-second job trigger lag p99 {f['lag_p99']:.2f} s over {f['lag_n']:.0f} "
        f"ticks while team-a's 5,000 queued tasks drained ({f['left']:.0f} left after 30 s); "
        f"with both backlogged team-a took "
        f"{f['a']:.0f}, team-b {f['b']:.0f} claims ({share:.1%} for team-a)"
    )
    if fair:
        # Without a fleet size the job waits behind the whole backlog (~50 s on a 2-core box);
        # with it, well under a second idle, 2.4 s seen on a loaded CI machine. The bound
        # separates the two cases, it is not a latency target (those live in bench/).
        assert f["lag_p99"] < 10.0
        assert abs(share - 0.75) <= 0.075  # 3:1 ± 10 %
