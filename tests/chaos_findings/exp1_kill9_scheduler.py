"""Experiment 1: kill -9 the only scheduler at random moments under load, restart, repeat.

200 cron jobs every 2 s (`*/2 * * * * *`), 2 workers; the scheduler is SIGKILLed N times at
random moments and restarted after a random pause. Then run-events is checked for: ticks with
more than one RunScheduled, ticks with no run (and TickSkipped), attempts with two terminal
events, event_ids repeated with different content.

    PYTHONPATH=/work/main /work/main/.venv/bin/python tests/chaos_findings/exp1_kill9_scheduler.py [tag] [kills]
"""

from __future__ import annotations

import random
import sys
import time
import uuid
from datetime import timedelta

from chaos_common import Exp, analyze, dump, missing_ticks, run_events
from cronlog import commands as cmd
from cronlog.model import JobSpec, RetryPolicy, Schedule, ScheduleKind

TAG = sys.argv[1] if len(sys.argv) > 1 else "brk1"
KILLS = int(sys.argv[2]) if len(sys.argv) > 2 else 6
JOBS = int(sys.argv[3]) if len(sys.argv) > 3 else 200
PERIOD = 2
SEED = int(sys.argv[4]) if len(sys.argv) > 4 else 1
random.seed(SEED)

exp = Exp(TAG)
exp.ensure()
jobs = [f"j{i:03d}" for i in range(JOBS)]
try:
    s1 = exp.scheduler("s1")
    w1 = exp.worker("w1", CRONLOG_SLOTS="8")
    w2 = exp.worker("w2", CRONLOG_SLOTS="8")
    time.sleep(12)
    spec = JobSpec(name="every2", schedule=Schedule(ScheduleKind.CRON, f"*/{PERIOD} * * * * *"),
                   command=("true",), retry_policy=RetryPolicy(max_attempts=3,
                                                               backoff=timedelta(seconds=1)),
                   lease_ttl=timedelta(seconds=10))
    for j in jobs:
        exp.send_raw(j.encode(), __import__("topology.codec", fromlist=["x"]).encode_command(
            cmd.Envelope(uuid.uuid4().hex, j, cmd.RegisterJob(spec))), flush=False)
    exp.producer().flush(10)
    t_registered = time.time()
    print("registered", JOBS, "jobs at", t_registered, flush=True)
    time.sleep(10)
    kills = []
    for k in range(KILLS):
        time.sleep(random.uniform(3, 15))
        t = time.time()
        s1.kill9()
        down = random.uniform(0, 6)
        print(f"kill #{k} at {t:.3f}, down {down:.1f}s", flush=True)
        kills.append((t, down))
        time.sleep(down)
        s1 = exp.scheduler("s1")
    time.sleep(25)
    t_end = time.time()
    print("stopping at", t_end, flush=True)
    # stop ticking first so the window end is clean
    exp.stop_all()
    recs = run_events(exp)
    an = analyze(recs)
    print(dump(an))
    # the window: from the first tick after registration+3s to 10 s before the end
    t0 = int((t_registered + 3) * 1000)
    t1 = int((t_end - 10) * 1000)
    mt = missing_ticks(an, jobs, PERIOD * 1000, t0, t1)
    nmiss = sum(len(v) for v in mt["missing"].values())
    nskip = sum(len(v) for v in mt["skipped"].values())
    print(f"window {t0}..{t1}: expected {(t1 - t0) // (PERIOD * 1000) * JOBS} ticks, "
          f"missing (no run, no skip) {nmiss}, skipped {nskip}")
    if nmiss:
        sample = sorted({t for v in mt["missing"].values() for t in v})
        print("missing tick instants:", sample[:40])
    if nskip:
        print("skipped tick instants:", sorted({t for v in mt["skipped"].values() for t in v})[:40])
    print("kills:", [(round(t, 3), round(d, 1)) for t, d in kills])
finally:
    exp.stop_all()
