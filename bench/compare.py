"""cronlog against the Celery + Redis peer, side by side on this box, in one table (issue 26).

    .venv/bin/python bench/compare.py [--workloads burst5k,burst25k,sus500,sus1000,chain]
        [--runs 2] [--quick] [--json FILE] [--bootstrap HOST:PORT] [--peers DIR]

Per workload, ``--runs`` times: cronlog (A), then Celery (B), one at a time, nothing in
parallel. cronlog: 1 scheduler, 4 workers x 32 slots, no-op python tasks with ``isolation:
thread``, through its own benches (``bench/burst.py``, ``bench/sustained.py``,
``bench/dag_chain.py`` with ``--json``). Celery 5.7 + Redis 7, prefork, concurrency 2: the
peer harness's ``peer_celery.py`` (``../shared/peers/``: ``bash setup.sh`` installs it; its
results go to a temporary ``$PEERS_RESULTS``), read back from its JSON.

| workload | cronlog | Celery (peer) |
|---|---|---|
| burst5k / burst25k | ``burst.py --jobs N`` | ``--workload w1 --n N`` (25,000: ``--lead 60``) |
| sus500 / sus1000 | ``sustained.py --rate R --duration 60`` | ``--workload w2 --rate R`` |
| chain | ``dag_chain.py --tasks 40 --runs 5`` | ``--workload w3 --reps 5`` |

``--quick`` (a try-out, not a measurement): bursts of 500 and 1,000, 100/s and 200/s for 10 s,
2 chains of 10 tasks; for these sizes the peer runs through a wrapper that sets its
``common.W2_DURATION_S`` and ``common.W3_LEN`` before calling ``peer_celery.py``'s ``main``.

The broker: a private one (``ops/kafka``, its own home, a free port in 30000-32700) unless
``--bootstrap`` / ``KAFKA_BOOTSTRAP`` names one (its JVM is then found by its listening port,
``ss -ltnp``). Its JVM's CPU counts for cronlog; during Celery's runs it idles.

CPU per task: ``bench/proc_cpu.py`` samples every process of the run from ``/proc`` every
0.5 s: the driver (the bench or the peer script, its own CPU), each process it started with
all of theirs (a worker's pool processes, Celery's prefork children), the broker's JVM. The
window runs from the end of the warm-up (cronlog: the bench's warm-up gone quiet; Celery: the
peer's warm-up records in its sink) to the moment every task was seen done (cronlog: every
run-event out; Celery: every record in the sink); registration is inside it for both (Celery's
``apply_async`` calls, cronlog's RegisterJob commands and their fold). CPU / tasks run.

Figures (seconds after the due time; nearest rank): burst: last task started, p99 trigger
lag; sustained: p99 and max trigger lag, 10 s windows whose p99 grew (``compare_report``);
chain: hop median and p99; missing or doubled tasks. The load average is /proc/loadavg at each
run's start. Prints one markdown table on stdout (the benches' own output goes to stderr);
``--json FILE`` keeps every run's raw figures. Exit 1 if any run failed.

What differs between the two sides, as their benches stand: cronlog's sustained load is
``rate`` every-second jobs, all firing on each whole second; the peer's is one ETA task every
1/rate s, each sent 5 s ahead. cronlog's burst is due ~25 s + jobs/900 s after registration
starts, the peer's 20 s (60 s for 25,000) after. cronlog's no-op task does nothing; the peer's
writes one line to its sink. cronlog's chain has no warm-up (thread tasks need no pool).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import proc_cpu  # noqa: E402
from bench.compare_report import table, windows_growing  # noqa: E402
from tests.chaos.harness import PrivateBroker  # noqa: E402

WORKERS, SLOTS, CELERY_CONCURRENCY = 4, 32, 2
PEER_WARM = max(4, 2 * CELERY_CONCURRENCY)
"""Warm-up records ``peer_celery.py`` writes before the workload (its ``n_warm``)."""
RUN_TIMEOUT_S = 1800.0
PEERS_DIRS = (ROOT.parent / "shared" / "peers", ROOT.parents[1] / "shared" / "peers")
"""Where the peer harness is: ``../shared/peers`` of the main checkout or of a worktree's."""
PEERS_VENV = os.environ.get("PEERS_VENV", "/tmp/peers-venv")  # noqa: S108 (the peers' setup.sh)
PEERS_PY = Path(PEERS_VENV) / "bin" / "python"
PATCHED = (
    "import os, runpy, sys; sys.path.insert(0, os.path.dirname(sys.argv[1])); import common; "
    "common.W2_DURATION_S = float(os.environ['COMPARE_W2_DURATION_S']); "
    "common.W3_LEN = int(os.environ['COMPARE_W3_LEN']); "
    "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
)
"""--quick only: the peer's fixed W2 duration and W3 length set, then its script run as is."""


