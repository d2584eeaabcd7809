"""A chaos run: schedulers and workers killed (-9) and restarted at random, the broker stopped
and started, bad records appended to the commands topic; then the verdict from run-events.

Used by ``tests/chaos/test_chaos.py`` (short) and ``bench/chaos.py`` (long). The broker must
be one the run may stop (``PrivateBroker``), never the shared one.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.model import JobSpec, RetryPolicy, Schedule, ScheduleKind, TaskKind, main_task
from tests.chaos.audit import Audit, Injected, JobPlan, Rec, audit_run
from tests.chaos.broker_kill import BrokerKill, kill_node, measure_pause, pick_victim
from tests.chaos.fold_progress import Folded, fold_clocks, wait_folded
from tests.integration.harness import ROOT, Cluster, Proc, last_fatal_line, planned_exit
from topology.kafka.bootstrap import ensure_topics
from topology.kafka.config import KafkaSettings
from topology.kafka.log_reader import LogReadError, ends_reached
from topology.kafka.partitioning import partition_for
from topology.wire.codec import Codec, decode_dead_letter

NOOP = "tests.unit.tasks_for_tests:noop"
QUIET = {"log_level": 2}
"""librdkafka logs of the harness's own clients: critical only (a broker stop is expected)."""
MAX_ACTIVE_RUNS = 2
"""Per job. Three workers claim ~60 tasks/s on a 2-core box while 500 jobs on 2-5 s
schedules fire ~160 runs/s: the backlog is bounded here (ticks past it are TickSkipped
``max_active_runs``, accounted for) so that the drain after the pause stays short."""
PERIODS = (2, 3, 4, 5)
"""Schedule periods, seconds; each divides 60, so ``*/N`` seconds cron ticks are multiples."""


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class PrivateBroker:
    """A broker of the run's own (``ops/kafka`` with its own CRONLOG_KAFKA_HOME and port), or
    with ``nodes=3`` a replicated cluster of its own (``ops/kafka --nodes 3``: node i on
    client port ``port + 2(i-1)``; by default ports in 30000-32767, below the ephemeral range)."""

    def __init__(
        self, home: Path, port: int | None = None, nodes: int = 1, properties: str = ""
    ) -> None:
        """``properties``: extra server properties, ``key=value`` lines
        (``CRONLOG_KAFKA_PROPERTIES``)."""
        self.home = home
        self.nodes = nodes
        if port is None:
            rng = random.Random()
            # every port stays below Linux's ephemeral range (32768-60999): a client's
            # reconnect loop to a stopped broker's port there can connect to itself and hold
            # the port (the broker then cannot bind it on restart: 2 of 3 starts, issue 25),
            # and a cluster's nodes' outgoing connections, opened while the others start,
            # must not take one of its ports
            low, high = (30000, 32700) if nodes == 1 else (31000, 32700)
            port = next(
                p
                for p in (rng.randrange(low, high, 2) for _ in range(200))
                if all(_port_free(p + i) for i in range(2 * nodes))
            )
        self.port = port
        self.env = {
            **os.environ,
            "CRONLOG_KAFKA_PORT": str(port),
            "CRONLOG_KAFKA_HOME": str(home),
            "CRONLOG_KAFKA_NODES": str(nodes),
            "CRONLOG_KAFKA_PROPERTIES": properties,
        }

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.port + 2 * i}" for i in range(self.nodes))

    def kill9(self, node: int) -> None:
        """``kill -9`` node ``node`` (1..nodes) of the cluster; ``start`` brings it back."""
        home = self.home if self.nodes == 1 else self.home / f"node{node}"  # ops/kafka's layout
        kill_node(str(home / "kafka.pid"))

    def _ops(self, action: str) -> str:
        out = subprocess.run(
            [str(ROOT / "ops" / "kafka"), action],
            env=self.env,
            text=True,
            capture_output=True,
            timeout=300,
            check=False,
        )
        if out.returncode != 0:
            raise RuntimeError(f"ops/kafka {action} failed: {out.stderr[-2000:]}")
        return out.stdout.strip()

    def start(self) -> str:
        """Start (or restart) it; returns the bootstrap address once it answers."""
        return self._ops("start").splitlines()[-1]

    def stop(self) -> None:
        """Controlled shutdown (SIGTERM, SIGKILL after 30 s)."""
        self._ops("stop")

    def destroy(self) -> None:
        """Stop it and delete its home (data included)."""
        try:
            self.stop()
        finally:
            shutil.rmtree(self.home, ignore_errors=True)


