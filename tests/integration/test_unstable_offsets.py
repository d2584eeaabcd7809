"""A partition whose committed offset stays unstable for longer than a minute: a previous owner
died inside a transaction that holds the partition's consumed offset, and that producer's
``transaction.timeout.ms`` is 70 s (any client may set up to the broker's 15 minutes).

The new scheduler must not restore that partition before the transaction ends (its commands
would be folded twice), and must not die of the wait: the old restore asked once with a 60 s
timeout, then exited and restarted into the same wait ("Failed to get committed offsets: Local:
Timed out" on every start, each start another rebalance). The partitions assigned with it wait
too (librdkafka fetches an assignment's offsets in one request: services/scheduler/stable.py).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.model import JobSpec, Schedule, ScheduleKind, main_task
from tests.integration.harness import ROOT, Cluster, EventLog
from tests.integration.helpers import wait_for
from topology.kafka.partitioning import partition_for

pytestmark = [pytest.mark.broker, pytest.mark.slow, pytest.mark.timeout(300)]
TXN_TIMEOUT_S = 70.0
"""The dead owner's transaction timeout: past the old restore's one 60 s ask."""


def _job(n: int, on_zero: bool) -> str:
    """Return a job id whose partition (of ``n``) is 0, or is not."""
    return next(
        j for j in (f"job-{i}" for i in range(1000)) if (partition_for(j, n) == 0) == on_zero
    )


def _leave_open_transaction(
    cluster: Cluster, partition: int, timeout_s: float = TXN_TIMEOUT_S
) -> Producer:
    """Begin a transaction of another transactional.id that sends the scheduler group's offset
    of ``partition``, and leave it open (as a producer killed before its commit would)."""
    group = cluster.topics.scheduler_app
    meta_consumer = Consumer(cluster.settings.consumer_config(group))
    producer = Producer(
        cluster.settings.producer_config(
            **{
                "transactional.id": f"dead-owner-{uuid.uuid4().hex[:6]}",
                "transaction.timeout.ms": int(timeout_s * 1000),
            }
        )
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.send_offsets_to_transaction(
        [TopicPartition(cluster.topics.commands, partition, 0)],
        meta_consumer.consumer_group_metadata(),
        30,
    )
    meta_consumer.close()
    return producer


def manual(name: str) -> JobSpec:
    return JobSpec(
        name=name, schedule=Schedule(ScheduleKind.MANUAL), task_specs=main_task(("true",))
    )


def test_an_unstable_partition_waits_for_the_transaction_and_the_scheduler_lives(
    cluster: Cluster, events: EventLog
) -> None:
    n = cluster.settings.partitions
    stuck, free = _job(n, True), _job(n, False)
    dead_owner = _leave_open_transaction(cluster, 0)
    opened = time.monotonic()
    sched = cluster.scheduler()
    cluster.send(stuck, cmd.RegisterJob(spec=manual(stuck)), idem_key=f"reg-{stuck}")
    cluster.send(free, cmd.RegisterJob(spec=manual(free)), idem_key=f"reg-{free}")

    # partition 0 waits, and says so
    time.sleep(20)
    assert not events.of_type(ev.JobRegistered, stuck), "partition 0 restored while unstable"
    assert "action=offsets_unstable partition=0" in sched.log_tail(400)

    # the dead owner's transaction times out (abort): partition 0 is restored and folds
    assert events.wait_until(
        lambda log: log.of_type(ev.JobRegistered, stuck), TXN_TIMEOUT_S + 60
    ), sched.log_tail()
    waited = time.monotonic() - opened
    assert waited > 50, f"partition 0 folded after {waited:.0f}s, before the transaction ended"
    assert sched.popen is not None and sched.popen.poll() is None, sched.log_tail()
    tail = sched.log_tail(400)
    assert "action=offsets_stable partition=0" in tail
    assert len(events.of_type(ev.JobRegistered, stuck)) == 1
    assert events.wait_until(lambda log: log.of_type(ev.JobRegistered, free), 30)
    dead_owner.flush(0)


HELD = re.compile(r"action=offsets_unstable_held partition=0 .*?transactional_id=(\S+).*")


def _doctor(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP": cluster.settings.bootstrap,
        "CRONLOG_TOPIC_PREFIX": cluster.settings.topic_prefix,
    }
    return subprocess.run(
        [sys.executable, "-m", "services.cli", "doctor", "transactions", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_scheduler_names_the_transaction_holding_it_and_the_doctor_ends_it(
    cluster: Cluster, events: EventLog
) -> None:
    """A dead owner's transaction with the broker's longest timeout (15 minutes) holds
    partition 0: the scheduler logs its transactional.id, producer and the command that ends
    it; ``cronlog doctor transactions`` finds it (exit 1) and, with --abort, ends it through
    Kafka's own tool (forceTerminateTransaction); the partition then folds, long before the
    transaction's own timeout would have ended it."""
    n = cluster.settings.partitions
    stuck = _job(n, True)
    dead_owner = _leave_open_transaction(cluster, 0, timeout_s=900.0)
    sched = cluster.scheduler(CRONLOG_UNSTABLE_REPORT_S="3")
    cluster.send(stuck, cmd.RegisterJob(spec=manual(stuck)), idem_key=f"reg-{stuck}")
    held = wait_for(
        lambda: HELD.search(sched.log_path.read_text(errors="replace")), 120, "the holder named"
    )
    tid = held[1].strip('"')
    assert tid.startswith("dead-owner-")
    line = held[0]
    assert "producer_id=" in line and "open_for=" in line
    assert f'command="cronlog doctor transactions --abort --transactional-id {tid}"' in line
    assert "forceTerminateTransaction --transactionalId" in line

    found = _doctor(cluster, "--older-than", "1", "--json")
    assert found.returncode == 1, found.stderr
    rows = [r for r in json.loads(found.stdout) if r.get("transactional_id") == tid]
    assert len(rows) == 1, found.stdout
    assert rows[0]["kind"] == "open" and rows[0]["timeout_s"] == 900
    assert any(p.startswith("__consumer_offsets-") for p in rows[0]["partitions"])
    assert not events.of_type(ev.JobRegistered, stuck)

    ended = _doctor(cluster, "--abort", "--transactional-id", tid)
    assert ended.returncode == 0, ended.stdout + ended.stderr
    assert "ended" in ended.stdout
    assert events.wait_until(lambda log: log.of_type(ev.JobRegistered, stuck), 90), sched.log_tail()
    assert "action=offsets_stable partition=0" in sched.log_tail(400)
    assert sched.popen is not None and sched.popen.poll() is None
    dead_owner.flush(0)
