"""Experiment 4c: one valid job definition, accepted by the API, kills the scheduler.

``POST /api/v1/jobs`` with ``command: ["echo", "\\u0001" * 200000]``: the request body is ~1.2 MB
of JSON, the command on Kafka is ~200 KB of Avro (fine), JobRegistered is published (the API
answers 201), but the job's table record is JSON (``v1:`` + pydantic dump_json) where every
control character becomes a 6-byte ``\\u0001`` escape: ~1.2 MB, over aiokafka's
max_request_size (1 MiB). faust's ProducerBuffer crashes and the whole scheduler process exits.
On restart the same command is re-delivered (never committed) and the scheduler dies again: a
poison pill that stops every job of every partition this process owns.

    PYTHONPATH=/work/main .venv/bin/python tests/chaos_findings/exp4c_big_state_kills_scheduler.py [tag] [port]
"""

from __future__ import annotations

import sys
import time

from chaos_common import Exp, http, run_events, wait_http
from cronlog import events as ev

TAG = sys.argv[1] if len(sys.argv) > 1 else "brk13"
PORT = int(sys.argv[2]) if len(sys.argv) > 2 else 18951
BASE = f"http://127.0.0.1:{PORT}/api/v1"
exp = Exp(TAG)
exp.ensure()
try:
    s1 = exp.scheduler("s1")
    api = exp.api(PORT)
    assert wait_http(f"http://127.0.0.1:{PORT}/readyz", 90)
    time.sleep(5)
    code, body = http("POST", f"{BASE}/jobs", {
        "job_id": "canary", "name": "canary", "schedule": {"type": "cron",
                                                           "expression": "*/2 * * * * *"},
        "command": ["true"]})
    print("canary:", code, body)
    code, body = http("POST", f"{BASE}/jobs", {
        "job_id": "poison", "name": "poison", "schedule": {"type": "manual"},
        "command": ["echo", "\u0001" * 200_000]})
    print("poison job:", code, str(body)[:200], flush=True)
    for restart in range(3):
        time.sleep(15)
        print(f"[{restart}] scheduler alive: {s1.alive()} "
              f"(exit code {None if s1.alive() else s1.popen.returncode})", flush=True)
        if not s1.alive():
            crash = s1.grep("MessageSizeTooLargeError")
            print("   ", crash[0][:220] if crash else "(no MessageSizeTooLargeError line)")
            s1 = exp.scheduler("s1")
    time.sleep(5)
    recs = run_events(exp)
    ticks = sorted(r.event.scheduled_for for _m, r, _ in recs
                   if r.job_id == "canary" and isinstance(r.event, ev.RunScheduled))
    print(f"canary runs: {len(ticks)}; last tick {ticks[-1] if ticks else None}; now "
          f"{time.strftime('%H:%M:%S', time.gmtime())}Z")
    print("GET poison:", http("GET", f"{BASE}/jobs/poison")[0])
finally:
    exp.stop_all()
