"""Experiment 1c: the realistic form of 1b -- no disk is wiped, machines just die.

Two schedulers share the group (standby replicas = 1, the default). 3000 once jobs fire at the
same instant. The owner of half of them is SIGKILLed the moment their events are on
run-events (its RocksDB writes done or in progress, changelog messages in flight), restarted
with the same state dir (it folds on, commits past the Tick, never re-puts the records), and
25 s later dies for good. The survivor takes the partitions over from the changelog (its standby copy), which
lacks the records the victim wrote locally but never got acked into the changelog; it fires
those once-ticks again under a new Tick: a second RunScheduled/TaskReady for the same
(job_id, scheduled_for), with a different event_id.

    PYTHONPATH=/work/main .venv/bin/python tests/chaos_findings/exp1c_failover_refires_ticks.py [tag] [N]
"""

from __future__ import annotations

import collections
import re
import sys
import time
import uuid
from datetime import UTC, datetime

from confluent_kafka import Consumer, TopicPartition

from chaos_common import Exp, run_events
from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.model import JobSpec, Schedule, ScheduleKind
from topology.codec import encode_command
from topology.partitioning import partition_for

TAG = sys.argv[1] if len(sys.argv) > 1 else "brk27"
N = int(sys.argv[2]) if len(sys.argv) > 2 else 3000
exp = Exp(TAG)
exp.ensure()


def owned(svc) -> list[int]:
    lines = svc.grep("due index rebuilt")
    if not lines:
        return []
    return [int(x) for x in re.search(r"partitions \[([0-9, ]*)\]", lines[-1]).group(1).split(",")
            if x.strip()]


def hw(c: Consumer, topic: str, parts) -> int:
    return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=5, cached=False)[1]
               for p in parts)


try:
    s1 = exp.scheduler("s1")
    time.sleep(3)
    s2 = exp.scheduler("s2")
    deadline = time.time() + 90
    while time.time() < deadline:
        if set(owned(s1)) | set(owned(s2)) == {0, 1, 2, 3} and not set(owned(s1)) & set(owned(s2)):
            break
        time.sleep(1)
    time.sleep(5)
    print("ownership: s1", owned(s1), "s2", owned(s2), flush=True)
    victim, survivor = (s1, s2) if len(owned(s1)) >= len(owned(s2)) else (s2, s1)
    vparts = owned(victim)
    run_at = datetime.fromtimestamp(int(time.time()) + 20, UTC)
    spec = JobSpec(name="once", schedule=Schedule(ScheduleKind.ONCE, run_at=run_at),
                   command=("true",))
    jobs = [f"o{i:05d}" for i in range(N)]
    vjobs = [j for j in jobs if partition_for(j.encode(), 4) in vparts]
    for j in jobs:
        exp.send_raw(j.encode(), encode_command(cmd.Envelope(uuid.uuid4().hex, j,
                                                             cmd.RegisterJob(spec))), flush=False)
    exp.producer().flush(30)
    c = Consumer(exp.settings.consumer_config("chaos-hw"))
    target = 3 * len(vjobs)
    while hw(c, exp.topics.run_events, vparts) < target:
        time.sleep(0.003)
    victim.kill9()
    print(f"kill -9 {victim.name} (partitions {vparts}, {len(vjobs)} of the jobs) once their "
          f"{target} events were on run-events", flush=True)
    # an ordinary restart on the same machine (same state dir, same instance id) ...
    victim = exp.scheduler(victim.name)
    time.sleep(25)
    # ... and later that machine is lost for good: the survivor takes its partitions over
    victim.kill9()
    t_kill = time.time()
    print(f"restarted {victim.name} with its state dir, ran 25 s, then killed it for good",
          flush=True)
    while time.time() - t_kill < 90 and not set(vparts) <= set(owned(survivor)):
        time.sleep(1)
    print(f"{survivor.name} owns {owned(survivor)} {time.time() - t_kill:.0f}s after the kill",
          flush=True)
    time.sleep(15)
    survivor.stop()
    recs = run_events(exp)
    per = collections.defaultdict(set)
    for _m, r, _ in recs:
        if isinstance(r.event, ev.RunScheduled):
            per[(r.job_id, r.event.run_id)].add(r.event_id)
    doubles = {k: v for k, v in per.items() if len(v) > 1}
    print(f"once jobs with a RunScheduled: {len(per)}/{N}; with two RunScheduled (distinct "
          f"event_ids) for the same tick: {len(doubles)}")
    for k, v in list(doubles.items())[:3]:
        print("  ", k, sorted(v))
finally:
    exp.stop_all()
