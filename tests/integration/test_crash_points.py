"""Invariant 6 at each point of the commit protocol: the scheduler dies (status 137, like
kill -9) with a batch's transaction produced but not committed, committed but not in RocksDB,
in RocksDB, and while restoring a partition. After a restart no state change is without its
events, no event_id has two contents, nothing is applied twice, and a replay of the command
log equals the live system (``cronlog replay --verify``). No wait for a first offset commit:
a crash before it must lose nothing either (the group then starts from the earliest offset)."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.model import JobSpec, Schedule, ScheduleKind, main_task
from services.cli.replay import ReplayOptions, run_replay
from services.scheduler.faults import POINTS
from tests.integration.harness import Cluster, EventLog, TopicReader
from tests.integration.helpers import wait_for
from topology.wire.codec import decode_event

pytestmark = pytest.mark.broker


def manual(name: str) -> JobSpec:
    return JobSpec(
        name=name, schedule=Schedule(ScheduleKind.MANUAL), task_specs=main_task(("true",))
    )


@pytest.mark.parametrize("point", POINTS)
def test_a_crash_at_each_point_of_a_batch_loses_no_event_and_applies_nothing_twice(
    point: str, cluster: Cluster, events: EventLog, tmp_path: Path
) -> None:
    sched = cluster.scheduler(CRONLOG_FAULT_CRASH_AT=point)
    # Sent at once, before any offset is committed: the first batch with something to write
    # is the one holding the registration (a Tick with nothing due writes nothing).
    cluster.send("victim", cmd.RegisterJob(spec=manual("victim")), idem_key="register-victim")
    # the batch holding the registration reaches the point: the process dies there
    wait_for(
        lambda: sched.popen is not None and sched.popen.poll() is not None,
        90,
        "the scheduler to crash at the fault point",
    )
    assert sched.popen is not None and sched.popen.returncode == 137, sched.log_tail()
    assert f"crashing at {point}" in sched.log_tail()

    restarted = cluster.scheduler()  # same instance id, no fault
    # the registration is re-delivered (its offset was never committed) and a trigger after it
    cluster.send("victim", cmd.TriggerJob(), idem_key="trigger-victim")
    assert events.wait_until(lambda log: log.of_type(ev.RunScheduled, "victim"), 90), (
        restarted.log_tail()
    )
    events.poll(2)

    mine = events.events("victim")
    by_id: dict[str, set[bytes]] = defaultdict(set)
    reader = TopicReader(cluster.settings, cluster.topics.run_events)
    reader.poll(5)
    reader.close()
    for raw in reader.records:
        record = decode_event(raw)
        if record.job_id == "victim":
            by_id[record.event_id].add(raw)
    assert [eid for eid, contents in by_id.items() if len(contents) > 1] == []
    registered = {e.event_id for e in mine if isinstance(e.event, ev.JobRegistered)}
    assert len(registered) == 1  # decided once; maybe delivered twice, identical
    assert not [e for e in mine if isinstance(e.event, ev.CommandRejected)]  # no unknown_job
    assert len({e.event.run_id for e in mine if isinstance(e.event, ev.RunScheduled)}) == 1

    restarted.stop()
    report = run_replay(cluster.settings, ReplayOptions(state_dir=tmp_path / "replay", verify=True))
    assert report.ok, report
    print(
        f"\n{point}: crash then restart; {len(mine)} events for the job, "
        f"{sum(len(c) for c in by_id.values())} distinct records, replay --verify ok "
        f"({datetime.now(UTC):%H:%M:%S})"
    )
