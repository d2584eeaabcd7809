"""Experiment 5: API abuse -- malformed input, odd ids, races, storms.

    PYTHONPATH=/work/main .venv/bin/python tests/chaos_findings/exp5_api_abuse.py [tag] [port] [sections]

sections (default all): input,ids,register_race,patch_race,trigger_storm,idem,once_reregister,nul
"""

from __future__ import annotations

import collections
import json
import sys
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

from chaos_common import Exp, http, run_events, wait_http
from cronlog import events as ev

TAG = sys.argv[1] if len(sys.argv) > 1 else "brk15"
PORT = int(sys.argv[2]) if len(sys.argv) > 2 else 18961
SECTIONS = (sys.argv[3] if len(sys.argv) > 3 else
            "input,ids,register_race,patch_race,trigger_storm,idem,once_reregister,nul").split(",")
BASE = f"http://127.0.0.1:{PORT}/api/v1"
exp = Exp(TAG)
exp.ensure()


def job(job_id: str | None = None, **over) -> dict:
    body = {"name": "j", "schedule": {"type": "manual"}, "command": ["true"]}
    if job_id is not None:
        body["job_id"] = job_id
    body.update(over)
    return body


def show(label: str, res: tuple[int, object]) -> None:
    code, body = res
    txt = json.dumps(body, default=str) if not isinstance(body, bytes) else repr(body)
    print(f"  {label:<58} -> {code} {txt[:230]}", flush=True)


