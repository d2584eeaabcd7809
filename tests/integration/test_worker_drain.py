"""SIGTERM drain on a real broker: finish within drain_s, else ReleaseTask and the other runs it."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from cronlog import commands as cmd
from cronlog import events as ev
from tests.integration.harness import Cluster, EventLog, Proc
from tests.integration.helpers import once_job, start_api

pytestmark = pytest.mark.broker

DRAIN_S = 4


def _workers(cluster: Cluster) -> dict[str, Proc]:
    """Two workers with a short drain period, by worker_id."""
    procs = [cluster.worker(name, CRONLOG_DRAIN_S=str(DRAIN_S)) for name in ("w1", "w2")]
    return {
        f"{cluster.settings.topic_prefix}{name}": p
        for name, p in zip(("w1", "w2"), procs, strict=True)
    }


def _sigterm(proc: Proc) -> float:
    """SIGTERM the worker (not its tasks: they run in sessions of their own); seconds to exit."""
    started = time.monotonic()
    proc.stop(timeout=DRAIN_S + 20)
    assert proc.popen is not None and proc.popen.returncode == 0, proc.log_tail()
    return time.monotonic() - started


def _wait_file(path: Path, timeout: float = 30) -> None:
    """Wait until the task has created ``path`` (it is running, not just granted)."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"the task never created {path}"
        time.sleep(0.05)


def _claims(events: EventLog, job_id: str) -> list[ev.TaskClaimed]:
    return [e.event for e in events.of_type(ev.TaskClaimed, job_id)]


def test_unfinished_task_is_released_and_runs_again_on_the_other_worker(
    cluster: Cluster, events: EventLog, tmp_path: Path
) -> None:
    cluster.scheduler()
    workers = _workers(cluster)
    api = start_api(cluster)
    # Epoch 1 would outlive the drain; the run after the release finishes at once.
    started = tmp_path / "started"
    script = (
        f'if [ "$CRONLOG_EPOCH" = 1 ]; then echo first; touch {started}; sleep 60; fi; '
        'echo "done $CRONLOG_EPOCH"'
    )
    cluster.send(
        "drain-me",
        cmd.RegisterJob(
            spec=once_job(datetime.now(UTC) + timedelta(seconds=2), ("sh", "-c", script))
        ),
    )
    assert events.wait_until(lambda log: _claims(log, "drain-me"), 90)
    holder = _claims(events, "drain-me")[0].worker_id
    _wait_file(started)
    took = _sigterm(workers[holder])
    assert took < DRAIN_S + 5, f"the draining worker took {took:.1f} s to exit"

    assert events.wait_until(lambda log: log.of_type(ev.RunSucceeded, "drain-me"), 60)
    events.poll(1)
    kinds = [type(e.event).__name__ for e in events.events("drain-me")]
    assert kinds == [
        "JobRegistered",
        "RunScheduled",
        "TaskReady",
        "TaskClaimed",
        "TaskReleased",
        "TaskReady",
        "TaskClaimed",
        "TaskSucceeded",
        "RunSucceeded",
    ], kinds
    [released] = [e.event for e in events.of_type(ev.TaskReleased, "drain-me")]
    assert (released.attempt, released.epoch, released.worker_id) == (1, 1, holder)
    assert "draining" in released.reason
    first, second = _claims(events, "drain-me")
    (other,) = set(workers) - {holder}
    assert (first.attempt, first.epoch, second.attempt, second.epoch) == (1, 1, 1, 2)
    assert second.worker_id == other
    [done] = [e.event for e in events.of_type(ev.TaskSucceeded, "drain-me")]
    assert (done.attempt, done.epoch, done.worker_id, done.output_tail) == (1, 2, other, "done 2\n")
    assert events.of_type(ev.TaskFailed, "drain-me") == []

    run = api.get(f"/api/v1/runs/{first.run_id}").json()
    assert run["state"] == "succeeded"
    assert [(a["attempt"], a["state"], a["epoch"], a["worker_id"]) for a in run["attempts"]] == [
        (1, "succeeded", 2, other)
    ]
    # One log per execution of the attempt: the released one ends where it was killed.
    url = f"/api/v1/runs/{first.run_id}/tasks/main/attempts/1/log"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        latest, released_log = api.get(url), api.get(url, params={"epoch": 1})
        if all(a.headers.get("x-cronlog-log-complete") == "true" for a in (latest, released_log)):
            break
        time.sleep(0.2)
    assert (latest.content, latest.headers["x-cronlog-log-epochs"]) == (b"done 2\n", "1,2")
    assert released_log.content == b"first\n"
    print(f"\n[figures] draining worker exited {took:.2f} s after SIGTERM (drain_s={DRAIN_S})")


def test_task_finishing_within_the_drain_completes_normally(
    cluster: Cluster, events: EventLog, tmp_path: Path
) -> None:
    cluster.scheduler()
    workers = _workers(cluster)
    started = tmp_path / "started"
    cluster.send(
        "drain-ok",
        cmd.RegisterJob(
            spec=once_job(
                datetime.now(UTC) + timedelta(seconds=2),
                ("sh", "-c", f"touch {started}; sleep 2; echo finished"),
            )
        ),
    )
    assert events.wait_until(lambda log: _claims(log, "drain-ok"), 90)
    holder = _claims(events, "drain-ok")[0].worker_id
    _wait_file(started)
    took = _sigterm(workers[holder])
    assert 1.0 < took < DRAIN_S + 3, took  # it waited for the task, not for the whole drain
    assert events.wait_until(lambda log: log.of_type(ev.RunSucceeded, "drain-ok"), 30)
    events.poll(1)
    kinds = [type(e.event).__name__ for e in events.events("drain-ok")]
    assert kinds == [
        "JobRegistered",
        "RunScheduled",
        "TaskReady",
        "TaskClaimed",
        "TaskSucceeded",
        "RunSucceeded",
    ], kinds
    [done] = [e.event for e in events.of_type(ev.TaskSucceeded, "drain-ok")]
    assert (done.epoch, done.worker_id, done.output_tail) == (1, holder, "finished\n")
