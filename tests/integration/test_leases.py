"""Leases against a real broker, scheduler, workers and API: a worker killed with ``kill -9``
mid-task loses its lease on a tick and another worker runs the retry (recovery time printed
and bounded); a frozen worker (SIGSTOP) comes back as a zombie whose renewal is refused by
epoch and whose task is killed; a timeout kills a task's whole process group; and a completion
carrying an expired lease's epoch is refused, leaving exactly one success.

Figures are printed (run with ``-s``); bounds are generous enough for a shared 2-core machine
but far below what the failure modes cost (45 s librdkafka session timeout, a task left
running forever).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.model import JobSpec, RetryPolicy, Schedule, ScheduleKind, main_task
from cronlog.vocabulary import FailureKind, RejectReason
from tests.builders import completed
from tests.integration.harness import Cluster, EventLog, Proc
from tests.integration.helpers import start_api, wait_for

pytestmark = pytest.mark.broker
T = TypeVar("T")

TICK_S = 1.0
"""The scheduler's tick interval (its default): lease expiry and retry release wait for one."""
WORKER_ENV: dict[str, str] = {}
"""Worker settings of the fleet (the defaults)."""
GRACE_S = 1.0
"""The jobs' grace_s: seconds from the timeout's SIGTERM to SIGKILL."""


def retry_policy(max_attempts: int, backoff_s: float) -> dict[str, Any]:
    """The ``retry_policy`` of an API job body (the one place that knows its field names)."""
    return {"max_attempts": max_attempts, "base_s": backoff_s}


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie counts as gone: nothing may reap it in a container)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def read_pid(path: Path, timeout: float = 30) -> int:
    text = wait_for(lambda: path.exists() and path.read_text().strip(), timeout, f"{path.name}")
    return int(text)


def since(t0: float, at: datetime) -> float:
    """Seconds from wall-clock instant ``t0`` to a fold instant (broker time, same machine)."""
    return at.timestamp() - t0


@dataclass
class Fleet:
    """A scheduler, two workers and an API for one test."""

    cluster: Cluster
    api: httpx.Client
    workers: dict[str, Proc]

    def register(self, body: dict[str, Any]) -> str:
        answer = self.api.post("/api/v1/jobs", json=body)
        assert answer.status_code == 201, answer.text
        triggered = self.api.post(f"/api/v1/jobs/{body['job_id']}/trigger")
        assert triggered.status_code in (200, 201, 202), triggered.text
        run_id: str = triggered.json()["run_id"]
        return run_id

    def run(self, run_id: str) -> dict[str, Any]:
        answer = self.api.get(f"/api/v1/runs/{run_id}")
        assert answer.status_code == 200, answer.text
        run: dict[str, Any] = answer.json()
        return run


@pytest.fixture
def fleet(cluster: Cluster) -> Iterator[Fleet]:
    """Scheduler, workers w1 and w2 (short ready-consumer session), API ready to answer."""
    cluster.scheduler()
    workers = {
        f"{cluster.settings.topic_prefix}{name}": cluster.worker(name, **WORKER_ENV)
        for name in ("w1", "w2")
    }
    client = start_api(cluster)
    # Both workers in the ready group before the first task, so the test decides who dies.
    wait_for(
        lambda: all("worker started" in p.log_tail(200) for p in workers.values()),
        60,
        "workers started",
    )
    time.sleep(2)  # the group's first rebalance settles (initial delay 0 on ops/kafka)
    yield Fleet(cluster, client, workers)
    for proc in workers.values():  # a stopped worker would ignore the teardown's SIGTERM
        if proc.popen is not None and proc.popen.poll() is None:
            os.kill(proc.popen.pid, signal.SIGCONT)
    client.close()


def claims(events: EventLog, job_id: str) -> dict[int, ev.RunEvent]:
    """TaskClaimed run-events of a job by attempt."""
    return {e.event.attempt: e for e in events.of_type(ev.TaskClaimed, job_id)}