def owned_partitions(proc: Proc) -> list[int]:
    """The command partitions a scheduler last said it folds (its ``partitions_owned`` line)."""
    if not proc.log_path.exists():
        return []
    lines = [
        ln
        for ln in proc.log_path.read_text(errors="replace").splitlines()
        if "action=partitions_owned" in ln
    ]
    if not lines:
        return []
    found = re.search(r"partitions=\[([0-9, ]*)\]", lines[-1])
    return [int(x) for x in found.group(1).split(",") if x.strip()] if found else []


def read_all(settings: KafkaSettings, topic: str, timeout: float = 300.0) -> list[Rec]:
    """Every record of ``topic`` up to the end offsets sampled now."""
    consumer = Consumer(settings.consumer_config(f"chaos-audit-{uuid.uuid4().hex}"))
    try:
        parts = list(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in parts
        }
        todo = {p for p in parts if ends[p] > 0}
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        out: list[Rec] = []
        deadline = time.monotonic() + timeout
        while todo and time.monotonic() < deadline:
            msgs = consumer.consume(2000, timeout=0.5)
            for m in msgs:
                if m.error():
                    continue
                p, off = m.partition(), m.offset()
                if off < ends[p]:
                    out.append(Rec(p, off, m.timestamp()[1], m.value() or b""))
                if off + 1 >= ends[p]:
                    todo.discard(p)
            if not msgs:  # commit markers end transactional partitions: ask the position
                todo -= ends_reached(consumer, topic, {p: ends[p] for p in todo})
        if todo:
            raise TimeoutError(f"{topic}: partitions {sorted(todo)} not read to the end")
        return out
    finally:
        consumer.close()


@dataclass
class ChaosConfig:
    """One chaos run's shape.

    Attributes:
        duration_s: seconds of chaos (kills, bad input, the broker restart).
        jobs: jobs on 2-5 s schedules (half ``every``, half 6-field cron).
        kills: kill -9s of schedulers and workers, at random moments of the chaos.
        schedulers, workers: process counts.
        partitions: partition count of the run's topics.
        broker_restarts: stops/starts of the broker (down ``broker_down_s`` each).
        broker_kills: ``kill -9`` of one node of a 3-node cluster (the transaction
            coordinator's), restarted ``broker_down_s`` later; needs ``PrivateBroker(nodes=3)``.
        bad_records: bad records of each kind appended during the chaos.
        max_restart_delay_s: a killed process is restarted 0.5..this many seconds later.
        session_timeout_s: the schedulers' consumer-group session timeout.
        settle_s: after the chaos: seconds with everything up before the jobs are paused
            (then, before pausing, the folds must have read the log to its end).
        drain_timeout_s: most seconds to wait for every run to end after pausing.
        fold_timeout_s: most seconds each wait for the folds to read the commands topic to
            its end may take (before the pause, after it, after the workers stop).
        seed: the random seed (printed; rerun with it to repeat the choices).
    """

    duration_s: float = 120.0
    jobs: int = 500
    kills: int = 8
    schedulers: int = 2
    workers: int = 3
    partitions: int = 6
    broker_restarts: int = 1
    broker_kills: int = 0
    broker_down_s: float = 8.0
    bad_records: int = 2
    max_restart_delay_s: float = 6.0
    session_timeout_s: float = 10.0
    settle_s: float = 30.0
    drain_timeout_s: float = 120.0
    fold_timeout_s: float = 120.0
    seed: int = field(default_factory=lambda: random.randrange(1 << 30))


