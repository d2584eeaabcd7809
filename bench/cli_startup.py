"""CPU time of the CLI's everyday commands: ``cronlog --help`` and ``cronlog jobs list``.

Issue 24's budget: each at most 0.3 s of CPU on this box (user + system, of the ``cronlog``
process alone). ``jobs list`` talks to a stub API served by this script (the standard
library's HTTP server, a page of ``--jobs`` jobs shaped as ``GET /api/v1/jobs`` answers them),
so what is measured is the CLI's own start-up, request, JSON and table, not an API.

    .venv/bin/python bench/cli_startup.py [--runs 5] [--jobs 100]

Prints, per command, the CPU seconds of each run, their median, and the heaviest imports of
``python -X importtime`` (cumulative microseconds), and the load average at the start.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CRONLOG = str(Path(sys.executable).with_name("cronlog"))


def _job(i: int) -> dict[str, Any]:
    return {
        "job_id": f"job-{i:05d}",
        "name": f"job {i}",
        "schedule": {"type": "cron", "expression": "*/5 * * * *", "timezone": "Europe/Berlin"},
        "status": "active",
        "next_run_at": "2026-12-03T10:05:00.000Z",
        "counts": {"runs": i, "queued": 0, "succeeded": i, "failed": 0},
        "last_run": {"state": "succeeded"},
    }


def _stub(jobs: int) -> ThreadingHTTPServer:
    body = json.dumps({"jobs": [_job(i) for i in range(jobs)], "next_cursor": None}).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _cpu_of(argv: list[str], env: dict[str, str]) -> float:
    """Run ``argv`` to its end; return its user + system CPU seconds (``wait4``'s rusage)."""
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # noqa: S603
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: {err[-400:]}")
    return usage.ru_utime + usage.ru_stime


def _heaviest_imports(args: list[str], env: dict[str, str], top: int = 8) -> list[str]:
    code = f"import sys; sys.argv = ['cronlog', *{args!r}]\nfrom services.cli.main import app\n"
    code += "try:\n    app()\nexcept SystemExit:\n    pass\n"
    out = subprocess.run(  # noqa: S603
        [sys.executable, "-X", "importtime", "-c", code],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    rows = []
    for line in out.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            name = parts[2].rstrip()
            depth = (len(name) - len(name.lstrip())) // 2
            if depth <= 2:
                rows.append((int(parts[1]), name.strip()))
    rows.sort(reverse=True)
    return [f"{us / 1000:7.1f} ms  {name}" for us, name in rows[:top]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=100, help="jobs in the stub API's page")
    args = parser.parse_args()
    server = _stub(args.jobs)
    api = f"http://127.0.0.1:{server.server_address[1]}"
    env = {**os.environ, "CRONLOG_API_TOKEN": "bench", "COLUMNS": "200"}
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    commands = {
        "cronlog --help": ["--help"],
        f"cronlog jobs list ({args.jobs} jobs)": ["jobs", "list", "--api", api],
    }
    for label, argv in commands.items():
        cpu = [_cpu_of([CRONLOG, *argv], env) for _ in range(args.runs)]
        runs = " ".join(f"{c:.3f}" for c in cpu)
        print(f"{label}: median {statistics.median(cpu):.3f} s CPU (runs: {runs}; budget 0.3)")
        for row in _heaviest_imports(argv, env):
            print(f"    {row}")
    server.shutdown()


if __name__ == "__main__":
    main()
