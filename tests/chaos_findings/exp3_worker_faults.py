"""Experiment 3: worker faults -- kill -9 mid-task, SIGSTOP past the lease, claims during fold outage.

A. kill -9 a worker running `sleep 60` (lease_ttl_s=3, max_attempts=2): lease expiry, retry on
   another worker -- and is the first attempt's process still running (orphan)?
B. SIGSTOP a worker running `sleep 20` for 8 s (> lease), SIGCONT: renewal refused by epoch,
   process group killed?
C. SIGSTOP a worker running `sleep 4` for 10 s: its late CompleteTask must be refused+recorded.
D. A worker claims while the scheduler is down for longer than claim_timeout_s (30 s): the worker
   gives up; when the fold comes back it grants the claim to a worker that no longer waits.

    PYTHONPATH=/work/main .venv/bin/python tests/chaos_findings/exp3_worker_faults.py [tag] [port] [parts]
"""

from __future__ import annotations

import os
import signal
import sys
import time

from chaos_common import Exp, http, run_events, wait_http
from cronlog import events as ev

TAG = sys.argv[1] if len(sys.argv) > 1 else "brk4"
PORT = int(sys.argv[2]) if len(sys.argv) > 2 else 18941
PARTS = sys.argv[3] if len(sys.argv) > 3 else "ABCD"
BASE = f"http://127.0.0.1:{PORT}/api/v1"
exp = Exp(TAG)
exp.ensure()


