"""Benchmark: dispatching ready records to K workers through a Kafka share group (KIP-932,
Kafka 4.2+) or, with ``--mode classic``, through the classic consumer group the worker uses
today (issue 13). No cronlog process runs: a transactional producer stands in for the fold,
K processes with ``--slots`` simulated slots of ``--task-ms`` each stand in for the workers.

Usage (needs a broker with share groups, e.g. ``ops/kafka start``; ``KAFKA_BOOTSTRAP``)::

    .venv/bin/python bench/dispatch_share.py --consumers 4 --records 25000     # one burst
    .venv/bin/python bench/dispatch_share.py --consumers 30 --rate 1000 --records 20000
    .venv/bin/python bench/dispatch_share.py --mode classic --consumers 30 --records 25000
    .venv/bin/python bench/dispatch_share.py --role0 stall-ack --stall-s 10   # a busy worker
    .venv/bin/python bench/dispatch_share.py --role0 kill --lock-ms 5000      # kill -9

Each run makes a new topic (12 partitions, as the ready topic; ``--partitions``) and group.
Every ``--abort-every``-th transaction is aborted (its records reach the log first); a delivered
aborted record is counted. A consumer polls only while it has a free slot, "claims" (ACCEPTs,
or commits in classic mode) what it starts, and keeps for later (``--extras keep``) or RELEASEs
(``--extras release``) records beyond its free slots. Prints: commit→take and produce→take
latency, throughput, records per consumer, redeliveries, records taken > 1 s late by partition,
what consumer 0 held back, and CPU per record (consumers' and the broker's /proc times, from
the first record to the last take).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import queue
import signal
import statistics
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka.admin import (  # type: ignore[attr-defined]  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from bench.common import cpu_seconds, pct  # noqa: E402
from bench.dispatch_roles import Plan, consume, produce  # noqa: E402


@dataclass
class Run:
    """What the parent learns from its children during one run."""

    commit_ns: dict[int, int] = field(default_factory=dict)  # seq -> its transaction's commit
    takes: dict[int, list[tuple[int, ...]]] = field(default_factory=dict)
    # seq -> [(consumer, produced_ns, took_ns, delivery_count, partition, offset)]
    held: list[tuple[int, list[int], int]] = field(default_factory=list)
    done: dict[int, dict[str, Any]] = field(default_factory=dict)
    go_ns: int = 0
    kill_ns: int = 0
    cpu: dict[str, float] = field(default_factory=dict)


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:19092"))
    ap.add_argument("--mode", choices=["share", "classic"], default="share")
    ap.add_argument("--consumers", type=int, default=4)
    ap.add_argument("--partitions", type=int, default=12, help="of the ready topic")
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--task-ms", type=float, default=5.0, help="simulated task duration")
    ap.add_argument("--records", type=int, default=25_000)
    ap.add_argument("--rate", type=float, default=0.0, help="records/s; 0 = one burst")
    ap.add_argument("--txn-records", type=int, default=500, help="records per transaction")
    ap.add_argument("--producer-batch", type=int, default=0, help="batch.num.messages; 0: default")
    ap.add_argument("--abort-every", type=int, default=10, help="abort every n-th txn; 0: none")
    ap.add_argument("--max-poll-records", type=int, default=0, help="share; 0 = --slots")
    ap.add_argument("--extras", choices=["release", "keep"], default="keep")
    ap.add_argument(
        "--role0", choices=["normal", "stall-ack", "stall-hold", "kill"], default="normal"
    )
    ap.add_argument("--stall-s", type=float, default=10.0)
    ap.add_argument("--kill-after-s", type=float, default=0.5)
    ap.add_argument("--lock-ms", type=int, default=0, help="share.record.lock.duration.ms")
    ap.add_argument("--session-ms", type=int, default=0, help="share.session.timeout.ms")
    ap.add_argument("--max-record-locks", type=int, default=0, help="per partition, share")
    ap.add_argument("--isolation", default="read_committed")
    ap.add_argument("--warmup-s", type=float, default=8.0)
    ap.add_argument("--timeout-s", type=float, default=180.0)
    ap.add_argument("--broker-pid", type=int, default=0, help="default: ops/kafka's pid file")
    return ap.parse_args()


def setup(args: argparse.Namespace) -> tuple[str, str]:
    """A fresh topic (``--partitions``); for a share group, its group configs (set before it exists:
    ``share.auto.offset.reset`` is read when a share-partition is first initialised)."""
    topic = f"bench.dispatch.{uuid.uuid4().hex[:8]}"
    group = f"{topic}.{args.mode}"
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    admin.create_topics([NewTopic(topic, args.partitions, 1)])[topic].result()
    if args.mode == "share":
        wanted = {"share.isolation.level": args.isolation, "share.auto.offset.reset": "earliest"}
        if args.lock_ms:
            wanted["share.record.lock.duration.ms"] = str(args.lock_ms)
        if args.session_ms:  # heartbeat: a third of the session, as the worker's classic one
            wanted["share.session.timeout.ms"] = str(args.session_ms)
            wanted["share.heartbeat.interval.ms"] = str(max(1000, args.session_ms // 3))
        if args.max_record_locks:
            wanted["share.partition.max.record.locks"] = str(args.max_record_locks)
        entries = [
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
            for k, v in wanted.items()
        ]
        res = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
        for fut in admin.incremental_alter_configs([res]).values():
            fut.result()
        wait_group_configs(admin, group, wanted)
    return topic, group


def wait_group_configs(admin: AdminClient, group: str, wanted: dict[str, str]) -> None:
    """Wait until DescribeConfigs shows ``wanted`` (an altered group config shows up late)."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        fut = admin.describe_configs([ConfigResource(ResourceType.GROUP, group)])
        got = {k: v.value for k, v in next(iter(fut.values())).result().items()}
        if all(got.get(k) == v for k, v in wanted.items()):
            return
        time.sleep(0.2)
    raise SystemExit(f"group {group}: configs {wanted} not visible after 15 s")