try:
    s1 = exp.scheduler("s1")
    w1 = exp.worker("w1", CRONLOG_SLOTS="2")
    api = exp.api(PORT)
    assert wait_http(f"http://127.0.0.1:{PORT}/readyz", 90)
    time.sleep(6)

    if "input" in SECTIONS:
        print("=== malformed input ===")
        show("malformed JSON", http("POST", f"{BASE}/jobs", raw=b'{"name": "x",'))
        show("JSON array body", http("POST", f"{BASE}/jobs", raw=b"[1,2]"))
        show("name is a number", http("POST", f"{BASE}/jobs", job(name=5)))
        show("command is a string", http("POST", f"{BASE}/jobs", job(command="true")))
        show("command empty list", http("POST", f"{BASE}/jobs", job(command=[])))
        show("schedule.type unknown", http("POST", f"{BASE}/jobs", job(schedule={"type": "x"})))
        show("cron without expression", http("POST", f"{BASE}/jobs", job(schedule={"type": "cron"})))
        show("cron 7 fields", http("POST", f"{BASE}/jobs", job(
            schedule={"type": "cron", "expression": "* * * * * * *"})))
        show("cron Feb 30 (never fires)", http("POST", f"{BASE}/jobs", job(
            "feb30", schedule={"type": "cron", "expression": "0 0 30 2 *"})))
        show("timezone path traversal", http("POST", f"{BASE}/jobs", job(
            schedule={"type": "cron", "expression": "* * * * *", "timezone": "../../etc/passwd"})))
        show("timeout_s string", http("POST", f"{BASE}/jobs", job(timeout_s="abc")))
        show("timeout_s negative", http("POST", f"{BASE}/jobs", job(timeout_s=-1)))
        show("timeout_s NaN (raw)", http("POST", f"{BASE}/jobs",
                                         raw=json.dumps(job()).replace('"command"',
                                             '"timeout_s": NaN, "command"').encode()))
        show("timeout_s 1e-9", http("POST", f"{BASE}/jobs", job(timeout_s=1e-9)))
        show("lease_ttl_s 0.5", http("POST", f"{BASE}/jobs", job(lease_ttl_s=0.5)))
        show("max_attempts 0", http("POST", f"{BASE}/jobs", job(retry_policy={"max_attempts": 0})))
        show("max_attempts 1.5", http("POST", f"{BASE}/jobs", job(retry_policy={"max_attempts": 1.5})))
        show("unknown field", http("POST", f"{BASE}/jobs", job(foo=1)))
        show("once without run_at", http("POST", f"{BASE}/jobs", job(schedule={"type": "once"})))
        show("once naive run_at", http("POST", f"{BASE}/jobs", job(
            schedule={"type": "once", "run_at": "2030-01-01T00:00:00"})))
        show("once run_at 0001-01-01T00:00:00+01:00", http("POST", f"{BASE}/jobs", job(
            "y0001", schedule={"type": "once", "run_at": "0001-01-01T00:00:00+01:00"})))
        show("once run_at 9999-12-31T23:59:59-01:00", http("POST", f"{BASE}/jobs", job(
            "y9999", schedule={"type": "once", "run_at": "9999-12-31T23:59:59-01:00"})))
        show("once run_at 0001-01-01T00:00:00Z", http("POST", f"{BASE}/jobs", job(
            "y0001z", schedule={"type": "once", "run_at": "0001-01-01T00:00:00Z"})))
        show("catchup_window_s negative", http("POST", f"{BASE}/jobs", job(
            schedule={"type": "cron", "expression": "* * * * *", "catchup_window_s": -5})))
        show("name 201 chars", http("POST", f"{BASE}/jobs", job(name="n" * 201)))
        big = json.dumps(job("bigbody", command=["echo"] + ["x" * 1000] * 20_000)).encode()
        t = time.time()
        show(f"huge body ({len(big) // 1_000_000} MB)", http("POST", f"{BASE}/jobs", raw=big,
                                                           timeout=120))
        print(f"    (took {time.time() - t:.1f}s)")
        show("PATCH unknown job", http("PATCH", f"{BASE}/jobs/nope", {"paused": True}))
        show("PATCH paused='yes'", http("PATCH", f"{BASE}/jobs/nope", {"paused": "yes"}))
        show("bad Idempotency-Key (space)", http("POST", f"{BASE}/jobs", job(),
                                                 headers={"Idempotency-Key": "a b"}))
        show("GET runs limit=0", http("GET", f"{BASE}/jobs/feb30/runs?limit=0"))
        show("GET jobs?status=bogus", http("GET", f"{BASE}/jobs?status=bogus"))

    if "ids" in SECTIONS:
        print("=== job ids ===")
        for jid in ["ünïcode", "日本", "a/b", "../x", "a b", "-lead", "x" * 129, "x" * 128, "a.b_c-d",
                    "a\u0000b", ".", ".."]:
            show(f"POST job_id {jid[:20]!r}", http("POST", f"{BASE}/jobs", job(jid)))
        for path in ["%C3%BCn%C3%AFcode", "a%2Fb", "a/b", "..", "%2E%2E", "x" * 5000]:
            show(f"GET /jobs/{path[:30]}", http("GET", f"{BASE}/jobs/{path}"))

    if "register_race" in SECTIONS:
        print("=== 20 concurrent POSTs of the same job_id, different names ===")
        with ThreadPoolExecutor(20) as pool:
            res = list(pool.map(lambda i: http("POST", f"{BASE}/jobs", job("race", name=f"n{i}")),
                                range(20)))
        codes = collections.Counter(c for c, _ in res)
        print("  status codes:", dict(codes))
        winners = [i for i, (c, _) in enumerate(res) if c == 201]
        got = http("GET", f"{BASE}/jobs/race")[1]
        print(f"  201 for request(s) {winners}; GET name = {got.get('name')}")

    if "patch_race" in SECTIONS:
        print("=== 50 concurrent PATCH pause/resume ===")
        http("POST", f"{BASE}/jobs", job("pr", schedule={"type": "cron",
                                                         "expression": "*/2 * * * * *"}))
        with ThreadPoolExecutor(50) as pool:
            res = list(pool.map(lambda i: http("PATCH", f"{BASE}/jobs/pr", {"paused": i % 2 == 0}),
                                range(50)))
        print("  status codes:", dict(collections.Counter(c for c, _ in res)))
        time.sleep(2)
        got = http("GET", f"{BASE}/jobs/pr")[1]
        recs = run_events(exp)
        last = [type(r.event).__name__ for _m, r, _ in recs if r.job_id == "pr" and
                isinstance(r.event, (ev.JobPaused, ev.JobResumed))]
        rej = collections.Counter(r.event.reason.value for _m, r, _ in recs if r.job_id == "pr"
                                  and isinstance(r.event, ev.CommandRejected))
        print(f"  applied: {collections.Counter(last)}, rejected: {dict(rej)}; last applied "
              f"{last[-1] if last else None}; API status={got['status']} "
              f"next_run_at={got['next_run_at']}")
        time.sleep(6)
        recs = run_events(exp)
        runs_after = [r for _m, r, _ in recs if r.job_id == "pr" and
                      isinstance(r.event, ev.RunScheduled) and r.at.timestamp() > time.time() - 5]
        print(f"  runs scheduled in the last 5 s: {len(runs_after)} (paused => 0)")

    if "trigger_storm" in SECTIONS:
        print("=== trigger storm: 300 concurrent triggers; 50 with one Idempotency-Key ===")
        http("POST", f"{BASE}/jobs", job("storm"))
        t = time.time()
        with ThreadPoolExecutor(64) as pool:
            res = list(pool.map(lambda i: http("POST", f"{BASE}/jobs/storm/trigger"), range(300)))
        print(f"  {time.time() - t:.1f}s; codes {dict(collections.Counter(c for c, _ in res))}; "
              f"distinct run_ids {len({b['run_id'] for c, b in res if c in (201, 202)})}")
        with ThreadPoolExecutor(50) as pool:
            res = list(pool.map(lambda i: http("POST", f"{BASE}/jobs/storm/trigger",
                                               headers={"Idempotency-Key": "same-key"}), range(50)))
        print(f"  same key: codes {dict(collections.Counter(c for c, _ in res))}; distinct run_ids "
              f"{len({b['run_id'] for c, b in res if c in (201, 202)})}")
        time.sleep(3)
        recs = run_events(exp)
        manual = [r for _m, r, _ in recs if r.job_id == "storm" and isinstance(r.event, ev.RunScheduled)]
        print(f"  RunScheduled on run-events for storm: {len(manual)} (expected 301), distinct "
              f"run_ids {len({r.event.run_id for r in manual})}")

    if "idem" in SECTIONS:
        print("=== Idempotency-Key reused across different commands ===")
        http("POST", f"{BASE}/jobs", job("idem"))
        show("trigger with key K1", http("POST", f"{BASE}/jobs/idem/trigger",
                                         headers={"Idempotency-Key": "K1"}))
        show("DELETE with the same key K1", http("DELETE", f"{BASE}/jobs/idem",
                                                 headers={"Idempotency-Key": "K1"}))
        time.sleep(1)
        code, got = http("GET", f"{BASE}/jobs/idem")
        print(f"  GET after DELETE -> {code} status={got.get('status')} deleted_at={got.get('deleted_at')}")

    if "once_reregister" in SECTIONS:
        print("=== once job: fire, delete, re-register with the same run_at ===")
        run_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 4))
        show("register once", http("POST", f"{BASE}/jobs", job(
            "once1", schedule={"type": "once", "run_at": run_at})))
        time.sleep(10)
        first = http("GET", f"{BASE}/jobs/once1")[1]
        print("  after firing: last_run", first.get("last_run"), "counts", first.get("counts"))
        show("DELETE", http("DELETE", f"{BASE}/jobs/once1"))
        show("re-register, same run_at, command false", http("POST", f"{BASE}/jobs", job(
            "once1", command=["false"], schedule={"type": "once", "run_at": run_at})))
        time.sleep(10)
        again = http("GET", f"{BASE}/jobs/once1")[1]
        print("  after re-register: last_run", again.get("last_run"), "counts", again.get("counts"))
        recs = run_events(exp)
        rs = [(r.event.run_id, r.event_id) for _m, r, _ in recs if r.job_id == "once1" and
              isinstance(r.event, ev.RunScheduled)]
        ends = [(type(r.event).__name__, getattr(r.event, "run_id", None)) for _m, r, _ in recs
                if r.job_id == "once1" and isinstance(r.event, (ev.RunSucceeded, ev.RunFailed))]
        print(f"  RunScheduled on run-events: {rs}")
        print(f"  run ends on run-events: {ends}")
        run = http("GET", f"{BASE}/runs/{rs[0][0]}")[1]
        print(f"  GET /runs/{rs[0][0]}: state={run['state']} attempts={len(run['attempts'])}")

    if "nul" in SECTIONS:
        print("=== NUL byte in argv: the worker's attempt thread dies, its slot leaks ===")
        for i in range(3):
            show(f"register nul{i}", http("POST", f"{BASE}/jobs", job(
                f"nul{i}", command=["echo", "a\u0000b"], lease_ttl_s=5)))
            show(f"trigger nul{i}", http("POST", f"{BASE}/jobs/nul{i}/trigger"))
        time.sleep(15)
        for i in range(3):
            r = http("GET", f"{BASE}/jobs/nul{i}/runs")[1]["runs"]
            print(f"  nul{i} run: state={r[0]['state']} failure={r[0]['failure_kind']}")
        print("  worker log:", *[l[:160] for l in w1.grep("Error")][:4], sep="\n    ")
        http("POST", f"{BASE}/jobs", job("after-nul"))
        tr = [http("POST", f"{BASE}/jobs/after-nul/trigger")[1]["run_id"] for _ in range(4)]
        time.sleep(15)
        print("  4 normal runs triggered afterwards:",
              [http("GET", f"{BASE}/runs/{rid}")[1]["state"] for rid in tr])
finally:
    exp.stop_all()