@dataclass
class ChaosReport:
    """What happened and the verdict."""

    config: ChaosConfig
    audit: Audit
    kills: list[str] = field(default_factory=list)
    failovers_s: list[float] = field(default_factory=list)
    broker_restarts_s: list[float] = field(default_factory=list)
    broker_kills: list[BrokerKill] = field(default_factory=list)
    topic_prefix: str = ""
    replay_rc: int | None = None
    replay_output: str = ""
    chaos_s: float = 0.0
    total_s: float = 0.0
    crashed: list[str] = field(default_factory=list)
    watchdog_exits: list[str] = field(default_factory=list)
    unfinished_runs: int = 0
    folded: list[Folded] = field(default_factory=list)

    def lines(self) -> list[str]:
        """Human-readable summary."""
        a, c = self.audit, self.config
        fo = sorted(self.failovers_s)
        med = fo[len(fo) // 2] if fo else None
        return [
            f"chaos: {self.chaos_s:.0f} s of chaos ({self.total_s:.0f} s in all), seed {c.seed}, "
            f"{c.jobs} jobs, {c.schedulers} schedulers, {c.workers} workers, "
            f"{c.partitions} partitions",
            f"kills survived: {len(self.kills)} ({', '.join(self.kills)})",
            f"broker restarts: {len(self.broker_restarts_s)} (down→up s: "
            f"{[round(x, 1) for x in self.broker_restarts_s]})",
            *(f"broker kill -9: {k.line()}" for k in self.broker_kills),
            "scheduler kill → first run-event on its partitions, s: "
            f"median {med if med is None else round(med, 1)}, "
            f"max {round(fo[-1], 1) if fo else None} (n={len(fo)})",
            f"ticks expected {a.ticks_expected}, run {a.ticks_run} ({a.queued} of them queued "
            f"first), skipped {a.skipped}; lease expiries {a.lease_expiries}; "
            f"runs {a.runs}; attempts succeeded {a.succeeded_attempts}, failed "
            f"{a.failed_attempts}; events {a.events} ({a.redelivered} re-delivered)",
            f"late ticks (first decided > 5 s after): {a.late_ticks}, latest "
            f"{a.max_tick_lag_s:.0f} s; missed (catch-up policy, fold behind > misfire "
            f"grace): {a.missed_ticks}; leases lapsed at teardown (after the fold's last "
            f"Tick): {a.lapsed_at_teardown}",
            *(f.line() for f in self.folded),
            f"runs not ended after the drain: {self.unfinished_runs}",
            f"rejected: {a.rejected}",
            f"injected: {a.injected}",
            "counts (all must be 0): " + ", ".join(f"{k}={v}" for k, v in a.failures().items()),
            *(f"  e.g. {k}: {v}" for k, v in a.examples.items()),
            f"replay --verify: rc={self.replay_rc}",
            *(
                [
                    "schedulers ended by their watchdog (restarted): "
                    + "; ".join(self.watchdog_exits)
                ]
                if self.watchdog_exits
                else []
            ),
            *(
                ["processes that exited by themselves: " + ", ".join(self.crashed)]
                if self.crashed
                else []
            ),
        ]


class _Injector:
    """Appends bad records to the commands topic and remembers where each one landed."""

    def __init__(self, cluster: Cluster, rng: random.Random, manual_job: str) -> None:
        self.cluster = cluster
        self.rng = rng
        self.codec = Codec()
        self.manual_job = manual_job
        self.n = cluster.settings.partitions
        self.producer = Producer(
            cluster.settings.producer_config(
                **{"message.max.bytes": 1_000_000, "message.timeout.ms": 240_000}, **QUIET
            )
        )
        self.injected: list[Injected] = []
        self.failed: list[str] = []
        self.claims: list[ev.TaskClaimed] = []
        self.run_job: dict[str, str] = {}
        self._lock = threading.Lock()

    def _produce(
        self,
        kind: str,
        key: bytes | None,
        value: bytes,
        expect: str,
        idem_key: str | None = None,
        partition: int | None = None,
    ) -> None:
        def report(err: object, msg: object) -> None:
            if err is not None:
                self.failed.append(f"{kind}: {err}")
                return
            with self._lock:
                self.injected.append(
                    Injected(
                        kind,
                        msg.partition(),
                        msg.offset(),  # type: ignore[attr-defined]
                        idem_key,
                        expect,
                    )
                )

        kw = {} if partition is None else {"partition": partition}
        self.producer.produce(
            self.cluster.topics.commands, key=key, value=value, on_delivery=report, **kw
        )
        self.producer.poll(0)

    def _valid(self, job_id: str, command: cmd.Command, idem: str | None = None) -> bytes:
        return self.codec.encode_command(
            cmd.Envelope(idem_key=idem or uuid.uuid4().hex, job_id=job_id, command=command)
        )

    def inject(self, kind: str) -> None:
        """Append one bad record of ``kind`` (see ``KINDS``)."""
        r = self.rng
        key = f"bad-{kind}-{uuid.uuid4().hex[:6]}".encode()
        if kind == "malformed":
            value = r.choice(
                [
                    os.urandom(r.randrange(1, 400)),
                    b"",
                    b"\xc3\x01" + os.urandom(40),
                    self._valid(key.decode(), cmd.PauseJob())[:-3],
                ]
            )
            self._produce(kind, key, value, "dead_letter")
        elif kind == "wrong_partition":
            right = partition_for(key, self.n)
            self._produce(
                kind,
                key,
                self._valid(key.decode(), cmd.TriggerJob()),
                "dead_letter",
                partition=(right + 1 + r.randrange(self.n - 1)) % self.n,
            )
        elif kind == "unknown_type":
            env = self._valid(key.decode(), cmd.PauseJob())
            header = env[:10]
            body = (
                _avro_str(uuid.uuid4().hex)
                + _avro_str(key.decode())
                + _zigzag(r.randrange(40, 200))
            )
            self._produce(kind, key, header + body, "dead_letter")
        elif kind == "oversized":
            self._produce(kind, key, b"\xc3\x01" + os.urandom(900_000), "dead_letter")
        elif kind == "stale_completion":
            with self._lock:
                claim = self.rng.choice(self.claims) if self.claims else None
            if claim is None:
                return
            idem = f"chaos-stale-{uuid.uuid4().hex}"
            epoch = max(0, claim.epoch - 1)
            worker = claim.worker_id if epoch != claim.epoch else "chaos-zombie"
            job_id = self.run_job[claim.run_id]
            complete = cmd.CompleteTask(
                run_id=claim.run_id,
                task=claim.task,
                attempt=claim.attempt,
                epoch=epoch,
                worker_id=worker,
                succeeded=True,
                exit_code=0,
                failure_kind=None,
                output_tail="zombie",
                started_at=datetime.now(UTC),
                finished_at=datetime.now(UTC),
            )
            self._produce(
                kind,
                job_id.encode(),
                self._valid(job_id, complete, idem),
                "rejected",
                idem_key=idem,
            )
        elif kind == "duplicate":
            idem = f"chaos-dup-{uuid.uuid4().hex}"
            value = self._valid(self.manual_job, cmd.TriggerJob(), idem)
            self._produce(kind, self.manual_job.encode(), value, "once", idem_key=idem)
            self._produce(kind, self.manual_job.encode(), value, "once", idem_key=idem)
        else:
            raise ValueError(kind)

    def flush(self) -> None:
        remaining = self.producer.flush(240)
        if remaining:
            self.failed.append(f"{remaining} bad records never delivered")


KINDS = (
    "malformed",
    "wrong_partition",
    "unknown_type",
    "oversized",
    "stale_completion",
    "duplicate",
)


def _zigzag(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if not n:
            out.append(b)
            return bytes(out)
        out.append(b | 0x80)


def _avro_str(s: str) -> bytes:
    return _zigzag(len(s.encode())) + s.encode()


class _Watcher(threading.Thread):
    """Follows run-events live: remembers claims (for stale completions) and registrations."""

    def __init__(self, settings: KafkaSettings, injector: _Injector) -> None:
        super().__init__(daemon=True)
        self.settings = settings
        self.injector = injector
        self.codec = Codec()
        self.registered: set[str] = set()
        self.active: dict[str, str] = {}
        self.stop_flag = threading.Event()

    def run(self) -> None:
        topic = f"{self.settings.topic_prefix}cronlog.run-events"
        consumer = Consumer(
            self.settings.consumer_config(f"chaos-watch-{uuid.uuid4().hex}", **QUIET)
        )
        parts = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        try:
            while not self.stop_flag.is_set():
                for m in consumer.consume(500, timeout=0.3):
                    if m.error():
                        continue
                    self._see(self.codec.decode_event(m.value()))
        finally:
            consumer.close()

    def _see(self, e: ev.RunEvent) -> None:
        body = e.event
        if isinstance(body, ev.JobRegistered):
            self.registered.add(e.job_id)
        elif isinstance(body, ev.RunScheduled):
            self.injector.run_job[body.run_id] = e.job_id
            self.active[body.run_id] = e.job_id
        elif isinstance(body, ev.RunSucceeded | ev.RunFailed | ev.RunCancelled):
            self.active.pop(body.run_id, None)
        elif isinstance(body, ev.TaskClaimed):
            claims = self.injector.claims
            with self.injector._lock:
                claims.append(body)
                if len(claims) > 500:
                    del claims[:250]


def job_plans(n: int) -> list[tuple[JobPlan, JobSpec]]:
    """``n`` jobs: periods 2..5 s, alternately ``every`` and 6-field cron, 1 in 10 exec."""
    out = []
    for i in range(n):
        period = PERIODS[i % len(PERIODS)]
        if (i // len(PERIODS)) % 2:
            schedule = Schedule(ScheduleKind.CRON, f"*/{period} * * * * *")
        else:
            schedule = Schedule(ScheduleKind.EVERY, interval=timedelta(seconds=period))
        tasks = (
            main_task(("true",)) if i % 10 == 9 else main_task(kind=TaskKind.PYTHON, callable=NOOP)
        )
        spec = JobSpec(
            name=f"chaos {i}",
            schedule=schedule,
            timeout=timedelta(seconds=30),
            grace=timedelta(seconds=2),
            lease_ttl=timedelta(seconds=6),
            retry_policy=RetryPolicy(max_attempts=3, backoff=timedelta(seconds=1), jitter=0.0),
            max_active_runs=MAX_ACTIVE_RUNS,
            task_specs=tasks,
        )
        out.append((JobPlan(f"c{i:04d}", period), spec))
    return out


def _wait(what: str, cond: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.5)
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")


def run_chaos(
    cfg: ChaosConfig, broker: PrivateBroker, tmp: Path, say: Callable[[str], None] = print
) -> ChaosReport:
    """Run one chaos experiment against ``broker`` (started and stopped here, not destroyed)."""
    if cfg.broker_kills and broker.nodes < 3:
        raise ValueError("broker_kills needs a PrivateBroker of 3 nodes (one lost leaves 2 ISR)")
    t_begin = time.monotonic()
    rng = random.Random(cfg.seed)
    broker.start()
    settings = KafkaSettings(
        bootstrap=broker.bootstrap,
        topic_prefix=f"chaos{uuid.uuid4().hex[:6]}.",
        partitions=cfg.partitions,
    )
    ensure_topics(settings)
    cluster = Cluster(settings, tmp)
    sched_env = {"CRONLOG_SESSION_TIMEOUT_S": str(cfg.session_timeout_s)}
    worker_env = {
        "CRONLOG_SLOTS": "8",
        "CRONLOG_DRAIN_S": "3",
    }
    schedulers = [cluster.scheduler(f"s{i + 1}", **sched_env) for i in range(cfg.schedulers)]
    workers = [cluster.worker(f"w{i + 1}", **worker_env) for i in range(cfg.workers)]
    manual_job = "chaos-manual"
    injector = _Injector(cluster, rng, manual_job)
    watcher = _Watcher(settings, injector)
    watcher.start()
    report = ChaosReport(cfg, Audit(), topic_prefix=settings.topic_prefix)
    try:
        plans = job_plans(cfg.jobs)
        producer = Producer(settings.producer_config(**QUIET))
        codec = Codec()
        for plan, spec in plans:
            producer.produce(
                settings.topic_prefix + "cronlog.commands",
                key=plan.job_id.encode(),
                value=codec.encode_command(
                    cmd.Envelope(
                        idem_key=f"register:{plan.job_id}",
                        job_id=plan.job_id,
                        command=cmd.RegisterJob(spec=spec),
                    )
                ),
            )
            producer.poll(0)
        manual = JobSpec(
            name="manual",
            schedule=Schedule(ScheduleKind.MANUAL),
            task_specs=main_task(kind=TaskKind.PYTHON, callable=NOOP),
        )
        producer.produce(
            settings.topic_prefix + "cronlog.commands",
            key=manual_job.encode(),
            value=codec.encode_command(
                cmd.Envelope(
                    idem_key="register:manual",
                    job_id=manual_job,
                    command=cmd.RegisterJob(spec=manual),
                )
            ),
        )
        producer.flush(30)
        _wait("every job registered", lambda: len(watcher.registered) >= cfg.jobs + 1, 180)
        t_registered = datetime.now(UTC)
        say(
            f"{cfg.jobs} jobs registered after {time.monotonic() - t_begin:.0f} s; "
            f"chaos for {cfg.duration_s:.0f} s (seed {cfg.seed})"
        )
        kill_log: list[tuple[float, str, list[int]]] = []
        t_chaos = time.monotonic()
        _chaos(cfg, rng, broker, schedulers, workers, injector, kill_log, report, say)
        report.chaos_s = time.monotonic() - t_chaos
        t_chaos_end = datetime.now(UTC)
        for proc in schedulers + workers:
            if proc.popen is None or proc.popen.poll() is not None:
                proc.start()
        injector.flush()
        say(f"chaos over; settling {cfg.settle_s:.0f} s")
        time.sleep(cfg.settle_s)
        # every check judges what the folds decided: each waits, bounded, for them to have
        # read the log to its end first (an overloaded box left a fold minutes behind)
        _folded(report, settings, "before the pause", cfg, say)
        for plan, _spec in plans:
            producer.produce(
                settings.topic_prefix + "cronlog.commands",
                key=plan.job_id.encode(),
                value=codec.encode_command(
                    cmd.Envelope(
                        idem_key=f"pause:{plan.job_id}", job_id=plan.job_id, command=cmd.PauseJob()
                    )
                ),
            )
            producer.poll(0)
        producer.flush(30)
        _folded(report, settings, "the pauses", cfg, say)
        try:
            _wait(
                "every run to end after the pause", lambda: not watcher.active, cfg.drain_timeout_s
            )
        except TimeoutError:
            say(f"  {len(watcher.active)} runs still active after {cfg.drain_timeout_s:.0f} s")
        report.unfinished_runs = len(watcher.active)
        time.sleep(3)
        for proc in workers:
            proc.stop(20)
        _folded(report, settings, "after the workers stopped", cfg, say)
        for proc in schedulers:
            proc.stop(30)
        t_end = datetime.now(UTC)
        try:
            clocks = fold_clocks(settings)
        except LogReadError as exc:  # every lease is then judged at t_end, as before
            say(f"  the folds' clocks could not be read: {exc}")
            clocks = {}
        for p in schedulers + workers:  # exits after the chaos, during the settle and drain
            if p.popen is None or p.popen.returncode in (0, -15, None):
                continue
            _own_exit(report, p, f"{p.log_path.stem} rc={p.popen.returncode} after the chaos")
        records = read_all(settings, cluster.topics.run_events)
        dead = [
            (d.partition, d.offset)
            for d in (
                decode_dead_letter(r.value) for r in read_all(settings, cluster.topics.dead_letters)
            )
        ]
        margin = timedelta(seconds=10)
        report.audit = audit_run(
            records,
            dead,
            [p for p, _ in plans],
            (t_registered + margin, t_chaos_end - timedelta(seconds=3)),
            t_end,
            injector.injected,
            fold_clocks=clocks,
        )
        if injector.failed:
            report.audit.note("injection_failed", "; ".join(injector.failed[:5]))
        report.failovers_s = _failovers(records, kill_log)
        for kill in report.broker_kills:
            measure_pause(kill, records)
        replay = subprocess.run(
            [
                str(ROOT / ".venv" / "bin" / "cronlog"),
                "replay",
                "--verify",
                "--state-dir",
                str(tmp / "replay"),
            ],
            env=cluster.env(),
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        report.replay_rc = replay.returncode
        report.replay_output = (replay.stdout + replay.stderr)[-4000:]
        report.total_s = time.monotonic() - t_begin
        return report
    finally:
        watcher.stop_flag.set()
        cluster.stop_all()


def _folded(
    report: ChaosReport,
    settings: KafkaSettings,
    what: str,
    cfg: ChaosConfig,
    say: Callable[[str], None],
) -> None:
    """Wait for the folds to read the commands topic to its end (bounded) and say so."""
    folded = wait_folded(settings, what, cfg.fold_timeout_s)
    report.folded.append(folded)
    say(f"  {folded.line()}")


def _own_exit(report: ChaosReport, proc: Proc, what: str) -> None:
    """File a process's exit that was not one of our kills: a planned scheduler exit 70
    (``planned_exit``) among the watchdog exits, anything else among the crashes."""
    assert proc.popen is not None
    fatal = last_fatal_line(proc.log_path)
    if planned_exit(proc.log_path.stem, proc.popen.returncode, fatal):
        # the cause (``error=...``), not the fixed explanation that follows it
        cause = fatal[fatal.find("error=") :] if "error=" in fatal else fatal
        report.watchdog_exits.append(f"{what}: {cause[:240]}")
    else:
        report.crashed.append(what)


def _chaos(
    cfg: ChaosConfig,
    rng: random.Random,
    broker: PrivateBroker,
    schedulers: list[Proc],
    workers: list[Proc],
    injector: _Injector,
    kill_log: list[tuple[float, str, list[int]]],
    report: ChaosReport,
    say: Callable[[str], None],
) -> None:
    """Kill, restart, inject and restart the broker at random moments for cfg.duration_s."""
    start = time.monotonic()
    span = max(cfg.duration_s - 10, 1)
    plan: list[tuple[float, str, str]] = []
    plan += [(5 + rng.random() * span, "kill", "") for _ in range(cfg.kills)]
    plan += [(5 + rng.random() * span, "inject", k) for k in KINDS for _ in range(cfg.bad_records)]
    plan += [
        (cfg.duration_s * (i + 1) / (cfg.broker_restarts + 1), "broker", "")
        for i in range(cfg.broker_restarts)
    ]
    plan += [
        (cfg.duration_s * (i + 1) / (cfg.broker_kills + 1), "broker_kill", "")
        for i in range(cfg.broker_kills)
    ]
    plan.sort()
    restarts: list[tuple[float, Proc]] = []
    broker_thread: threading.Thread | None = None

    def bounce() -> None:
        t0 = time.monotonic()
        broker.stop()
        time.sleep(cfg.broker_down_s)
        try:
            broker.start()
        except RuntimeError as exc:  # a loaded box: the broker took past ops/kafka's 90 s
            say(f"  broker start failed ({str(exc)[-160:]}); starting it again")
            broker.start()
        report.broker_restarts_s.append(time.monotonic() - t0)
        say(f"  broker back after {time.monotonic() - t0:.1f} s")

    def kill_one() -> None:
        node, roles = pick_victim(broker.bootstrap, injector.cluster.topics.commands)
        kill = BrokerKill(time.time(), node, roles)
        t0 = time.monotonic()
        broker.kill9(node)
        report.broker_kills.append(kill)
        say(f"  kill -9 broker node {node} ({', '.join(roles)})")
        time.sleep(cfg.broker_down_s)
        broker.start()
        kill.back_s = time.monotonic() - t0
        say(f"  broker node {node} back after {kill.back_s:.1f} s")

    while plan or restarts or (broker_thread and broker_thread.is_alive()):
        now = time.monotonic() - start
        for due, proc in [r for r in restarts if r[0] <= now]:
            restarts.remove((due, proc))
            proc.start()
        if plan and plan[0][0] <= now:
            _, action, arg = plan.pop(0)
            if action in ("broker", "broker_kill") and broker_thread and broker_thread.is_alive():
                # one broker action at a time: the last restart is not over (a kill now would
                # take a second node of three, a loss the cluster is not meant to survive)
                plan.append((now + 1, action, arg))
                plan.sort()
                continue
            if action == "kill":
                alive = [
                    p
                    for p in schedulers + workers
                    if p.popen is not None and p.popen.poll() is None
                ]
                if alive:
                    victim = rng.choice(alive)
                    owned = owned_partitions(victim) if victim in schedulers else []
                    victim.kill9()
                    kill_log.append((time.time(), victim.log_path.stem, owned))
                    name = victim.log_path.stem
                    report.kills.append(name)
                    restarts.append(
                        (now + 0.5 + rng.random() * (cfg.max_restart_delay_s - 0.5), victim)
                    )
                    say(
                        f"  t={now:5.1f}s kill -9 {name}"
                        + (f" (partitions {owned})" if owned else "")
                    )
            elif action == "inject":
                injector.inject(arg)
            elif action == "broker":
                say(f"  t={now:5.1f}s broker stop for {cfg.broker_down_s:.0f} s")
                broker_thread = threading.Thread(target=bounce, daemon=True)
                broker_thread.start()
            elif action == "broker_kill":
                say(f"  t={now:5.1f}s broker kill -9 for {cfg.broker_down_s:.0f} s")
                broker_thread = threading.Thread(target=kill_one, daemon=True)
                broker_thread.start()
        for proc in schedulers + workers:
            # a process that died by itself (not one of our kills) is a finding: restart it,
            # and report it
            if (
                proc.popen is not None
                and proc.popen.poll() not in (None, -9)
                and all(r[1] is not proc for r in restarts)
            ):
                what = f"{proc.log_path.stem} exited rc={proc.popen.returncode} at t={now:.0f}s"
                _own_exit(report, proc, what)
                say(f"  {proc.log_path.stem} exited by itself rc={proc.popen.returncode}")
                proc.start()
        time.sleep(0.1)
        if time.monotonic() - start > cfg.duration_s and not plan and not restarts:
            break
    remaining = cfg.duration_s - (time.monotonic() - start)
    if remaining > 0:
        time.sleep(remaining)


def _failovers(records: list[Rec], kill_log: list[tuple[float, str, list[int]]]) -> list[float]:
    """Per scheduler kill: seconds until run-events arrive again on every partition it owned."""
    by_part: dict[int, list[int]] = {}
    for r in records:
        by_part.setdefault(r.partition, []).append(r.timestamp_ms)
    for ts in by_part.values():
        ts.sort()
    out = []
    for t_kill, _name, owned in kill_log:
        if not owned:
            continue
        kill_ms = int(t_kill * 1000)
        firsts = []
        for p in owned:
            after = [t for t in by_part.get(p, []) if t > kill_ms]
            if after:
                firsts.append(after[0])
        if len(firsts) == len(owned):
            out.append((max(firsts) - kill_ms) / 1000)
    return out
