"""The dedupe horizon on a real broker (issue 25 item 1: "Done when", the reproducer).

A TriggerJob, 130 further commands of its job (more than the job record's window of 128
markers), then the same TriggerJob again, as an SDK user re-sends a timed-out command: one
run, one execution, no event_id with two contents. The same after a scheduler restart (its
RocksDB marker store kept) and after a restore from the changelog (its state dir wiped), and
a command issued longer ago than the horizon is refused ``idem_key_expired``. One cluster.
"""

from __future__ import annotations

import shutil
from collections import defaultdict
from datetime import UTC, datetime, timedelta

import pytest

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.idem import DEFAULT_HORIZON
from cronlog.model import JobSpec, RetryPolicy, Schedule, ScheduleKind, main_task
from cronlog.vocabulary import RejectReason
from cronlog_client import CommandProducer
from services.cli.replay import ReplayOptions, run_replay
from tests.integration.harness import Cluster, EventLog
from topology.wire.codec import decode_event

pytestmark = pytest.mark.broker
JOB = "reproducer"
SPEC = JobSpec(
    name=JOB,
    schedule=Schedule(kind=ScheduleKind.MANUAL),
    task_specs=main_task(("true",)),
    retry_policy=RetryPolicy(max_attempts=1),
)
WAIT_S = 90


def _answered(events: EventLog, idem_key: str) -> bool:
    return any(e.idem_key == idem_key for e in events.events(JOB))


def _settle(producer: CommandProducer, events: EventLog, probe: str) -> None:
    """Send a command that always answers (a resume of an active job: already_in_state) and
    wait for its answer: everything sent before it on the job's partition was folded."""
    producer.send(JOB, cmd.ResumeJob(), idem_key=probe)
    assert events.wait_until(lambda log: _answered(log, probe), WAIT_S), f"no answer to {probe}"


def _one_run_one_execution(events: EventLog, run_id: str) -> None:
    mine = events.events(JOB)
    assert [e.event.run_id for e in mine if isinstance(e.event, ev.RunScheduled)] == [run_id]
    assert sum(isinstance(e.event, ev.TaskClaimed) for e in mine) == 1
    assert sum(isinstance(e.event, ev.RunSucceeded) for e in mine) == 1
    contents: dict[str, set[bytes]] = defaultdict(set)
    for raw in events.records:
        contents[decode_event(raw).event_id].add(raw)
    assert {i: c for i, c in contents.items() if len(c) > 1} == {}


def test_a_trigger_re_sent_after_130_commands_restart_and_restore_runs_once(
    cluster: Cluster, events: EventLog
) -> None:
    scheduler = cluster.scheduler()
    cluster.worker()
    with CommandProducer(cluster.settings) as producer:
        producer.register(JOB, SPEC)
        issued = datetime.now(UTC)  # the first try's; every re-send carries it
        ref = producer.trigger(JOB, idem_key="deploy-1", issued_at=issued)
        assert events.wait_until(lambda log: bool(log.of_type(ev.RunSucceeded, JOB)), WAIT_S), (
            "the trigger's run did not succeed"
        )
        for i in range(130):
            producer.send(JOB, cmd.PauseJob() if i % 2 == 0 else cmd.ResumeJob())
        _settle(producer, events, "probe-churn")

        def re_send(probe: str) -> None:
            producer.send(JOB, cmd.TriggerJob(), idem_key="deploy-1", issued_at=issued)
            _settle(producer, events, probe)
            _one_run_one_execution(events, ref.run_id)

        re_send("probe-live")
        scheduler.stop()  # a restart: the RocksDB store, markers included, is kept
        scheduler = cluster.scheduler()
        re_send("probe-restart")
        scheduler.stop()  # a restore: the state dir wiped, everything read from the changelog
        shutil.rmtree(cluster.tmp / "state-s1")
        cluster.scheduler()
        re_send("probe-restore")

        long_ago = datetime.now(UTC) - DEFAULT_HORIZON - timedelta(hours=1)
        producer.send(JOB, cmd.TriggerJob(), idem_key="stale-1", issued_at=long_ago)
        assert events.wait_until(lambda log: _answered(log, "stale-1"), WAIT_S)
    [refusal] = [e.event for e in events.events(JOB) if e.idem_key == "stale-1"]
    assert isinstance(refusal, ev.CommandRejected)
    assert refusal.reason is RejectReason.IDEM_KEY_EXPIRED
    assert "horizon" in refusal.detail
    _one_run_one_execution(events, ref.run_id)  # the stale trigger started nothing
    cluster.stop_all()  # then the log folded again from offset 0 agrees with the live fold,
    # job records and dedupe markers alike (the run: --verify failed, rc 1)
    report = run_replay(cluster.settings, ReplayOptions(state_dir=cluster.tmp / "r", verify=True))
    assert report.ok and [p.state_detail for p in report.partitions] == [None] * 4
