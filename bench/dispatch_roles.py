"""The child processes of bench/dispatch_share.py: one transactional producer of "ready"
records, and K consumers with slots (a share group's or a classic group's members).

Records carry ``>qq``: a sequence number (negative in aborted transactions) and the wall
clock (ns) at produce time. Each child reports over a multiprocessing queue:
``("txn", first, last, commit_ns)``, ``("took", idx, [(seq, produced_ns, took_ns,
delivery_count, partition, offset)])``,
``("held", idx, [seq], ns)`` and ``("done", idx, stats)``.
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event
from typing import Any

from confluent_kafka import (
    AcknowledgeType,
    Consumer,
    Message,
    Producer,
    ShareConsumer,
    TopicPartition,
)

VALUE = struct.Struct(">qq")
FLUSH_S = 0.05
"""How often a consumer sends what it took to the parent, seconds."""


@dataclass(frozen=True)
class Plan:
    """What the children do (a picklable subset of the command line)."""

    bootstrap: str
    topic: str
    group: str
    mode: str  # "share" | "classic"
    slots: int
    task_ms: float
    max_poll_records: int
    extras: str  # "release" | "keep": what a share consumer does with records beyond its slots
    role0: str  # "normal" | "stall-ack" | "stall-hold" | "kill": what consumer 0 does
    stall_s: float
    records: int
    rate: float  # records/s; 0 = one burst
    txn_records: int
    producer_batch: int  # the producer's batch.num.messages; 0 = librdkafka's default
    abort_every: int
    isolation: str


def produce(plan: Plan, out: Queue[Any], go: Event) -> None:
    """Append ``plan.records`` committed records in transactions of ``plan.txn_records`` (at
    ``plan.rate`` records/s, or at once), every ``abort_every``-th transaction aborted."""
    p = Producer(
        {
            "bootstrap.servers": plan.bootstrap,
            "transactional.id": f"{plan.topic}-producer",
            "partitioner": "murmur2_random",
            "linger.ms": 2,
            "log_level": 4,
            **({"batch.num.messages": plan.producer_batch} if plan.producer_batch else {}),
        }
    )
    p.init_transactions()
    go.wait()
    t0, seq, aborted, txn = time.monotonic(), 0, 0, 0
    while seq < plan.records:
        n = min(plan.txn_records, plan.records - seq)
        if plan.rate > 0:
            n = min(n, int((time.monotonic() - t0) * plan.rate) - seq)
            if n <= 0:
                time.sleep(0.001)
                continue
        txn += 1
        p.begin_transaction()
        if plan.abort_every and txn % plan.abort_every == 0:
            for i in range(n):
                aborted += 1
                p.produce(plan.topic, key=b"a%d" % i, value=VALUE.pack(-aborted, time.time_ns()))
            p.flush()  # the aborted records reach the log: that is what is tested
            p.abort_transaction()
            continue
        for s in range(seq, seq + n):
            p.produce(plan.topic, key=b"%d" % s, value=VALUE.pack(s, time.time_ns()))
        p.commit_transaction()
        out.put(("txn", seq, seq + n - 1, time.time_ns()))
        seq += n
    out.put(("done", -1, {"cpu_s": time.process_time(), "aborted": aborted, "txns": txn}))


@dataclass
class Slots:
    """Simulated task slots: a slot is busy until its task's end (monotonic seconds)."""

    size: int
    ends: list[float] = field(default_factory=list)

    def free(self) -> int:
        now = time.monotonic()
        self.ends = [t for t in self.ends if t > now]
        return self.size - len(self.ends)

    def occupy(self, task_s: float) -> None:
        self.ends.append(time.monotonic() + task_s)

    def block_all(self, seconds: float) -> None:
        self.ends = [time.monotonic() + seconds] * self.size

    def wait(self) -> None:
        if self.ends:
            time.sleep(max(0.0, min(self.ends) - time.monotonic()))


@dataclass
class Tally:
    """What one consumer did; sent to the parent in pieces (``took``) and at the end."""

    idx: int
    out: Queue[Any]
    took: list[tuple[int, ...]] = field(default_factory=list)
    sent_at: float = 0.0
    stats: dict[str, int] = field(
        default_factory=lambda: {"polls": 0, "empty_polls": 0, "released": 0, "max_batch": 0}
    )

    def take(self, msg: Message) -> None:
        seq, produced_ns = VALUE.unpack(msg.value() or b"")
        dc, part, off = msg.delivery_count() or 1, msg.partition() or 0, msg.offset() or 0
        self.took.append((seq, produced_ns, time.time_ns(), dc, part, off))

    def flush(self, force: bool = False) -> None:
        if self.took and (force or time.monotonic() - self.sent_at > FLUSH_S):
            self.out.put(("took", self.idx, self.took))
            self.took, self.sent_at = [], time.monotonic()

    def polled(self, n: int) -> None:
        self.stats["polls"] += 1
        self.stats["empty_polls"] += n == 0
        self.stats["max_batch"] = max(self.stats["max_batch"], n)


def consume(plan: Plan, idx: int, out: Queue[Any], stop: Event) -> None:
    """Run one consumer until ``stop``; consumer 0 plays ``plan.role0``."""
    role = plan.role0 if idx == 0 else "normal"
    tally = Tally(idx, out)
    if plan.mode == "share":
        share_loop(plan, role, tally, stop)
    else:
        classic_loop(plan, role, tally, stop)
    tally.flush(force=True)
    out.put(("done", idx, {**tally.stats, "cpu_s": time.process_time(), "pid": os.getpid()}))


