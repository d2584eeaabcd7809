"""Experiment 2: two schedulers in one group; kill -9 one; how long until its partitions fire again?

40 cron jobs every 2 s spread over 4 partitions, 1 worker. s1 and s2 share the group (static
membership ids differ). After both own partitions, the one owning more is SIGKILLed and not
restarted. For each tick after the kill, the lag from scheduled_for to the RunScheduled
record's timestamp is measured per partition; missed/skipped/double ticks are counted.

    PYTHONPATH=/work/main .venv/bin/python tests/chaos_findings/exp2_failover.py [tag] [observe_s]
"""

from __future__ import annotations

import collections
import re
import sys
import time
import uuid

from chaos_common import Exp, analyze, dump, missing_ticks, run_events
from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.model import JobSpec, Schedule, ScheduleKind
from topology.codec import encode_command
from topology.partitioning import partition_for

TAG = sys.argv[1] if len(sys.argv) > 1 else "brk3"
OBSERVE = float(sys.argv[2]) if len(sys.argv) > 2 else 150
exp = Exp(TAG)
exp.ensure()
jobs = [f"f{i:02d}" for i in range(40)]


def owned(svc) -> list[int] | None:
    lines = svc.grep("due index rebuilt")
    if not lines:
        return None
    return [int(x) for x in re.search(r"partitions \[([0-9, ]*)\]", lines[-1]).group(1).split(",")
            if x.strip()]


try:
    s1 = exp.scheduler("s1")
    time.sleep(3)
    s2 = exp.scheduler("s2")
    w1 = exp.worker("w1", CRONLOG_SLOTS="8")
    spec = JobSpec(name="every2", schedule=Schedule(ScheduleKind.CRON, "*/2 * * * * *"),
                   command=("true",))
    for j in jobs:
        exp.send_raw(j.encode(), encode_command(cmd.Envelope(uuid.uuid4().hex, j,
                                                             cmd.RegisterJob(spec))), flush=False)
    exp.producer().flush(10)
    t_reg = time.time()
    deadline = time.time() + 120
    while time.time() < deadline:
        o1, o2 = owned(s1), owned(s2)
        if o1 is not None and o2 is not None and set(o1) | set(o2) == {0, 1, 2, 3} \
                and not set(o1) & set(o2):
            break
        time.sleep(1)
    print("ownership before kill: s1", owned(s1), "s2", owned(s2), flush=True)
    time.sleep(10)
    victim, survivor = (s1, s2) if len(owned(s1) or []) >= len(owned(s2) or []) else (s2, s1)
    lost = owned(victim)
    t_kill = time.time()
    victim.kill9()
    print(f"kill -9 {victim.name} (partitions {lost}) at {t_kill:.3f}", flush=True)
    time.sleep(OBSERVE)
    t_end = time.time()
    print("survivor ownership now:", owned(survivor))
    exp.stop_all()
    recs = run_events(exp)
    an = analyze(recs)
    print(dump(an))
    lag = collections.defaultdict(list)
    for m, r, _raw in recs:
        if isinstance(r.event, ev.RunScheduled) and r.event.scheduled_for.timestamp() > t_kill:
            p = partition_for(r.job_id.encode(), exp.partitions)
            lag[p].append((r.event.scheduled_for.timestamp(), m.timestamp()[1] / 1000
                           - r.event.scheduled_for.timestamp(), r.event.trigger.value))
    for p in sorted(lag):
        v = sorted(lag[p])
        mx = max(x[1] for x in v)
        trig = collections.Counter(x[2] for x in v)
        first_ok = next((x[0] - t_kill for x in v if x[1] < 2), None)
        print(f"partition {p} ({'LOST' if p in lost else 'kept'}): {len(v)} runs after kill, "
              f"max lag {mx:.1f}s, triggers {dict(trig)}, first tick fired with <2s lag "
              f"{first_ok if first_ok is None else round(first_ok, 1)}s after kill")
    mt = missing_ticks(an, jobs, 2000, int((t_reg + 5) * 1000), int((t_end - 10) * 1000))
    print("missing ticks (no run, no skip):", sum(map(len, mt["missing"].values())),
          "skipped:", sum(map(len, mt["skipped"].values())))
    rb = [l for l in survivor.grep("due index rebuilt")]
    print("survivor due index rebuilds:", *rb[-3:], sep="\n  ")
finally:
    exp.stop_all()