def procs_of_run(run_id: str) -> list[tuple[int, str]]:
    """Live processes whose environment carries CRONLOG_RUN_ID=run_id (the task's argv)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            env = open(f"/proc/{pid}/environ", "rb").read()
            if f"CRONLOG_RUN_ID={run_id}".encode() in env.split(b"\0"):
                st = open(f"/proc/{pid}/stat").read().split(")")[-1].split()[0]
                if st != "Z":
                    attempt = [e for e in env.split(b"\0") if e.startswith(b"CRONLOG_ATTEMPT=")]
                    out.append((int(pid), attempt[0].decode() if attempt else "?"))
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return out


def job(job_id: str, argv: list[str], ttl: float, attempts: int) -> None:
    code, body = http("POST", f"{BASE}/jobs", {
        "job_id": job_id, "name": job_id, "schedule": {"type": "manual"}, "command": argv,
        "lease_ttl_s": ttl, "retry_policy": {"max_attempts": attempts, "backoff_s": 1}})
    print("register", job_id, code, body, flush=True)


def trigger(job_id: str) -> str:
    code, body = http("POST", f"{BASE}/jobs/{job_id}/trigger")
    print("trigger", job_id, code, body, flush=True)
    return body["run_id"]


def run_doc(run_id: str) -> dict:
    return http("GET", f"{BASE}/runs/{run_id}")[1]


def wait_state(run_id: str, pred, timeout: float) -> dict | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        d = run_doc(run_id)
        if isinstance(d, dict) and pred(d):
            return d
        time.sleep(0.2)
    return None


def events_of(run_id: str) -> list[str]:
    out = []
    for m, r, _ in run_events(exp):
        e = r.event
        if getattr(e, "run_id", None) == run_id:
            extra = ""
            if isinstance(e, ev.CommandRejected):
                extra = f" {e.command}/{e.reason.value}: {e.detail}"
            elif isinstance(e, ev.TaskFailed):
                extra = f" {e.failure_kind.value} attempt={e.attempt} epoch={e.epoch}"
            elif isinstance(e, (ev.TaskClaimed, ev.TaskSucceeded, ev.LeaseExpired)):
                extra = f" attempt={e.attempt} epoch={e.epoch} worker={e.worker_id}"
            out.append(f"{r.at.strftime('%H:%M:%S.%f')[:-3]} {type(e).__name__}{extra}")
    return out


try:
    s1 = exp.scheduler("s1")
    api = exp.api(PORT)
    assert wait_http(f"http://127.0.0.1:{PORT}/readyz", 90), "api not ready"
    time.sleep(5)

    if "A" in PARTS:
        print("\n=== A: kill -9 a worker mid-task ===", flush=True)
        wa = exp.worker("wA", CRONLOG_SLOTS="2")
        job("kill9", ["sleep", "60"], 3, 2)
        run = trigger("kill9")
        d = wait_state(run, lambda d: d["state"] == "running", 60)
        time.sleep(1)
        print("claimed by", d and d["claimed_by"], "task processes:", procs_of_run(run))
        os.kill(wa.pid, signal.SIGKILL)  # the worker process only, as an OOM kill would
        wa.popen.wait()
        t_kill = time.time()
        print("worker killed; task processes right after:", procs_of_run(run), flush=True)
        wb = exp.worker("wB", CRONLOG_SLOTS="2")
        d = wait_state(run, lambda d: d["attempt"] == 2 and d["state"] == "running", 60)
        print(f"attempt 2 running after {time.time() - t_kill:.1f}s, claimed by",
              d and d["claimed_by"], "epoch", d and d["epoch"])
        print("task processes now (attempt 1 orphan + attempt 2?):", procs_of_run(run))
        for line in events_of(run):
            print("   ", line)
        wb.stop()
        for pid, _ in procs_of_run(run):  # clean up the orphan we created
            os.kill(pid, signal.SIGKILL)

    if "B" in PARTS:
        print("\n=== B: SIGSTOP a worker past its lease, then SIGCONT ===", flush=True)
        wc = exp.worker("wC", CRONLOG_SLOTS="2")
        job("sigstop", ["sleep", "20"], 3, 2)
        time.sleep(3)
        run = trigger("sigstop")
        d = wait_state(run, lambda d: d["state"] == "running", 60)
        time.sleep(1)
        print("claimed by", d and d["claimed_by"], "procs", procs_of_run(run), flush=True)
        wc.signal(signal.SIGSTOP)
        time.sleep(8)
        print("while stopped:", {k: run_doc(run)[k] for k in ("state", "attempt", "epoch",
                                                           "failure_kind")},
              "procs", procs_of_run(run), flush=True)
        wc.signal(signal.SIGCONT)
        time.sleep(4)
        print("4 s after SIGCONT: procs", procs_of_run(run))
        print("worker log:", *wc.grep("revoked")[-3:], sep="\n  ")
        for line in events_of(run):
            print("   ", line)
        wc.stop()
        for pid, _ in procs_of_run(run):
            os.kill(pid, signal.SIGKILL)

    if "C" in PARTS:
        print("\n=== C: SIGSTOP a worker whose task ends while it is stopped ===", flush=True)
        wd = exp.worker("wD", CRONLOG_SLOTS="2")
        job("latecomplete", ["sleep", "4"], 3, 1)
        time.sleep(3)
        run = trigger("latecomplete")
        d = wait_state(run, lambda d: d["state"] == "running", 60)
        wd.signal(signal.SIGSTOP)
        time.sleep(10)
        wd.signal(signal.SIGCONT)
        time.sleep(5)
        print("run:", {k: run_doc(run)[k] for k in ("state", "attempt", "failure_kind")})
        for line in events_of(run):
            print("   ", line)
        wd.stop()

    if "D" in PARTS:
        print("\n=== D: a claim during a scheduler outage longer than claim_timeout_s ===",
              flush=True)
        job("outage", ["true"], 10, 1)
        run = trigger("outage")
        time.sleep(1)
        s1.kill9()
        t0 = time.time()
        we = exp.worker("wE", CRONLOG_SLOTS="2")
        time.sleep(40)
        s1 = exp.scheduler("s1")
        d = wait_state(run, lambda d: d["state"] in ("succeeded", "failed"), 90)
        print(f"run ended {time.time() - t0:.0f}s after the outage began:",
              d and {k: d[k] for k in ("state", "failure_kind", "claimed_by")})
        print("worker log:", *we.grep("no answer")[-2:], sep="\n  ")
        for line in events_of(run):
            print("   ", line)
    if "E" in PARTS:
        print("\n=== E: a claim during a scheduler outage shorter than claim_timeout_s but "
              "longer than lease_ttl (2 s) ===", flush=True)
        ww = exp.worker("wF", CRONLOG_SLOTS="2")
        job("outage2", ["sleep", "3"], 2, 1)
        time.sleep(3)
        ww.stop()  # no worker while the run becomes ready
        run = trigger("outage2")
        time.sleep(1)
        s1.kill9()
        t0 = time.time()
        ww = exp.worker("wG", CRONLOG_SLOTS="2")  # sends its ClaimTask into the outage
        time.sleep(3)
        s1 = exp.scheduler("s1")  # back (start-up included) within the worker's claim timeout
        d = wait_state(run, lambda d: d["state"] in ("succeeded", "failed"), 90)
        print(f"run ended {time.time() - t0:.0f}s after the outage began:",
              d and {k: d[k] for k in ("state", "failure_kind", "claimed_by")})
        print("worker log:", *[l for l in ww.grep("cronlog.worker")][-3:], sep="\n  ")
        for line in events_of(run):
            print("   ", line)
finally:
    exp.stop_all()