def share_config(plan: Plan) -> dict[str, object]:
    return {
        "bootstrap.servers": plan.bootstrap,
        "group.id": plan.group,
        "share.acknowledgement.mode": "explicit",
        "max.poll.records": plan.max_poll_records or plan.slots,
        "fetch.max.bytes": 1_048_576,
        "log_level": 3,  # the "Preview" warning (once per process) is noise here
    }


def share_loop(plan: Plan, role: str, tally: Tally, stop: Event) -> None:
    c = ShareConsumer(share_config(plan))
    c.subscribe([plan.topic])
    slots, backlog = Slots(plan.slots), list[Message]()
    tally.out.put(("ready", tally.idx, None))
    try:
        while not stop.is_set():
            tally.flush()
            free = slots.free()
            if free <= 0:
                slots.wait()
                continue
            if backlog:  # "keep": run what an earlier poll returned before polling again
                _start(c, backlog[:free], slots, plan, tally)
                del backlog[:free]
                c.commit_async()
                continue
            msgs = [m for m in c.poll(0.1) if m.error() is None]
            tally.polled(len(msgs))
            if not msgs:
                continue
            if role in ("stall-hold", "kill"):
                role = _hold(c, msgs, role, plan, tally)
                continue
            backlog = _run_batch(c, msgs, free, slots, plan, tally)
            if role == "stall-ack":  # its tasks hang after this poll: no poll for stall_s
                tally.stats["stalled_with"] = min(free, len(msgs))
                tally.stats["stall_backlog"] = len(backlog)
                tally.flush(force=True)
                slots.block_all(plan.stall_s)
                role = "normal"
    finally:
        c.close()


def _start(c: ShareConsumer, msgs: Sequence[Message], slots: Slots, plan: Plan, t: Tally) -> None:
    """ "Claim" and start each record: ACCEPT it (in cronlog: once the fold granted the claim)."""
    for m in msgs:
        t.take(m)
        c.acknowledge(m, AcknowledgeType.ACCEPT)
        slots.occupy(plan.task_ms / 1000)


def _run_batch(
    c: ShareConsumer, msgs: list[Message], free: int, slots: Slots, plan: Plan, t: Tally
) -> list[Message]:
    """Start what fits in the free slots; keep the rest for later (returned) or RELEASE it."""
    _start(c, msgs[:free], slots, plan, t)
    extras = msgs[free:]
    if plan.extras == "release":
        for m in extras:
            c.acknowledge(m, AcknowledgeType.RELEASE)
        t.stats["released"] += len(extras)
        extras = []
    c.commit_async()
    return extras


def _hold(c: ShareConsumer, msgs: list[Message], role: str, plan: Plan, t: Tally) -> str:
    """Consumer 0's first non-empty poll: it holds the records unacknowledged and stalls
    (``stall-hold``: then ACCEPTs them if its locks still hold) or is killed (``kill``)."""
    seqs = [VALUE.unpack(m.value() or b"")[0] for m in msgs]
    t.out.put(("held", t.idx, seqs, time.time_ns()))
    time.sleep(plan.stall_s if role == "stall-hold" else 3600)  # "kill": the parent kills it
    for m in msgs:
        c.acknowledge(m, AcknowledgeType.ACCEPT)
    results = c.commit_sync(10)
    failed = sum(1 for e in results.values() if e is not None)
    t.stats["late_ack_failed_partitions"] = failed
    if not failed:
        for m in msgs:
            t.take(m)
    return "normal"


def classic_config(plan: Plan) -> dict[str, object]:
    """The worker's ready consumer before dispatch by polls (a classic group on the ready topic)."""
    return {
        "bootstrap.servers": plan.bootstrap,
        "group.id": plan.group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "isolation.level": plan.isolation,
        "session.timeout.ms": 10_000,
        "heartbeat.interval.ms": 3_333,
        "max.poll.interval.ms": 600_000,
        "queued.max.messages.kbytes": 1024,
        "fetch.max.bytes": 1_048_576,
    }


def _next_offsets(msgs: Sequence[Message]) -> list[TopicPartition]:
    """The offsets to commit after ``msgs``: per partition, the last one + 1."""
    last: dict[tuple[str, int], int] = {}
    for m in msgs:
        key = (m.topic() or "", m.partition() or 0)
        last[key] = max(last.get(key, -1), m.offset() or 0)
    return [TopicPartition(t, p, o + 1) for (t, p), o in last.items()]


def classic_loop(plan: Plan, role: str, tally: Tally, stop: Event) -> None:
    c = Consumer(classic_config(plan))
    c.subscribe([plan.topic])
    slots = Slots(plan.slots)
    tally.out.put(("ready", tally.idx, None))
    try:
        while not stop.is_set():
            tally.flush()
            free = slots.free()
            if free <= 0:
                slots.wait()
                continue
            msgs = [m for m in c.consume(num_messages=free, timeout=0.1) if m.error() is None]
            tally.polled(len(msgs))
            if not msgs:
                continue
            if role in ("stall-hold", "kill"):
                seqs = [VALUE.unpack(m.value() or b"")[0] for m in msgs]
                tally.out.put(("held", tally.idx, seqs, time.time_ns()))
                time.sleep(plan.stall_s if role == "stall-hold" else 3600)
                role = "normal"
            for m in msgs:
                tally.take(m)
                slots.occupy(plan.task_ms / 1000)
            c.commit(offsets=_next_offsets(msgs), asynchronous=True)
            if role == "stall-ack":
                tally.stats["stalled_with"] = len(msgs)
                slots.block_all(plan.stall_s)
                role = "normal"
    finally:
        c.close()