def broker_pid(args: argparse.Namespace) -> int:
    if args.broker_pid:
        return int(args.broker_pid)
    home = Path(os.environ.get("CRONLOG_KAFKA_HOME", ROOT / ".cache" / "kafka"))
    try:
        return int((home / "kafka.pid").read_text())
    except (OSError, ValueError):
        return 0


def run(args: argparse.Namespace, plan: Plan) -> Run:
    ctx = mp.get_context("spawn")
    out, stop, go = ctx.Queue(), ctx.Event(), ctx.Event()
    workers = [
        ctx.Process(target=consume, args=(plan, i, out, stop), daemon=True)
        for i in range(args.consumers)
    ]
    producer = ctx.Process(target=produce, args=(plan, out, go), daemon=True)
    for p in [*workers, producer]:
        p.start()
    ready = 0
    while ready < args.consumers:
        ready += out.get(timeout=60)[0] == "ready"
    time.sleep(args.warmup_s)  # the group settles (assignments, share sessions)
    pids = {"consumers": [p.pid or 0 for p in workers], "broker": [broker_pid(args)]}
    cpu0 = {pid: cpu_seconds(pid) for v in pids.values() for pid in v if _alive(pid)}
    r = Run(go_ns=time.time_ns())
    go.set()
    collect(args, out, r, workers)
    for k, v in pids.items():  # a killed consumer's CPU is lost with it
        r.cpu[k] = sum(cpu_seconds(pid) - cpu0[pid] for pid in v if pid in cpu0 and _alive(pid))
    stop.set()
    finish(args, out, r, workers)
    for p in [*workers, producer]:
        p.join(5)
        if p.is_alive():
            p.kill()
    return r


def finish(args: argparse.Namespace, out: Any, r: Run, workers: list[Any]) -> None:
    """Collect the closing stats of every consumer that was not killed (30 s at most)."""
    expected = {-1, *range(1 if r.kill_ns else 0, args.consumers)}
    deadline = time.monotonic() + 30
    while not expected <= r.done.keys() and time.monotonic() < deadline:
        try:
            _dispatch(out.get(timeout=1), r, args, workers)
        except queue.Empty:
            continue


def _alive(pid: int) -> bool:
    return pid > 0 and Path(f"/proc/{pid}").exists()


def collect(args: argparse.Namespace, out: Any, r: Run, workers: list[Any]) -> None:
    """Until every committed record was taken once (and the producer is done) or timeout."""
    deadline = time.monotonic() + args.timeout_s
    while time.monotonic() < deadline:
        if -1 in r.done and len(r.takes.keys() & r.commit_ns.keys()) >= args.records:
            return
        try:
            msg = out.get(timeout=0.2)
        except queue.Empty:
            continue
        _dispatch(msg, r, args, workers)
    print(f"WARNING: timed out after {args.timeout_s}s")


def _dispatch(msg: tuple[Any, ...], r: Run, args: argparse.Namespace, workers: list[Any]) -> None:
    kind, idx = msg[0], msg[1]
    if kind == "txn":
        for seq in range(msg[1], msg[2] + 1):
            r.commit_ns[seq] = msg[3]
    elif kind == "took":
        for seq, *rest in msg[2]:
            r.takes.setdefault(seq, []).append((idx, *rest))
    elif kind == "held":
        r.held.append((idx, msg[2], msg[3]))
        if args.role0 == "kill" and idx == 0 and not r.kill_ns:
            time.sleep(args.kill_after_s)
            os.kill(workers[0].pid, signal.SIGKILL)
            r.kill_ns = time.time_ns()
    elif kind == "done":
        r.done[idx] = msg[2]


def spread_ms(values: list[float]) -> str:
    if not values:
        return "n=0"
    return (
        f"p50 {statistics.median(values):.1f} ms, p99 {pct(values, 0.99):.1f} ms, "
        f"max {max(values):.1f} ms (n={len(values)})"
    )


