"""A forged completion on a real broker: someone who knows a running task's public epoch and
worker id (``GET /runs/{id}`` shows both) and can write to the commands topic sends a
CompleteTask; the fold refuses it (``not_holder``: no lease token) and the real worker's
completion is the one that counts."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.model import JobSpec, Schedule, ScheduleKind
from cronlog.vocabulary import RejectReason
from tests.integration.harness import Cluster, EventLog

pytestmark = pytest.mark.broker
JOB = "slow-one"


def test_a_forged_completion_with_the_public_epoch_and_worker_is_refused(
    cluster: Cluster, events: EventLog
) -> None:
    cluster.scheduler()
    cluster.worker()
    spec = JobSpec("slow", Schedule(ScheduleKind.MANUAL), ("sh", "-c", "sleep 6; echo real"))
    cluster.send(JOB, cmd.RegisterJob(spec=spec))
    cluster.send(JOB, cmd.TriggerJob())
    assert events.wait_until(lambda log: bool(log.of_type(ev.TaskClaimed, JOB)), 60)
    (record,) = events.of_type(ev.TaskClaimed, JOB)
    claimed = record.event
    assert isinstance(claimed, ev.TaskClaimed)
    assert len(claimed.lease_token_digest) == 32  # the worker sent a secret

    now = datetime.now(UTC)
    forged = cmd.CompleteTask(
        run_id=claimed.run_id,
        task=claimed.task,
        attempt=claimed.attempt,
        epoch=claimed.epoch,
        worker_id=claimed.worker_id,
        succeeded=True,
        exit_code=0,
        failure_kind=None,
        output_tail="FORGED",
        started_at=now,
        finished_at=now,
    )
    cluster.send(JOB, forged)
    assert events.wait_until(lambda log: bool(log.of_type(ev.CommandRejected, JOB)), 30)
    (refused,) = [r.event for r in events.of_type(ev.CommandRejected, JOB)]
    assert isinstance(refused, ev.CommandRejected)
    assert refused.reason is RejectReason.NOT_HOLDER
    assert refused.command == "CompleteTask"

    assert events.wait_until(lambda log: bool(log.of_type(ev.TaskSucceeded, JOB)), 60)
    (done,) = [r.event for r in events.of_type(ev.TaskSucceeded, JOB)]
    assert isinstance(done, ev.TaskSucceeded)
    assert done.output_tail.strip() == "real"  # the holder's own completion
