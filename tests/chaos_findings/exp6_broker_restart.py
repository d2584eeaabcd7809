"""Experiment 6: restart a PRIVATE broker under a running scheduler, worker and API.

Needs its own broker (never the shared one):
    cp -r /work/main/ops /tmp/breaker/ops && mkdir -p /tmp/breaker/.cache/kafka \
      && ln -s /work/main/.cache/kafka/lib /tmp/breaker/.cache/kafka/lib
    CRONLOG_KAFKA_PORT=39092 CRONLOG_KAFKA_DATA=/tmp/breaker/kdata /tmp/breaker/ops/kafka start
Then:
    KAFKA_BOOTSTRAP=127.0.0.1:39092 PYTHONPATH=/work/main .venv/bin/python \
      tests/chaos_findings/exp6_broker_restart.py [tag] [port] [down_s]

Phases: steady 20 s; graceful broker stop for down_s; start; 40 s; kill -9 of the broker;
start again; 40 s. After each phase: processes alive? new runs succeed? API writes answer?
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

from chaos_common import SCRATCH, Exp, analyze, dump, http, missing_ticks, run_events, wait_http
from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.model import JobSpec, Schedule, ScheduleKind

TAG = sys.argv[1] if len(sys.argv) > 1 else "brk20"
PORT = int(sys.argv[2]) if len(sys.argv) > 2 else 18971
DOWN = float(sys.argv[3]) if len(sys.argv) > 3 else 20
OPS = SCRATCH / "ops" / "kafka"
PRIVATE = os.environ.get("KAFKA_BOOTSTRAP", "")
BENV = {**os.environ, "CRONLOG_KAFKA_PORT": PRIVATE.rsplit(":", 1)[-1], "CRONLOG_KAFKA_DATA": str(SCRATCH / "kdata")}
assert PRIVATE not in ("", "127.0.0.1:19092"), "use a private broker (KAFKA_BOOTSTRAP)"
BASE = f"http://127.0.0.1:{PORT}/api/v1"


def broker(action: str) -> None:
    t = time.time()
    r = subprocess.run([str(OPS), action], env=BENV, capture_output=True, text=True, timeout=240)
    print(f"  broker {action}: rc={r.returncode} in {time.time() - t:.0f}s "
          f"{r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ''}", flush=True)


def broker_kill9() -> None:
    pid = int((SCRATCH / ".cache" / "kafka" / "kafka.pid").read_text().split()[0])
    os.kill(pid, signal.SIGKILL)
    print(f"  broker pid {pid} killed -9", flush=True)


exp = Exp(TAG, bootstrap=PRIVATE)
exp.ensure()
jobs = [f"b{i:02d}" for i in range(20)]


def status(label: str) -> None:
    alive = {s.name: s.alive() for s in exp.svcs}
    t = time.time()
    try:
        code, body = http("POST", f"{BASE}/jobs/manual/trigger", timeout=40)
    except Exception as e:  # noqa: BLE001
        code, body = "EXC", repr(e)
    took = time.time() - t
    recs = run_events(exp)
    recent = [r for _m, r, _ in recs if isinstance(r.event, ev.TaskSucceeded)
              and r.at.timestamp() > time.time() - 10]
    print(f"[{label}] alive={alive} trigger->{code} in {took:.1f}s; TaskSucceeded in last 10s: "
          f"{len(recent)}", flush=True)


try:
    s1 = exp.scheduler("s1")
    w1 = exp.worker("w1", CRONLOG_SLOTS="8")
    api = exp.api(PORT)
    assert wait_http(f"http://127.0.0.1:{PORT}/readyz", 90)
    spec = JobSpec(name="every2", schedule=Schedule(ScheduleKind.CRON, "*/2 * * * * *"),
                   command=("true",))
    for j in jobs:
        exp.send(cmd.Envelope(uuid.uuid4().hex, j, cmd.RegisterJob(spec)))
    http("POST", f"{BASE}/jobs", {"job_id": "manual", "name": "m", "schedule": {"type": "manual"},
                                  "command": ["true"]})
    t_start = time.time()
    time.sleep(20)
    status("steady")
    print(f"--- graceful broker stop for {DOWN}s")
    broker("stop")
    time.sleep(DOWN)
    broker("start")
    time.sleep(40)
    status("after graceful restart")
    print("--- broker kill -9")
    broker_kill9()
    time.sleep(5)
    broker("start")
    time.sleep(40)
    status("after kill -9 restart")
    t_end = time.time()
    exp.stop_all()
    recs = run_events(exp)
    an = analyze(recs)
    print(dump(an))
    mt = missing_ticks(an, jobs, 2000, int((t_start + 3) * 1000), int((t_end - 12) * 1000))
    miss = sorted({t for v in mt["missing"].values() for t in v})
    print(f"missing ticks: {sum(map(len, mt['missing'].values()))} over instants "
          f"{[time.strftime('%H:%M:%S', time.gmtime(t / 1000)) for t in miss][:30]}; "
          f"skipped: {sum(map(len, mt['skipped'].values()))}")
    for s in exp.svcs:
        errs = [l for l in s.log.read_text(errors="replace").splitlines()
                if "CRITICAL" in l or "exiting" in l or "Crashed" in l]
        print(f"{s.name}: {len(errs)} critical/crash lines", *[e[:200] for e in errs[:3]],
              sep="\n   ")
finally:
    exp.stop_all()