def test_kill9_of_a_worker_mid_task_is_recovered_by_the_other_worker(
    fleet: Fleet, events: EventLog, tmp_path: Path
) -> None:
    # The default retry policy (one attempt, no retry): a crash is not a failure, so the
    # lapsed lease gives the attempt back rather than dead-lettering the task (issue 13).
    ttl_s, task_s = 4.0, 3.0
    run_id = fleet.register(
        {
            "job_id": "kill9",
            "name": "sleeps then succeeds",
            "schedule": {"type": "manual"},
            "command": [
                "sh",
                "-c",
                f"echo $$ > {tmp_path}/pid.$CRONLOG_ATTEMPT; exec sleep {task_s}",
            ],
            "lease_ttl_s": ttl_s,
            "timeout_s": 60,
        }
    )
    task_pid = read_pid(tmp_path / "pid.1")
    assert events.wait_until(lambda log: 1 in claims(log, "kill9"), 10)
    holder_id = claims(events, "kill9")[1].event.worker_id
    [other_id] = set(fleet.workers) - {holder_id}
    holder = fleet.workers[holder_id]
    assert alive(task_pid)

    killed_at = time.time()
    holder.kill9()
    # PR_SET_PDEATHSIG: the kernel kills the task as its worker dies.
    wait_for(lambda: not alive(task_pid), 2.0, "attempt 1's process gone with its worker")
    task_gone_s = time.time() - killed_at

    assert events.wait_until(lambda log: log.of_type(ev.RunSucceeded, "kill9"), 60)
    events.poll(1)
    expired = [e for e in events.of_type(ev.LeaseExpired, "kill9")]
    assert [(e.event.attempt, e.event.epoch, e.event.worker_id) for e in expired] == [
        (1, 1, holder_id)
    ]
    second = claims(events, "kill9")[2]
    assert (second.event.worker_id, second.event.epoch) == (other_id, 2)
    [succeeded] = events.of_type(ev.TaskSucceeded, "kill9")
    assert (succeeded.event.attempt, succeeded.event.worker_id) == (2, other_id)

    run = wait_for(
        lambda: (r := fleet.run(run_id))["state"] == "succeeded" and r, 10, "run view succeeded"
    )
    by_attempt = {a["attempt"]: a for a in run["attempts"]}
    assert (by_attempt[1]["state"], by_attempt[1]["failure_kind"]) == (
        "lease_expired",
        "lease_expired",
    )
    assert by_attempt[1]["worker_id"] == holder_id
    assert not events.of_type(ev.TaskFailed, "kill9")  # given back, not failed
    assert (by_attempt[2]["worker_id"], by_attempt[2]["exit_code"]) == (other_id, 0)

    expired_s = since(killed_at, expired[0].at)
    claimed_s = since(killed_at, second.at)
    success_s = since(killed_at, succeeded.at)
    print(
        f"\nkill -9 → task process gone {task_gone_s:.2f} s, lease expired {expired_s:.2f} s, "
        f"attempt 2 claimed {claimed_s:.2f} s, succeeded {success_s:.2f} s "
        f"(ttl {ttl_s:g} s, tick {TICK_S:g} s, default retry policy, task {task_s:g} s)"
    )
    # The lease ends at most ttl after the kill and is expired by the next tick, which makes
    # the next attempt ready at once and notifies every worker; the other one polls it. No
    # group membership of the dead worker holds anything back (dispatch by polls).
    margin_s = 3.0
    bound_s = ttl_s + TICK_S + margin_s
    assert expired_s <= ttl_s + TICK_S + 1.0
    assert claimed_s <= bound_s, f"attempt 2 claimed {claimed_s:.1f} s after the kill"
    assert success_s <= bound_s + task_s + 1.0


