"""Workers on a real broker: grant before execution, exit codes, output tail, CRONLOG_* env."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.ids import task_idem_key
from cronlog.time import iso
from cronlog.vocabulary import FailureKind
from tests.integration.harness import Cluster, EventLog
from tests.integration.helpers import once_job

pytestmark = pytest.mark.broker


def test_failing_command_is_recorded_with_exit_code_and_output(
    cluster: Cluster, events: EventLog
) -> None:
    cluster.scheduler()
    cluster.worker()
    run_at = datetime.now(UTC) + timedelta(seconds=2)
    cluster.send(
        "fails",
        cmd.RegisterJob(
            spec=once_job(run_at, ("sh", "-c", "echo about to fail; echo on stderr >&2; exit 3"))
        ),
    )
    assert events.wait_until(lambda log: log.of_type(ev.RunFailed, "fails"), 90)
    failed = [e.event for e in events.of_type(ev.TaskFailed, "fails")]
    assert len(failed) == 1
    assert failed[0].exit_code == 3
    assert failed[0].failure_kind is FailureKind.NONZERO_EXIT
    assert "about to fail" in failed[0].output_tail
    assert "on stderr" in failed[0].output_tail
    claimed = events.of_type(ev.TaskClaimed, "fails")
    assert len(claimed) == 1 and claimed[0].event.epoch == 1


def test_task_sees_its_cronlog_environment(
    cluster: Cluster, events: EventLog, tmp_path: Path
) -> None:
    cluster.scheduler()
    cluster.worker("envw")
    out = tmp_path / "env.json"
    script = (
        "import json, os, sys; json.dump({k: v for k, v in os.environ.items() "
        "if k.startswith('CRONLOG_')}, open(sys.argv[1], 'w'))"
    )
    run_at = (datetime.now(UTC) + timedelta(seconds=2)).replace(microsecond=0)
    cluster.send("env", cmd.RegisterJob(spec=once_job(run_at, ("python3", "-c", script, str(out)))))
    assert events.wait_until(lambda log: log.of_type(ev.RunSucceeded, "env"), 90)
    seen = json.loads(out.read_text())
    run = events.of_type(ev.RunScheduled, "env")[0].event
    claim = events.of_type(ev.TaskClaimed, "env")[0].event
    assert seen["CRONLOG_JOB_ID"] == "env"
    assert seen["CRONLOG_RUN_ID"] == run.run_id
    assert seen["CRONLOG_TASK"] == "main"
    assert seen["CRONLOG_ATTEMPT"] == "1"
    assert seen["CRONLOG_EPOCH"] == str(claim.epoch) == "1"
    assert seen["CRONLOG_IDEM_KEY"] == task_idem_key(run.run_id, "main")
    assert seen["CRONLOG_SCHEDULED_FOR"] == iso(run_at)
    assert seen["CRONLOG_WORKER_ID"] == claim.worker_id


def test_claim_is_granted_before_execution_and_succeeds_once(
    cluster: Cluster, events: EventLog
) -> None:
    cluster.scheduler()
    cluster.worker("w1")
    cluster.worker("w2")
    run_at = datetime.now(UTC) + timedelta(seconds=2)
    for i in range(6):
        cluster.send(f"j{i}", cmd.RegisterJob(spec=once_job(run_at, ("true",))))
    assert events.wait_until(lambda log: len(log.of_type(ev.RunSucceeded)) >= 6, 90)
    events.poll(2)
    for i in range(6):
        kinds = [type(e.event).__name__ for e in events.events(f"j{i}")]
        assert kinds == [
            "JobRegistered",
            "RunScheduled",
            "TaskReady",
            "TaskClaimed",
            "TaskSucceeded",
            "RunSucceeded",
        ], kinds
