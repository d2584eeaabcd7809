"""A forged completion on a real broker: someone who knows a running task's public epoch and
worker id (``GET /runs/{id}`` shows both) and can write to the commands topic sends a
CompleteTask; the fold refuses it (``not_holder``: no lease token) and the real worker's
completion is the one that counts."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.leases import lease_digest
from cronlog.model import JobSpec, Schedule, ScheduleKind, main_task
from cronlog.vocabulary import RejectReason
from tests.builders import completed
from tests.integration.harness import Cluster, EventLog
from topology.kafka.partitioning import partition_for
from topology.wire.codec import encode_command

pytestmark = pytest.mark.broker
JOB = "slow-one"


def test_a_forged_completion_with_the_public_epoch_and_worker_is_refused(
    cluster: Cluster, events: EventLog
) -> None:
    cluster.scheduler()
    cluster.worker()
    spec = JobSpec(
        "slow", Schedule(ScheduleKind.MANUAL), main_task(("sh", "-c", "sleep 6; echo real"))
    )
    cluster.send(JOB, cmd.RegisterJob(spec=spec))
    cluster.send(JOB, cmd.TriggerJob())
    assert events.wait_until(lambda log: bool(log.of_type(ev.TaskClaimed, JOB)), 60)
    (record,) = events.of_type(ev.TaskClaimed, JOB)
    claimed = record.event
    assert isinstance(claimed, ev.TaskClaimed)
    assert len(claimed.lease_token_digest) == 32  # the worker sent a secret

    now = datetime.now(UTC)
    forged = completed(
        claimed.run_id,
        task=claimed.task,
        attempt=claimed.attempt,
        epoch=claimed.epoch,
        worker=claimed.worker_id,
        at=now,
        output_tail="FORGED",
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


def test_a_grant_made_for_another_secret_under_the_workers_id_is_not_run(
    cluster: Cluster, events: EventLog, tmp_path: Path
) -> None:
    # found by an adversarial run: a forged poll (or a predecessor's late one) under a live
    # worker's id made that worker run a grant whose commands it could not send: the task
    # ran twice. The worker now runs only grants made for its own secret.
    marker = tmp_path / "runs.txt"
    spec = replace(
        JobSpec(
            "once", Schedule(ScheduleKind.MANUAL), main_task(("sh", "-c", f"echo run >> {marker}"))
        ),
        lease_ttl=timedelta(seconds=3),
    )
    scheduler = cluster.scheduler()
    cluster.worker()
    cluster.send(JOB, cmd.RegisterJob(spec=spec))
    assert events.wait_until(lambda log: bool(log.of_type(ev.JobRegistered, JOB)), 60)
    scheduler.stop()  # the forged poll is then folded before the worker's own polls
    worker_id = f"{cluster.settings.topic_prefix}w1"
    cluster.send(JOB, cmd.TriggerJob())
    forged = cmd.PollTasks(worker_id=worker_id, slots=1, poll_id="forged", lease_token="nope")  # noqa: S106
    cluster.send_raw(
        None,
        encode_command(
            cmd.Envelope(idem_key=f"poll:{worker_id}:forged", job_id="", command=forged)
        ),
        partition=partition_for(JOB, cluster.settings.partitions),
    )
    cluster.scheduler("s2")
    assert events.wait_until(lambda log: bool(log.of_type(ev.TaskSucceeded, JOB)), 90)
    claims = [r.event for r in events.of_type(ev.TaskClaimed, JOB)]
    assert claims[0].lease_token_digest == lease_digest("nope")  # type: ignore[union-attr]
    assert len(events.of_type(ev.LeaseExpired, JOB)) == 1  # the forged grant lapsed
    assert marker.read_text() == "run\n"  # run once, by the worker's own grant
