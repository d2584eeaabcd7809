"""Failover without leader election: kill -9 one of two schedulers of one consumer group; the
other takes its partitions over (after the session timeout: static membership keeps them for
the dead member until then), recovers them, rebuilds the due index and fires on. No tick of
the failover is lost or fired twice, judged from run-events alone.
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta

from cronlog import commands as cmd
from tests.chaos.audit import JobPlan, audit_run
from tests.chaos.harness import owned_partitions, read_all
from tests.integration.harness import Cluster
from tests.integration.helpers import cron_job, wait_for
from topology.kafka.partitioning import partition_for

SESSION_S = 6
"""The scheduler's session timeout here (the broker's minimum, group.min.session.timeout.ms):
how long the group waits before it gives a dead member's partitions to the survivor."""


def test_kill9_of_a_scheduler_loses_and_doubles_no_tick(cluster: Cluster) -> None:
    n = cluster.settings.partitions
    env = {"CRONLOG_SESSION_TIMEOUT_S": str(SESSION_S)}
    s1 = cluster.scheduler("s1", **env)
    s2 = cluster.scheduler("s2", **env)
    wait_for(
        lambda: (
            set(owned_partitions(s1)) | set(owned_partitions(s2)) == set(range(n))
            and owned_partitions(s1)
            and owned_partitions(s2)
            and not set(owned_partitions(s1)) & set(owned_partitions(s2))
        ),
        120,
        "both schedulers to own half of the partitions",
    )
    jobs = [f"fo{i:02d}" for i in range(24)]
    spec = cron_job("* * * * * *")  # every second: the gap of a failover is plain to see
    for job in jobs:
        cluster.send(job, cmd.RegisterJob(spec=spec), idem_key=f"register:{job}:{uuid.uuid4().hex}")
    t_registered = datetime.now(UTC)
    time.sleep(8)
    victim, survivor = (s1, s2) if owned_partitions(s1) else (s2, s1)
    lost = owned_partitions(victim)
    t_kill = time.time()
    victim.kill9()
    wait_for(
        lambda: sorted(owned_partitions(survivor)) == list(range(n)),
        120,
        "the survivor to own every partition",
    )
    time.sleep(8)
    survivor.stop()  # SIGTERM: faust commits on the way out
    t_end = datetime.now(UTC)

    records = read_all(cluster.settings, cluster.topics.run_events)
    firsts = [
        min(
            (
                r.timestamp_ms
                for r in records
                if r.partition == p and r.timestamp_ms > t_kill * 1000
            ),
            default=None,
        )
        for p in lost
    ]
    assert None not in firsts, f"no run-event on a lost partition after the kill: {firsts}"
    failover_s = (max(f for f in firsts if f is not None) - t_kill * 1000) / 1000
    print(
        f"failover: kill -9 of {victim.log_path.stem} (partitions {lost}) → first "
        f"run-event on every one of them after {failover_s:.1f} s "
        f"(session timeout {SESSION_S} s)"
    )
    assert {partition_for(j.encode(), n) for j in jobs} >= set(lost)
    window = (t_registered + timedelta(seconds=5), t_end - timedelta(seconds=3))
    # the checked ticks span the kill and the takeover (however fast it was)
    assert window[0].timestamp() < t_kill and window[1].timestamp() > t_kill + failover_s
    audit = audit_run(records, [], [JobPlan(j, 1) for j in jobs], window, t_end, [])
    assert audit.ticks_expected >= 24 * round((window[1] - window[0]).total_seconds() - 1)
    assert audit.failures() == dict.fromkeys(audit.failures(), 0), audit.examples
