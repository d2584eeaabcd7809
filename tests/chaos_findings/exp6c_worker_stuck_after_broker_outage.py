"""Experiment 6c: after a broker outage longer than the consumer session timeout (45 s), the
worker never executes anything again (runs pile up as ready), with nothing in its log.

Private broker only (see exp6_broker_restart.py for the setup):
    KAFKA_BOOTSTRAP=127.0.0.1:29092 PYTHONPATH=/work/main .venv/bin/python \
      tests/chaos_findings/exp6c_worker_stuck_after_broker_outage.py [tag] [down_s]
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

from chaos_common import PY, SCRATCH, Exp, run_events
from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.model import JobSpec, Schedule, ScheduleKind

TAG = sys.argv[1] if len(sys.argv) > 1 else "brk24"
DOWN = float(sys.argv[2]) if len(sys.argv) > 2 else 60
OPS = SCRATCH / "ops" / "kafka"
PRIVATE = os.environ.get("KAFKA_BOOTSTRAP", "")
BENV = {**os.environ, "CRONLOG_KAFKA_PORT": PRIVATE.rsplit(":", 1)[-1], "CRONLOG_KAFKA_DATA": str(SCRATCH / "kdata")}
assert PRIVATE not in ("", "127.0.0.1:19092"), "use a private broker (KAFKA_BOOTSTRAP)"
exp = Exp(TAG, bootstrap=PRIVATE)
exp.ensure()


def counts(since: float) -> dict[str, int]:
    out: dict[str, int] = {}
    for m, r, _ in run_events(exp):
        if m.timestamp()[1] / 1000 > since:
            out[type(r.event).__name__] = out.get(type(r.event).__name__, 0) + 1
    return out


try:
    s1 = exp.scheduler("s1")
    w1 = exp.worker("w1", CRONLOG_SLOTS="4")
    time.sleep(10)
    spec = JobSpec(name="every2", schedule=Schedule(ScheduleKind.CRON, "*/2 * * * * *"),
                   command=("true",))
    for j in range(10):
        exp.send(cmd.Envelope(uuid.uuid4().hex, f"j{j}", cmd.RegisterJob(spec)))
    time.sleep(15)
    t = time.time()
    time.sleep(10)
    print("before outage, last 10 s:", counts(t), flush=True)
    subprocess.run([str(OPS), "stop"], env=BENV, capture_output=True, timeout=120)
    print(f"broker stopped for {DOWN}s", flush=True)
    time.sleep(DOWN)
    subprocess.run([str(OPS), "start"], env=BENV, capture_output=True, timeout=240)
    t_up = time.time()
    print("broker up again", flush=True)
    time.sleep(60)
    c = counts(t_up + 20)
    print("from 20 s to 60 s after the broker came back:", c, flush=True)
    if not c.get("TaskClaimed"):
        print("worker is stuck; its threads:")
        dump = subprocess.run([PY.replace("bin/python", "bin/py-spy"), "dump", "--pid",
                               str(w1.pid)], capture_output=True, text=True, timeout=60)
        print(dump.stdout[:6000], dump.stderr[:500])
        tail = [l for l in w1.log.read_text(errors="replace").splitlines()
                if "Connect to ipv4" not in l][-4:]
        print("worker log tail:", *[l[:220] for l in tail], sep="\n  ")
finally:
    exp.stop_all()
