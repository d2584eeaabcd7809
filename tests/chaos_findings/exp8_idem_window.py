"""Experiment 8: Invariant 5 only holds inside a 128-command window per job.

A job that runs every second (one worker completing its runs) applies a ClaimTask and a
CompleteTask per run, each leaving a dedupe marker; after ~64 runs the marker of an earlier
TriggerJob is gone. The same TriggerJob (same idem_key) re-delivered then -- a producer retry,
an outbox relay replaying -- starts a second run with the same run_id; that run's ClaimTask
carries the idem_key of the first run's claim (``claim:<run_id>:<task>:<attempt>:<worker>``),
which is now applied, so the worker gets no answer and the run stays ready.

    PYTHONPATH=/work/main .venv/bin/python tests/chaos_findings/exp8_idem_window.py [tag] [wait_s]
"""

from __future__ import annotations

import sys
import time

from chaos_common import Exp, analyze, run_events
from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.model import JobSpec, Schedule, ScheduleKind

TAG = sys.argv[1] if len(sys.argv) > 1 else "brk80"
WAIT = float(sys.argv[2]) if len(sys.argv) > 2 else 80
exp = Exp(TAG)
exp.ensure()
try:
    s1 = exp.scheduler("s1")
    w1 = exp.worker("w1", CRONLOG_SLOTS="4")
    time.sleep(10)
    spec = JobSpec(name="every1", schedule=Schedule(ScheduleKind.CRON, "* * * * * *"),
                   command=("true",))
    exp.send(cmd.Envelope("reg-1", "busy", cmd.RegisterJob(spec)))
    time.sleep(2)
    exp.send(cmd.Envelope("trigger-K", "busy", cmd.TriggerJob()))
    print("sent TriggerJob idem_key=trigger-K", flush=True)
    time.sleep(WAIT)
    exp.send(cmd.Envelope("trigger-K", "busy", cmd.TriggerJob()))
    print(f"re-sent the same TriggerJob (idem_key=trigger-K) {WAIT:.0f}s later", flush=True)
    time.sleep(20)
    exp.stop_all()
    recs = run_events(exp)
    mine = [(r.event_id, type(r.event).__name__, getattr(r.event, "run_id", None))
            for _m, r, _ in recs if r.idem_key == "trigger-K"]
    print("events caused by idem_key trigger-K:")
    for e in mine:
        print("  ", e)
    run_id = next((e[2] for e in mine if e[1] == "RunScheduled"), None)
    life = [type(r.event).__name__ for _m, r, _ in recs if getattr(r.event, "run_id", None) == run_id]
    print(f"all events of run {run_id}: {life}")
    runs = sum(1 for _m, r, _ in recs if r.job_id == "busy" and isinstance(r.event, ev.RunSucceeded))
    print(f"(runs of 'busy' completed in between: {runs})")
    diff = analyze(recs)["event_id_with_different_content"]
    print(f"event_ids published twice with different content: {len(diff)}")
finally:
    exp.stop_all()
