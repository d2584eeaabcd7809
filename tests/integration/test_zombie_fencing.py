"""A zombie scheduler writes nothing visible. Scheduler A is frozen (SIGSTOP of its process
group) in the middle of folding a burst of commands, past its session timeout; scheduler B
(another instance id) takes every partition over and folds on; A is thawed (SIGCONT) and
finishes the batch it was folding: its transaction must not commit (the group has moved on),
so no run-event A decided after the takeover is visible to a read_committed reader. Judged
from run-events alone (nothing redelivered, no event_id with two contents, no tick lost or
fired twice) and by ``cronlog replay --verify``."""

from __future__ import annotations

import os
import re
import signal
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from confluent_kafka import Producer

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.model import JobSpec, Schedule, ScheduleKind, main_task
from services.cli.replay import ReplayOptions, run_replay
from tests.chaos.audit import JobPlan, audit_run
from tests.chaos.harness import owned_partitions, read_all
from tests.integration.harness import Cluster, Proc
from tests.integration.helpers import cron_job, wait_for
from topology.kafka.partitioning import partition_for
from topology.wire.codec import Codec, encode_command

pytestmark = [pytest.mark.broker, pytest.mark.timeout(360)]

SESSION_S = 6
"""The schedulers' session timeout (the broker's floor): how long a frozen A keeps its
partitions."""
BURST = 6000
"""Manual jobs registered in one burst just before A is frozen: A is folding them then."""
ENV = {
    "CRONLOG_SESSION_TIMEOUT_S": str(SESSION_S),
    "CRONLOG_BATCH_SIZE": "1000",
    "CRONLOG_AFTER_RELAY": "false",
}


def _log_since(proc: Proc, start: int) -> str:
    return proc.log_path.read_bytes()[start:].decode(errors="replace")


def _owned_after(proc: Proc, start: int) -> list[int] | None:
    """The partitions of the last ``partitions_owned`` line written after byte ``start``."""
    found = re.findall(
        r"action=partitions_owned partitions=\[([0-9, ]*)\]", _log_since(proc, start)
    )
    return [int(x) for x in found[-1].split(",") if x.strip()] if found else None


def _burst(cluster: Cluster) -> None:
    """Register BURST manual jobs with one producer, as fast as it goes."""
    producer = Producer(cluster.settings.producer_config(**{"linger.ms": 20}))
    spec = JobSpec(
        name="burst", schedule=Schedule(ScheduleKind.MANUAL), task_specs=main_task(("true",))
    )
    for i in range(BURST):
        job = f"m{i:05d}"
        value = encode_command(
            cmd.Envelope(idem_key=f"register:{job}", job_id=job, command=cmd.RegisterJob(spec=spec))
        )
        producer.produce(cluster.topics.commands, value, job.encode())
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0