def test_a_resumed_zombie_is_refused_by_epoch_and_its_task_killed(
    fleet: Fleet, events: EventLog, tmp_path: Path
) -> None:
    ttl_s = 4.0
    # Attempt 1 would run a minute; attempt 2 long enough to still hold its lease at SIGCONT.
    script = (
        f"echo $$ > {tmp_path}/pid.$CRONLOG_ATTEMPT; "
        'if [ "$CRONLOG_ATTEMPT" = 1 ]; then exec sleep 60; else exec sleep 5; fi'
    )
    run_id = fleet.register(
        {
            "job_id": "zombie",
            "name": "zombie",
            "schedule": {"type": "manual"},
            "command": ["sh", "-c", script],
            "lease_ttl_s": ttl_s,
            "timeout_s": 120,
            "retry_policy": retry_policy(2, 1),
        }
    )
    first_pid = read_pid(tmp_path / "pid.1")
    assert events.wait_until(lambda log: 1 in claims(log, "zombie"), 10)
    zombie_id = claims(events, "zombie")[1].event.worker_id
    [other_id] = set(fleet.workers) - {zombie_id}
    zombie = fleet.workers[zombie_id]
    assert zombie.popen is not None

    stopped_at = time.time()
    os.kill(zombie.popen.pid, signal.SIGSTOP)
    try:
        assert events.wait_until(lambda log: 2 in claims(log, "zombie"), 30), "no attempt 2"
        assert alive(first_pid), "attempt 1 still runs under the frozen worker"
    finally:
        os.kill(zombie.popen.pid, signal.SIGCONT)
    resumed_at = time.time()
    wait_for(lambda: not alive(first_pid), 5.0, "the zombie's task killed after SIGCONT")
    zombie_task_killed_s = time.time() - resumed_at

    assert events.wait_until(lambda log: log.of_type(ev.RunSucceeded, "zombie"), 30)
    events.poll(2)  # anything the zombie still sends lands now
    refused = [
        e.event
        for e in events.of_type(ev.CommandRejected, "zombie")
        if e.event.worker_id == zombie_id and e.event.command in ("RenewLease", "CompleteTask")
    ]
    assert refused, "the zombie's renewal or completion was not refused"
    assert all(r.reason in (RejectReason.STALE_EPOCH, RejectReason.NOT_HOLDER) for r in refused), [
        (r.command, r.reason) for r in refused
    ]
    assert all(r.run_id == run_id for r in refused)
    [expired] = events.of_type(ev.LeaseExpired, "zombie")
    assert (expired.event.attempt, expired.event.worker_id) == (1, zombie_id)
    [succeeded] = events.of_type(ev.TaskSucceeded, "zombie")
    assert (succeeded.event.attempt, succeeded.event.epoch, succeeded.event.worker_id) == (
        2,
        2,
        other_id,
    )
    assert fleet.run(run_id)["state"] == "succeeded"
    print(
        f"\nzombie: attempt 2 claimed {since(stopped_at, claims(events, 'zombie')[2].at):.2f} s "
        f"after SIGSTOP; after SIGCONT its task was killed in {zombie_task_killed_s:.2f} s; "
        f"refused: {[(r.command, r.reason.value) for r in refused]}"
    )


def test_timeout_kills_the_task_and_its_child_process(
    fleet: Fleet, events: EventLog, tmp_path: Path
) -> None:
    # One task that leaves on SIGTERM, one that ignores it (and so does its child): the
    # worker's SIGKILL after grace_s (1 s here) must end that one.
    timeout_s, grace_s = 2.0, GRACE_S
    for job_id, trap in (("timeout-term", ""), ("timeout-kill", "trap '' TERM; ")):
        d = tmp_path / job_id
        d.mkdir()
        fleet.register(
            {
                "job_id": job_id,
                "name": job_id,
                "schedule": {"type": "manual"},
                "command": [
                    "sh",
                    "-c",
                    f"{trap}sleep 300 & echo $! > {d}/child.pid; echo $$ > {d}/pid; wait",
                ],
                "timeout_s": timeout_s,
                "grace_s": grace_s,
                "lease_ttl_s": 30,
                "retry_policy": retry_policy(1, 1),
            }
        )
    for job_id in ("timeout-term", "timeout-kill"):
        d = tmp_path / job_id
        shell, child = read_pid(d / "pid"), read_pid(d / "child.pid")
        assert alive(shell) and alive(child)
        assert events.wait_until(lambda log, j=job_id: log.of_type(ev.RunFailed, j), 30)
        [failed] = [e.event for e in events.of_type(ev.TaskFailed, job_id)]
        assert failed.failure_kind is FailureKind.TIMEOUT, failed
        assert failed.exit_code is None
        assert not alive(shell), f"{job_id}: the shell {shell} survived its timeout"
        assert not alive(child), f"{job_id}: the child {child} survived its timeout"
        assert failed.started_at is not None
        ran_s = (failed.finished_at - failed.started_at).total_seconds()
        print(
            f"\n{job_id}: ran {ran_s:.2f} s before failing as timeout "
            f"(timeout {timeout_s:g} s, grace {grace_s:g} s); shell and child gone"
        )
        if job_id == "timeout-term":  # SIGTERM was enough: no wait for the grace period
            assert timeout_s <= ran_s < timeout_s + grace_s, ran_s
        else:  # SIGTERM ignored: only the SIGKILL after the grace period ended it
            assert ran_s >= timeout_s + grace_s - 0.1, ran_s


