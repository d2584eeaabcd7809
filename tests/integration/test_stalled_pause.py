"""A pause folded after a stall of the fold still decides the ticks due before it.

The chaos run on an overloaded box: a scheduler's fold stalled (a blocked transactional call)
for a minute; its ticker, gated on the fold, appended no Tick meanwhile; the PauseJobs came
next in the log, and the ticks due during the stall got no RunScheduled, no RunQueued and no
TickSkipped (6,826 of them). Here the stall is a SIGSTOP of the only scheduler.
"""

from __future__ import annotations

import os
import signal
import time
from datetime import timedelta

import pytest

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.model import JobSpec, Schedule, ScheduleKind, main_task
from tests.integration.harness import Cluster, EventLog

pytestmark = pytest.mark.broker
JOB = "stalled"
STALL_S = 10.0
"""How long the scheduler is stopped before the pause is sent (the scenario, not a check)."""


def _decided(events: EventLog) -> set:
    kinds = ev.RunScheduled | ev.RunQueued | ev.TickSkipped
    return {e.event.scheduled_for for e in events.events(JOB) if isinstance(e.event, kinds)}


def test_ticks_due_while_the_fold_stalled_are_decided_by_the_pause(
    cluster: Cluster, events: EventLog
) -> None:
    scheduler = cluster.scheduler("s1")
    spec = JobSpec(
        "stalled",
        Schedule(ScheduleKind.EVERY, interval=timedelta(seconds=2)),
        main_task(("true",)),
    )
    cluster.send(JOB, cmd.RegisterJob(spec=spec))
    assert events.wait_until(lambda log: len(_decided(log)) >= 2, 120), "no tick fired"
    assert scheduler.popen is not None
    os.kill(scheduler.popen.pid, signal.SIGSTOP)
    try:
        time.sleep(1)  # what it had in flight lands before the stall is measured
        events.poll(1.0)
        before = max(_decided(events))
        time.sleep(STALL_S)
        cluster.send(JOB, cmd.PauseJob())
        time.sleep(0.5)  # the pause is appended before the ticker can run again
    finally:
        os.kill(scheduler.popen.pid, signal.SIGCONT)
    assert events.wait_until(lambda log: bool(log.of_type(ev.JobPaused, JOB)), 120), "no pause"
    paused_at = events.of_type(ev.JobPaused, JOB)[0].at
    owed = []
    t = before + timedelta(seconds=2)
    while t < paused_at:
        owed.append(t)
        t += timedelta(seconds=2)
    assert len(owed) >= 3, (before, paused_at)  # the stall left ticks to decide
    assert set(owed) <= _decided(events), sorted(set(owed) - _decided(events))
