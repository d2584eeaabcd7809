"""Priorities on a real broker: behind a backlog of low-priority tasks a high-priority one is
granted at once, not after the backlog (cronlog.priority); the figures are printed."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import timedelta

import pytest
from confluent_kafka import Producer

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.model import JobSpec, Schedule, ScheduleKind
from tests.integration.harness import Cluster, EventLog
from topology.codec import encode_command

pytestmark = [pytest.mark.broker, pytest.mark.timeout(300)]
N = 200
BASE = JobSpec("p", Schedule(ScheduleKind.MANUAL), ("sh", "-c", "sleep 0.3"))


def _send_all(cluster: Cluster, commands: list[tuple[str, cmd.Command]]) -> None:
    """Produce many commands with one producer (``Cluster.send`` makes one per command)."""
    producer = Producer(cluster.settings.producer_config())
    for job, command in commands:
        env = cmd.Envelope(idem_key=uuid.uuid4().hex, job_id=job, command=command)
        producer.produce(cluster.topics.commands, key=job.encode(), value=encode_command(env))
        producer.poll(0)
    assert producer.flush(30) == 0


def test_a_high_priority_task_is_granted_before_the_low_backlog(
    cluster: Cluster, events: EventLog
) -> None:
    low = [f"low-{i:03d}" for i in range(N)]
    _send_all(cluster, [(job, cmd.RegisterJob(spec=replace(BASE, priority=-1))) for job in low])
    cluster.send("high", cmd.RegisterJob(spec=replace(BASE, priority=5)))
    cluster.scheduler()
    assert events.wait_until(lambda log: len(log.of_type(ev.JobRegistered)) == N + 1, 120)
    _send_all(cluster, [(job, cmd.TriggerJob()) for job in low])
    cluster.worker()  # 4 slots: the backlog drains at ~13 tasks a second
    assert events.wait_until(lambda log: len(log.of_type(ev.TaskClaimed)) >= 8, 120)
    cluster.send("high", cmd.TriggerJob())
    assert events.wait_until(lambda log: bool(log.of_type(ev.TaskClaimed, "high")), 120)
    (high,) = events.of_type(ev.TaskClaimed, "high")
    (ready,) = events.of_type(ev.RunScheduled, "high")
    before = [r for r in events.of_type(ev.TaskClaimed) if r.job_id != "high" and r.at <= high.at]
    waited = high.at - ready.at
    print(
        f"\n[figures] high-priority task granted {waited.total_seconds():.2f} s after its "
        f"trigger, behind {len(before)} of {N} low-priority grants"
    )
    assert len(before) < N // 2  # without classes it would wait for most of the backlog
    assert waited < timedelta(seconds=30)