@dataclass(frozen=True, slots=True)
class Workload:
    """``size``: burst jobs, sustained rate or chain length; ``reps``: chains;
    ``duration``: sustained seconds."""

    name: str
    kind: str
    size: int
    duration: int = 60
    reps: int = 5

    @property
    def tasks(self) -> int:
        """Tasks the workload runs."""
        return {"burst": self.size, "sustained": self.size * self.duration}.get(
            self.kind, self.size * self.reps
        )


FULL = {
    "burst5k": Workload("burst5k", "burst", 5000),
    "burst25k": Workload("burst25k", "burst", 25000),
    "sus500": Workload("sus500", "sustained", 500),
    "sus1000": Workload("sus1000", "sustained", 1000),
    "chain": Workload("chain", "chain", 40),
}
QUICK = {
    "burst5k": Workload("burst5k", "burst", 500),
    "burst25k": Workload("burst25k", "burst", 1000),
    "sus500": Workload("sus500", "sustained", 100, duration=10),
    "sus1000": Workload("sus1000", "sustained", 200, duration=10),
    "chain": Workload("chain", "chain", 10, reps=2),
}


def cronlog_argv(w: Workload, bootstrap: str, out: Path) -> list[str]:
    """The cronlog bench of workload ``w``, its figures to ``out``."""
    common = ["--isolation", "thread", "--bootstrap", bootstrap, "--json", str(out)]
    cluster = ["--workers", str(WORKERS), "--slots", str(SLOTS)]
    if w.kind == "burst":
        args = ["bench/burst.py", "--jobs", str(w.size)]
    elif w.kind == "sustained":
        args = ["bench/sustained.py", "--rate", str(w.size), "--duration", str(w.duration)]
    else:
        args = ["bench/dag_chain.py", "--tasks", str(w.size), "--runs", str(w.reps)]
    return [sys.executable, *args, *cluster, *common]


def celery_argv(w: Workload, peers: Path, quick: bool) -> list[str]:
    """``peer_celery.py`` for workload ``w`` (through :data:`PATCHED` with ``--quick``)."""
    script = str(peers / "peer_celery.py")
    pool = ["--pool", "prefork", "--concurrency", str(CELERY_CONCURRENCY)]
    if w.kind == "burst":
        args = ["--workload", "w1", "--n", str(w.size)] + (
            ["--lead", "60"] if w.size > 20000 else []
        )
    elif w.kind == "sustained":
        args = ["--workload", "w2", "--rate", str(w.size)]
    else:
        args = ["--workload", "w3", "--reps", str(w.reps)]
    head = [str(PEERS_PY), "-c", PATCHED, script] if quick else [str(PEERS_PY), script]
    return [*head, *args, *pool]


def process_name(pid: int) -> str:
    """What a process of a run is, from its argv: scheduler, worker, redis-server, ..."""
    argv = proc_cpu.cmdline(pid)
    text = " ".join(argv)
    for needle, name in (
        ("services.scheduler", "scheduler"),
        ("services.worker", "workers"),
        ("redis-server", "redis-server"),
        ("celery", "celery worker"),
    ):
        if needle in text:
            return name
    return Path(argv[0]).name if argv and argv[0] else f"pid {pid}"


def broker_pid_by_port(bootstrap: str) -> int | None:
    """The pid listening on the first bootstrap address's port (``ss -ltnp``), if ours to see."""
    port = bootstrap.split(",")[0].rsplit(":", 1)[-1]
    ss = shutil.which("ss")
    if ss is None:
        return None
    argv = [ss, "-ltnpH", f"sport = :{port}"]
    out = subprocess.run(argv, capture_output=True, text=True, check=False).stdout  # noqa: S603
    found = re.search(r"pid=(\d+)", out)
    return int(found.group(1)) if found else None