def test_a_completion_for_an_expired_lease_is_refused_and_one_success_stands(
    cluster: Cluster, events: EventLog
) -> None:
    """No worker process: the test plays a zombie and a live worker with raw commands."""
    cluster.scheduler()
    spec = JobSpec(
        name="fenced",
        schedule=Schedule(ScheduleKind.MANUAL),
        task_specs=main_task(("true",)),
        # long enough that the live lease (never renewed here) outlasts the few
        # steps to its completion on a loaded box; 2 s flaked once in CI-like runs
        lease_ttl=timedelta(seconds=6),
        retry_policy=RetryPolicy(max_attempts=2, backoff=timedelta(seconds=1)),
    )
    job = "fenced"
    cluster.send(job, cmd.RegisterJob(spec=spec))
    cluster.send(job, cmd.TriggerJob())
    assert events.wait_until(lambda log: log.of_type(ev.TaskReady, job), 60)
    ready = events.of_type(ev.TaskReady, job)[0].event
    run_id, task = ready.run_id, ready.task

    cluster.send(job, cmd.ClaimTask(run_id=run_id, task=task, attempt=1, worker_id="zombie"))
    assert events.wait_until(lambda log: 1 in claims(log, job), 20)
    assert claims(events, job)[1].event.epoch == 1
    # No renewal: the lease expires on a tick and attempt 2 becomes ready.
    assert events.wait_until(
        lambda log: any(e.event.attempt == 2 for e in log.of_type(ev.TaskReady, job)), 30
    )
    cluster.send(job, cmd.ClaimTask(run_id=run_id, task=task, attempt=2, worker_id="live"))
    assert events.wait_until(lambda log: 2 in claims(log, job), 20)
    assert claims(events, job)[2].event.epoch == 2

    now = datetime.now(UTC)

    def complete(attempt: int, epoch: int, worker_id: str) -> cmd.CompleteTask:
        return completed(run_id, task=task, attempt=attempt, epoch=epoch, worker=worker_id, at=now)

    cluster.send(job, complete(1, 1, "zombie"))  # the expired lease's epoch
    cluster.send(job, complete(2, 2, "zombie"))  # the current epoch, not its holder
    cluster.send(job, complete(2, 2, "live"))
    assert events.wait_until(lambda log: log.of_type(ev.RunSucceeded, job), 20)
    cluster.send(job, complete(1, 1, "zombie"), idem_key="late-zombie")  # after the run ended
    assert events.wait_until(lambda log: len(log.of_type(ev.CommandRejected, job)) >= 3, 20)
    events.poll(1)

    refused = [
        (r.event.command, r.event.reason, r.event.worker_id)
        for r in events.of_type(ev.CommandRejected, job)
    ]
    assert refused == [
        ("CompleteTask", RejectReason.STALE_EPOCH, "zombie"),
        ("CompleteTask", RejectReason.NOT_HOLDER, "zombie"),
        ("CompleteTask", RejectReason.UNKNOWN_TASK_INSTANCE, "zombie"),
    ], refused
    [expired] = events.of_type(ev.LeaseExpired, job)
    assert (expired.event.attempt, expired.event.epoch) == (1, 1)
    [succeeded] = events.of_type(ev.TaskSucceeded, job)
    assert (succeeded.event.attempt, succeeded.event.epoch, succeeded.event.worker_id) == (
        2,
        2,
        "live",
    )