def report(args: argparse.Namespace, r: Run) -> None:
    first = {s: min(t, key=lambda x: x[2]) for s, t in r.takes.items() if s >= 0}
    n = len(first)
    how = f"at {args.rate:g}/s" if args.rate else "in one burst"
    print(
        f"\n{args.mode}: {args.partitions} partitions, {args.consumers} consumers x "
        f"{args.slots} slots, task {args.task_ms} ms, "
        f"{args.records} records {how}, {args.txn_records}/txn (batch.num.messages "
        f"{args.producer_batch or 'default'}), extras={args.extras}, role0={args.role0}; "
        f"load avg {os.getloadavg()[0]:.1f}"
    )
    aborted = sum(len(t) for s, t in r.takes.items() if s < 0)
    print(
        f"  taken: {n}/{len(r.commit_ns)} committed records; aborted records delivered: {aborted}"
    )
    if not n:
        return
    lat_c = [(t[2] - r.commit_ns[s]) / 1e6 for s, t in first.items() if s in r.commit_ns]
    lat_p = [(t[2] - t[1]) / 1e6 for t in first.values()]
    print(f"  commit→take:  {spread_ms(lat_c)}")
    print(f"  produce→take: {spread_ms(lat_p)}")
    t_first = min(r.commit_ns.values())
    print(
        f"  producer: {r.done.get(-1, {}).get('txns', 0)} transactions, first → last commit "
        f"{(max(r.commit_ns.values()) - t_first) / 1e9:.2f} s"
    )
    span = (max(t[2] for t in first.values()) - t_first) / 1e9
    print(
        f"  first commit → last take: {span:.2f} s ({n / max(span, 1e-9):,.0f} records/s); "
        f"records > 1 s late: {sum(x > 1000 for x in lat_c)}"
    )
    per = [0] * args.consumers
    for t in first.values():
        per[t[0]] += 1
    shown = per if args.consumers <= 8 else sorted(per)
    print(f"  per consumer: {shown}; idle: {per.count(0)}")
    takes = [x for s, t in r.takes.items() if s >= 0 for x in t]
    print(
        f"  taken twice: {len(takes) - n}; takes with delivery_count > 1: "
        f"{sum(x[3] > 1 for x in takes)}; released: "
        f"{sum(d.get('released', 0) for d in r.done.values())}; max records per poll: "
        f"{max((d.get('max_batch', 0) for d in r.done.values()), default=0)}"
    )
    report_late(r, first)
    report_held(r, first)
    cons, brk = r.cpu.get("consumers", 0.0), r.cpu.get("broker", 0.0)
    prod = r.done.get(-1, {}).get("cpu_s", 0.0)
    print(
        f"  CPU per record: consumers {cons / n * 1e6:.0f} µs ({cons:.1f} s), broker "
        f"{brk / n * 1e6:.0f} µs ({brk:.1f} s), producer {prod / n * 1e6:.0f} µs"
    )


def report_late(r: Run, first: dict[int, tuple[int, ...]]) -> None:
    """Records taken more than 1 s after their commit, per partition (offsets) and consumer."""
    late = [(t[4], t[5], t[0]) for s, t in first.items() if t[2] - r.commit_ns[s] > 1e9]
    if not late:
        return
    parts: dict[int, list[int]] = {}
    for part, off, _ in late:
        parts.setdefault(part, []).append(off)
    print(
        "  late (> 1 s) by partition: "
        + ", ".join(f"p{p}: {len(o)} @{min(o)}..{max(o)}" for p, o in sorted(parts.items()))
        + f"; by consumer: {sorted({c for _, _, c in late})}"
    )


def report_held(r: Run, first: dict[int, tuple[int, ...]]) -> None:
    """What consumer 0 held when it stalled or was killed, and when others got it."""
    for idx, seqs, held_ns in r.held:
        later = [first[s] for s in seqs if s in first]
        by_others = [t for t in later if t[0] != idx]
        delays = [(t[2] - held_ns) / 1e9 for t in later]
        since_kill = [(t[2] - r.kill_ns) / 1e9 for t in by_others] if r.kill_ns else []
        print(
            f"  consumer {idx} held {len(seqs)} records; taken again by others: "
            f"{len(by_others)}, by itself: {len(later) - len(by_others)}; after "
            f"{min(delays, default=0):.1f}..{max(delays, default=0):.1f} s"
            + (
                f" ({min(since_kill):.1f}..{max(since_kill):.1f} s after the kill)"
                if since_kill
                else ""
            )
        )
    stalled = r.done.get(0, {}).get("stalled_with")
    if stalled is not None:
        mine = sorted((t[2], s) for s, t in first.items() if t[0] == 0)[stalled:]
        late = [(ns - r.commit_ns[s]) / 1e6 for ns, s in mine if s in r.commit_ns]
        kept = r.done.get(0, {}).get("stall_backlog", 0)
        print(
            f"  consumer 0 stalled after starting {stalled} (holding {kept} more it polled); "
            f"what it took after: {spread_ms(late)}"
        )


def main() -> None:
    args = parse_args()
    topic, group = setup(args)
    fields = Plan.__dataclass_fields__.keys() - {"bootstrap", "topic", "group"}
    plan = Plan(
        bootstrap=args.bootstrap, topic=topic, group=group, **{k: getattr(args, k) for k in fields}
    )
    report(args, run(args, plan))


if __name__ == "__main__":
    main()
