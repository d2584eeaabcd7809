"""Shared helpers for the chaos reproduction scripts (run with PYTHONPATH=/work/main).

Every experiment gets its own topic prefix, state dirs, instance/worker ids and API port, and
every process it starts is tracked by pid (process group) so it is the only thing cleaned up.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from cronlog import events as ev
from topology.bootstrap import ensure_topics
from topology.codec import decode_dead_letter, decode_event, encode_command
from topology.config import KafkaSettings
from topology.topics import Topics

ROOT = Path(__file__).resolve().parents[2]
PY = str(ROOT / ".venv" / "bin" / "python")
SCRATCH = Path(os.environ.get("CHAOS_SCRATCH", "/tmp/breaker"))


@dataclass
class Svc:
    name: str
    module: str
    env: dict[str, str]
    log: Path
    popen: subprocess.Popen | None = None

    def start(self) -> "Svc":
        fh = self.log.open("ab")
        self.popen = subprocess.Popen([PY, "-m", f"services.{self.module}"], cwd=ROOT,
                                      env=self.env, stdout=fh, stderr=subprocess.STDOUT,
                                      start_new_session=True)
        with (SCRATCH / "pids").open("a") as f:
            f.write(f"{self.popen.pid} {self.name} {self.env.get('CRONLOG_TOPIC_PREFIX')}\n")
        return self

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            os.kill(self.popen.pid, sig)

    def kill9(self) -> None:
        if self.alive():
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.popen.wait()

    def stop(self, timeout: float = 10.0) -> None:
        if self.alive():
            try:
                os.killpg(self.popen.pid, signal.SIGTERM)
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill9()
            except ProcessLookupError:
                pass

    def grep(self, needle: str) -> list[str]:
        if not self.log.exists():
            return []
        return [l for l in self.log.read_text(errors="replace").splitlines() if needle in l]


@dataclass
class Exp:
    """One isolated experiment."""

    tag: str  # e.g. "brk1"
    bootstrap: str = os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:19092")
    partitions: int = 4
    svcs: list[Svc] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.prefix = f"{self.tag}."
        self.dir = SCRATCH / self.tag
        self.dir.mkdir(parents=True, exist_ok=True)
        self.settings = KafkaSettings(bootstrap=self.bootstrap, topic_prefix=self.prefix,
                                      partitions=self.partitions)
        self.topics = Topics.of(self.settings)
        self._producer: Producer | None = None

    def ensure(self) -> None:
        ensure_topics(self.settings)

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update({"KAFKA_BOOTSTRAP": self.bootstrap, "CRONLOG_TOPIC_PREFIX": self.prefix,
                    "CRONLOG_PARTITIONS": str(self.partitions), "PYTHONUNBUFFERED": "1"})
        env.update(extra)
        return env

    def scheduler(self, name: str = "s1", **extra: str) -> Svc:
        s = Svc(name, "scheduler", self.env(CRONLOG_INSTANCE_ID=f"{self.prefix}{name}",
                                            CRONLOG_STATE_DIR=str(self.dir / f"state-{name}"),
                                            **extra), self.dir / f"{name}.log")
        self.svcs.append(s)
        return s.start()

    def worker(self, name: str = "w1", **extra: str) -> Svc:
        s = Svc(name, "worker", self.env(CRONLOG_WORKER_ID=f"{self.prefix}{name}", **extra),
                self.dir / f"{name}.log")
        self.svcs.append(s)
        return s.start()

    def api(self, port: int, name: str = "api", **extra: str) -> Svc:
        s = Svc(name, "api", self.env(CRONLOG_API_PORT=str(port),
                                      CRONLOG_API_STATE_DIR=str(self.dir / f"state-{name}"),
                                      **extra), self.dir / f"{name}.log")
        self.svcs.append(s)
        return s.start()

    def producer(self) -> Producer:
        if self._producer is None:
            self._producer = Producer(self.settings.producer_config())
        return self._producer

    def send(self, envelope, key: bytes | None = None, partition: int | None = None) -> None:
        self.send_raw(envelope.job_id.encode() if key is None else key,
                      encode_command(envelope), partition)

    def send_raw(self, key: bytes | None, value: bytes | None, partition: int | None = None,
                 flush: bool = True) -> None:
        kw = {} if partition is None else {"partition": partition}
        p = self.producer()
        p.produce(self.topics.commands, key=key, value=value, **kw)
        if flush:
            p.flush(10)

    def stop_all(self) -> None:
        for s in self.svcs:
            s.stop(8)
        for s in self.svcs:
            s.kill9()


def read_topic(settings: KafkaSettings, topic: str, idle_s: float = 3.0,
               max_s: float = 120.0) -> list:
    """Every record of ``topic`` (confluent Message objects), read until idle."""
    c = Consumer(settings.consumer_config(f"chaos-reader-{os.getpid()}-{time.time_ns()}",
                                          **{"enable.partition.eof": True}))
    meta = c.list_topics(topic, timeout=10).topics[topic]
    parts = list(meta.partitions)
    highs = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
    c.assign([TopicPartition(topic, p, 0) for p in parts])
    out, last, start = [], time.monotonic(), time.monotonic()
    pos = {p: 0 for p in parts}
    while time.monotonic() - start < max_s:
        msgs = c.consume(1000, timeout=0.5)
        for m in msgs:
            if m.error():
                continue
            out.append(m)
            pos[m.partition()] = m.offset() + 1
            last = time.monotonic()
        if all(pos[p] >= highs[p] for p in parts) and time.monotonic() - last > 0.5:
            break
        if time.monotonic() - last > idle_s and not msgs:
            break
    c.close()
    return out


def run_events(exp: Exp) -> list[tuple[object, ev.RunEvent, bytes]]:
    """(message, decoded RunEvent, raw value) for every record on run-events."""
    out = []
    for m in read_topic(exp.settings, exp.topics.run_events):
        out.append((m, decode_event(m.value()), m.value()))
    return out


def dead_letters(exp: Exp) -> list:
    return [decode_dead_letter(m.value()) for m in read_topic(exp.settings, exp.topics.dead_letters)]


def analyze(records: list[tuple[object, ev.RunEvent, bytes]]) -> dict:
    """Invariant checks over the run-events log."""
    by_eid: dict[str, set[bytes]] = collections.defaultdict(set)
    eid_count = collections.Counter()
    sched: dict[tuple[str, int], set[str]] = collections.defaultdict(set)  # (job, tick ms) -> eids
    sched_runs = collections.Counter()
    skipped: dict[tuple[str, int], set[str]] = collections.defaultdict(set)
    succ: dict[tuple[str, str, int], set[str]] = collections.defaultdict(set)
    term: dict[tuple[str, str, int], set[tuple[str, str]]] = collections.defaultdict(set)
    run_end: dict[str, set[str]] = collections.defaultdict(set)
    types = collections.Counter()
    rejected = collections.Counter()
    for _m, rec, raw in records:
        by_eid[rec.event_id].add(raw)
        eid_count[rec.event_id] += 1
        e = rec.event
        types[type(e).__name__] += 1
        if isinstance(e, ev.RunScheduled) and e.trigger is not ev.RunTrigger.MANUAL:
            sched[(rec.job_id, int(e.scheduled_for.timestamp() * 1000))].add(rec.event_id)
        elif isinstance(e, ev.TickSkipped):
            skipped[(rec.job_id, int(e.scheduled_for.timestamp() * 1000))].add(rec.event_id)
        elif isinstance(e, ev.TaskSucceeded):
            succ[(e.run_id, e.task, e.attempt)].add(rec.event_id)
            term[(e.run_id, e.task, e.attempt)].add(("succeeded", rec.event_id))
        elif isinstance(e, ev.TaskFailed):
            term[(e.run_id, e.task, e.attempt)].add(("failed", rec.event_id))
        elif isinstance(e, (ev.RunSucceeded, ev.RunFailed)):
            run_end[e.run_id].add(rec.event_id)
        elif isinstance(e, ev.CommandRejected):
            rejected[(e.command, e.reason.value)] += 1
    return {
        "records": len(records),
        "types": dict(types),
        "rejected": {f"{k[0]}/{k[1]}": v for k, v in rejected.items()},
        "redelivered_same_event_id": sum(c - 1 for c in eid_count.values() if c > 1),
        "event_id_with_different_content": [k for k, v in by_eid.items() if len(v) > 1],
        "ticks_with_multiple_RunScheduled": {f"{k[0]}@{k[1]}": len(v)
                                             for k, v in sched.items() if len(v) > 1},
        "ticks_scheduled_and_skipped": [f"{k[0]}@{k[1]}" for k in sched if k in skipped],
        "attempts_with_multiple_TaskSucceeded": {f"{k}": len(v) for k, v in succ.items()
                                                 if len(v) > 1},
        "attempts_with_multiple_terminal": {f"{k}": sorted(x[0] for x in v)
                                            for k, v in term.items() if len(v) > 1},
        "runs_with_multiple_end_events": {k: len(v) for k, v in run_end.items() if len(v) > 1},
        "_sched": sched,
        "_skipped": skipped,
    }


def missing_ticks(an: dict, jobs: list[str], period_ms: int, t0_ms: int, t1_ms: int) -> dict:
    """For each job, the ticks in [t0, t1] (multiples of period) with neither run nor skip."""
    missing, skipped = {}, {}
    for j in jobs:
        t = (t0_ms // period_ms + 1) * period_ms
        while t <= t1_ms:
            if (j, t) not in an["_sched"]:
                if (j, t) in an["_skipped"]:
                    skipped.setdefault(j, []).append(t)
                else:
                    missing.setdefault(j, []).append(t)
            t += period_ms
    return {"missing": missing, "skipped": skipped}


def http(method: str, url: str, body: object = None, raw: bytes | None = None,
         headers: dict | None = None, timeout: float = 30.0) -> tuple[int, object]:
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            txt = r.read()
            return r.status, (json.loads(txt) if txt else None)
    except urllib.error.HTTPError as e:
        txt = e.read()
        try:
            return e.code, json.loads(txt)
        except Exception:
            return e.code, txt[:500]


def wait_http(url: str, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            code, _ = http("GET", url, timeout=2)
            if code == 200:
                return True
        except Exception:
            pass
        time.sleep(0.5)
    return False


def dump(obj: object) -> str:
    return json.dumps({k: v for k, v in obj.items() if not k.startswith("_")}, indent=1,
                      default=str) if isinstance(obj, dict) else json.dumps(obj, default=str)


if __name__ == "__main__":
    print("helpers only", file=sys.stderr)