@pytest.mark.parametrize("where", ["mid_fold", "before_commit"])
def test_a_frozen_scheduler_writes_nothing_visible_after_the_takeover(
    where: str, cluster: Cluster, tmp_path: Path
) -> None:
    """``mid_fold``: A is frozen from outside while it folds a burst of registrations (its
    transaction not begun, its fetch queue full). ``before_commit``: A freezes itself with a
    transaction open, its output produced, offsets not sent (crash point, action ``stop``)."""
    n = cluster.settings.partitions
    fault = {
        "CRONLOG_FAULT_CRASH_AT": "before_commit",
        "CRONLOG_FAULT_ACTION": "stop",
        "CRONLOG_FAULT_AFTER_BATCHES": "8",  # a few seconds of firing
    }
    a = cluster.scheduler("a", **ENV, **(fault if where == "before_commit" else {}))
    wait_for(lambda: owned_partitions(a) == list(range(n)), 90, "A to own every partition")
    jobs = [f"z{i:02d}" for i in range(12)]
    assert {partition_for(j.encode(), n) for j in jobs} == set(range(n))
    for job in jobs:
        cluster.send(job, cmd.RegisterJob(spec=cron_job("* * * * * *")), f"register:{job}")
    t_registered = datetime.now(UTC)
    assert a.popen is not None
    if where == "mid_fold":
        time.sleep(4)
        _burst(cluster)
        time.sleep(0.5)  # A folds the burst now, a thousand commands a batch
        os.killpg(a.popen.pid, signal.SIGSTOP)
    else:
        wait_for(lambda: "fault injection: stopping" in a.log_tail(), 60, "A to freeze")
    t_stop = time.monotonic()
    time.sleep(SESSION_S + 2)

    b = cluster.scheduler("b", **ENV)
    wait_for(lambda: owned_partitions(b) == list(range(n)), 90, "B to own every partition")
    t_b_owns = time.monotonic()
    fired_after = datetime.now(UTC)
    wait_for(
        lambda: (
            _fired_since(cluster, fired_after) >= set(jobs)
            and (where != "mid_fold" or _registered(cluster) == BURST)
        ),
        60,
        "B's output (every job fired, the whole burst registered) to be visible",
        every=1,
    )
    t_visible = time.monotonic()

    a_log_at_cont = a.log_path.stat().st_size
    os.killpg(a.popen.pid, signal.SIGCONT)
    t_cont = time.monotonic()
    outcome = wait_for(lambda: _a_outcome(a, a_log_at_cont), 60, "A to rejoin (or exit)")
    t_outcome = time.monotonic()
    time.sleep(6)  # both fold on (or B alone)
    zombie_log = _log_since(a, a_log_at_cont)
    a.stop()
    b.stop()
    t_end = datetime.now(UTC)

    records = read_all(cluster.settings, cluster.topics.run_events)
    audit = audit_run(
        records,
        [],
        [JobPlan(j, 1) for j in jobs],
        (t_registered + timedelta(seconds=3), t_end - timedelta(seconds=3)),
        t_end,
        [],
    )
    assert audit.failures() == dict.fromkeys(audit.failures(), 0), audit.examples
    assert audit.redelivered == 0  # one transaction per batch: no event twice, not even alike
    # Either way the thawed A wrote nothing visible (the audit above) and rejoined the group
    # with a share: it is a zombie only until it notices.
    assert outcome.startswith("rejoined"), (outcome, zombie_log)
    renewed = "action=producer_renewed" in zombie_log  # its producer was fenced
    if where == "before_commit":
        # the coordinator aborted A's open transaction when it timed out (transaction.timeout)
        # and bumped its producer epoch: the thawed A's producer is fenced, and A starts a new
        # one (Kafka Streams closes a fenced task "as a zombie" and rejoins the same way)
        assert renewed, zombie_log
    else:
        # A tried to commit the batch it was folding: the group refused its offsets (its
        # member is gone), the transaction was aborted, and A rejoined; frozen inside a
        # transaction instead (a few % of the time) its producer was fenced as above
        assert "code=UNKNOWN_MEMBER_ID" in zombie_log or renewed, (outcome, zombie_log)
    report = run_replay(cluster.settings, ReplayOptions(state_dir=tmp_path / "replay", verify=True))
    assert report.ok, report
    print(
        f"\nzombie ({where}): A frozen; B started {SESSION_S + 2} s later, owned every "
        f"partition {t_b_owns - t_stop:.1f} s after the freeze, its output visible after "
        f"{t_visible - t_stop:.1f} s; SIGCONT of A: {outcome} {t_outcome - t_cont:.1f} s "
        f"later; {audit.ticks_run}/{audit.ticks_expected} ticks run, {audit.events} events, "
        f"none redelivered; replay --verify ok\n--- A after SIGCONT ---\n"
        + "\n".join(ln for ln in zombie_log.splitlines() if "action=" in ln or "fault" in ln)[
            -3000:
        ]
    )


def _fired_since(cluster: Cluster, since: datetime) -> set[str]:
    codec = Codec()
    return {
        e.job_id
        for r in read_all(cluster.settings, cluster.topics.run_events)
        if isinstance((e := codec.decode_event(r.value)).event, ev.RunScheduled)
        and e.event.scheduled_for > since
    }


def _registered(cluster: Cluster) -> int:
    codec = Codec()
    return len(
        {
            e.job_id
            for r in read_all(cluster.settings, cluster.topics.run_events)
            if (e := codec.decode_event(r.value)).job_id.startswith("m")
            and isinstance(e.event, ev.JobRegistered)
        }
    )


def _a_outcome(a: Proc, start: int) -> str | None:
    """What the thawed A did: rejoined the group with a share (or exited: a finding)."""
    assert a.popen is not None
    if a.popen.poll() is not None:
        return f"exited with status {a.popen.returncode}"
    owned = _owned_after(a, start)
    return f"rejoined owning {owned}" if owned else None