def load_avg() -> list[float]:
    """The 1, 5 and 15 minute load averages (/proc/loadavg)."""
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def launch(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start a run's driver in a session of its own, its output on our stderr."""
    return subprocess.Popen(  # noqa: S603 (our benches and the peer's, argv lists)
        argv, cwd=cwd, env=env, stdout=sys.stderr, stderr=sys.stderr, start_new_session=True
    )


def finish(
    proc: subprocess.Popen[bytes], deadline: float, on_tick: Callable[[], None] | None = None
) -> int:
    """Wait for ``proc`` (calling ``on_tick()`` every 0.25 s); at ``deadline`` or on Ctrl-C,
    :func:`stop` it (a KeyboardInterrupt: the cronlog benches and the peer stop what they
    started in their ``finally``). Returns the exit code."""
    try:
        while proc.poll() is None and time.time() < deadline:
            if on_tick is not None:
                on_tick()
            time.sleep(0.25)
    except KeyboardInterrupt:  # Ctrl-C reaches us only: the run has a session of its own
        stop(proc)
        raise
    return proc.returncode if proc.returncode is not None else stop(proc)


def stop(proc: subprocess.Popen[bytes]) -> int:
    """SIGINT ``proc``, SIGKILL it after 60 s; return its exit code."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGINT)
        try:
            return proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()


def cpu_by_name(poller: proc_cpu.Poller, window: tuple[float, float]) -> dict[str, float]:
    """CPU seconds in ``window`` per process name (the 4 workers summed as ``workers``)."""
    out: dict[str, float] = {}
    for unit, cpu in proc_cpu.window_cpu(poller.samples, *window).items():
        name = poller.names.get(unit, str(unit))
        out[name] = out.get(name, 0.0) + cpu
    return out


def run_cronlog(
    w: Workload, broker: int | None, bootstrap: str, tmp: Path, env: dict[str, str]
) -> dict[str, Any]:
    """One run of ``w`` by cronlog; returns the run's figures, window and CPU."""
    out = tmp / f"cronlog-{w.name}-{time.time_ns()}.json"
    proc = launch(cronlog_argv(w, bootstrap, out), ROOT, env)
    poller = proc_cpu.Poller(proc.pid, {"broker": broker} if broker else {}, process_name).start()
    rc = finish(proc, time.time() + RUN_TIMEOUT_S)
    poller.stop()
    if rc != 0 or not out.exists():
        return {"error": f"{cronlog_argv(w, bootstrap, out)[1]} exit {rc}"}
    doc = json.loads(out.read_text())
    figures = doc["figures"]
    if w.kind == "sustained":
        figures["windows_growing"] = windows_growing(figures["window_p99_s"])
    window = (doc["window"][0], doc["window"][1])
    tasks = w.tasks - int(figures.get("missing", 0))
    return {
        "figures": figures,
        "window": window,
        "tasks": tasks,
        "cpu_s": cpu_by_name(poller, window),
    }


def peer_figures(kind: str, run: dict[str, Any]) -> dict[str, Any]:
    """The figures of one peer result run, under the names cronlog's benches use."""
    s = run["summary"]
    if kind == "burst":
        keys = {
            "last_started_s": "last_exec_lag_s",
            "lag_p50_s": "lag_p50_s",
            "lag_p99_s": "lag_p99_s",
        }
    elif kind == "sustained":
        keys = {"lag_p50_s": "lag_p50_s", "lag_p99_s": "lag_p99_s", "lag_max_s": "lag_max_s"}
    else:
        keys = {"hop_p50_s": "hop_p50_s", "hop_p99_s": "hop_p99_s", "hop_max_s": "hop_max_s"}
    figures = {mine: s.get(theirs) for mine, theirs in keys.items()}
    if kind == "chain":
        figures["missing"] = s.get("missing_tasks", 0)
    else:
        figures["missing"] = s.get("missing", 0)
    figures["duplicates"] = s.get("duplicate_executions", 0)
    if kind == "sustained":
        p99s = [b["p99_s"] for b in run.get("lag_timeline", [])]
        figures["window_p99_s"] = p99s
        figures["windows_growing"] = windows_growing(p99s)
    return figures


def run_celery(w: Workload, peers: Path, quick: bool, tmp: Path) -> dict[str, Any]:
    """One run of ``w`` by the Celery peer; its window is read off its sink as it fills."""
    results = Path(tempfile.mkdtemp(prefix="results-", dir=tmp))
    env = {**os.environ, "PEERS_RESULTS": str(results)}
    env.update(COMPARE_W2_DURATION_S=str(w.duration), COMPARE_W3_LEN=str(w.size))
    spec = importlib.util.spec_from_file_location("peers_sink", peers / "sink.py")
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {peers / 'sink.py'}")
    sink = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sink)
    proc = launch(celery_argv(w, peers, quick), peers, env)
    poller = proc_cpu.Poller(proc.pid, {}, process_name).start()
    seen: dict[str, Any] = {"dir": None, "start": None, "end": None, "count": -1, "changed": None}

    def tick() -> None:
        if seen["end"] is not None:
            return
        if seen["dir"] is None:
            dirs = [proc_cpu.environ(p).get("PEERS_SINK_DIR") for p in list(poller.names)]
            seen["dir"] = next((d for d in dirs if d), None)
            return
        try:
            count = sink.count_lines(seen["dir"])
        except OSError:  # the peer deleted its work dir: done
            return
        now = time.time()
        if count != seen["count"]:
            seen["count"], seen["changed"] = count, now
        if seen["start"] is None and count >= PEER_WARM:
            seen["start"] = now
        if seen["end"] is None and count >= PEER_WARM + w.tasks:
            seen["end"] = now

    rc = finish(proc, time.time() + RUN_TIMEOUT_S, tick)
    poller.stop()
    files = sorted(results.glob("*.json"))
    if rc != 0 or not files or seen["start"] is None:
        return {"error": f"peer_celery.py exit {rc}"}
    run = json.loads(files[0].read_text())["runs"][-1]
    figures = peer_figures(w.kind, run)
    window = (seen["start"], seen["end"] or seen["changed"])
    tasks = w.tasks - int(figures["missing"])
    return {
        "figures": figures,
        "window": window,
        "tasks": tasks,
        "cpu_s": cpu_by_name(poller, window),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--workloads", default=",".join(FULL), help="comma-separated, of: " + ", ".join(FULL)
    )
    p.add_argument("--runs", type=int, default=2, help="A B pairs per workload")
    p.add_argument("--quick", action="store_true", help="small sizes: a try-out, not a measurement")
    p.add_argument(
        "--json", type=Path, default=None, metavar="FILE", help="keep every run's figures"
    )
    p.add_argument(
        "--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP"), help="default: a private broker"
    )
    p.add_argument(
        "--peers",
        type=Path,
        default=Path(
            os.environ.get(
                "PEERS_DIR",
                next(
                    (d for d in PEERS_DIRS if d.joinpath("peer_celery.py").exists()), PEERS_DIRS[0]
                ),
            )
        ),
    )
    args = p.parse_args()
    sizes = QUICK if args.quick else FULL
    names = [n.strip() for n in args.workloads.split(",") if n.strip()]
    unknown = [n for n in names if n not in sizes]
    if unknown:
        p.error(f"--workloads: unknown {', '.join(unknown)} (known: {', '.join(sizes)})")
    if not args.peers.joinpath("peer_celery.py").exists() or not PEERS_PY.exists():
        p.error(f"--peers: no {args.peers}/peer_celery.py or no {PEERS_PY} (bash setup.sh there)")
    tmp = Path(tempfile.mkdtemp(prefix="cronlog-compare-"))
    private = None if args.bootstrap else PrivateBroker(tmp / "kafka")
    if private is not None:  # plaintext, whatever the caller's shell says
        private.env["CRONLOG_KAFKA_SECURE"] = "0"
    runs: list[dict[str, Any]] = []
    try:
        if private is not None:
            bootstrap = private.start()
            broker: int | None = int((private.home / "kafka.pid").read_text())
            # bench/burst.py's own CPU line then names the broker too
            env = {**os.environ, "CRONLOG_KAFKA_HOME": str(private.home)}
        else:
            bootstrap, broker = args.bootstrap, broker_pid_by_port(args.bootstrap)
            env = dict(os.environ)
        print(
            f"broker {bootstrap}, JVM pid {broker}; files under {tmp}", file=sys.stderr, flush=True
        )
        for name in names:
            w = sizes[name]
            for r in range(1, args.runs + 1):
                for system in ("cronlog", "celery"):
                    head = {
                        "system": system,
                        "workload": name,
                        "run": r,
                        "load_at_start": load_avg(),
                    }
                    head["started_utc"] = datetime.now(UTC).isoformat(timespec="seconds")
                    print(
                        f"== {system} {name} run {r} (load {head['load_at_start']})",
                        file=sys.stderr,
                        flush=True,
                    )
                    if system == "cronlog":
                        got = run_cronlog(w, broker, bootstrap, tmp, env)
                    else:
                        got = run_celery(w, args.peers, args.quick, tmp)
                    runs.append({**head, **got})
                    if args.json is not None:
                        args.json.write_text(
                            json.dumps({"quick": args.quick, "runs": runs}, indent=1) + "\n"
                        )
    finally:
        if private is not None:
            private.destroy()
    kinds = {n: sizes[n].kind for n in names}
    print(
        ("quick sizes: a try-out, NOT a measurement\n\n" if args.quick else "") + table(runs, kinds)
    )
    return 1 if any(r.get("error") for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
