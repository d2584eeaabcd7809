"""A ``kill -9`` of one node of a replicated cluster during a chaos run: which node to kill
(the one whose loss hurts most) and the pause it caused, measured from run-events.

Used by ``tests/chaos/harness.py`` when the run's ``PrivateBroker`` has 3 nodes.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from confluent_kafka.admin import AdminClient

from cronlog import events as ev
from cronlog.vocabulary import RunTrigger
from tests.chaos.audit import Rec
from topology.wire.codec import Codec

TXN_STATE = "__transaction_state"
OFFSETS = "__consumer_offsets"
PAUSE_HORIZON_S = 60.0
"""How long after a kill its pause is looked for, seconds (and the baseline before it)."""


@dataclass
class BrokerKill:
    """One ``kill -9`` of a cluster node.

    Attributes:
        at: when, epoch seconds.
        node: the node id (1..N, also its Kafka ``node.id``).
        roles: what the node was at that moment (``transaction coordinator``, ``controller``,
            ``group coordinator``, ``leader of <topic> [partitions]``).
        back_s: seconds from the kill until ``ops/kafka start`` had it answering again.
        gap_s: the longest gap between consecutive run-events (record timestamps, any
            partition) in the ``PAUSE_HORIZON_S`` after the kill: how long nothing moved.
        lag_s: the largest trigger lag among ticks due in that horizon: record timestamp of the
            first event about the tick (RunScheduled, RunQueued or TickSkipped) minus its
            ``scheduled_for``; when the fold decided it, whatever the workers' backlog.
        baseline_gap_s, baseline_lag_s: the same figures over the horizon before the kill.
    """

    at: float
    node: int
    roles: list[str] = field(default_factory=list)
    back_s: float | None = None
    gap_s: float | None = None
    lag_s: float | None = None
    baseline_gap_s: float | None = None
    baseline_lag_s: float | None = None

    def line(self) -> str:
        """One line for the report."""

        def fmt(x: float | None) -> str:
            return "?" if x is None else f"{x:.1f}"

        return (
            f"node {self.node} ({', '.join(self.roles) or 'no leadership'}): back after "
            f"{fmt(self.back_s)} s; pause: longest run-event gap {fmt(self.gap_s)} s "
            f"(before: {fmt(self.baseline_gap_s)} s), max trigger lag {fmt(self.lag_s)} s "
            f"(before: {fmt(self.baseline_lag_s)} s)"
        )


def pick_victim(bootstrap: str, commands_topic: str) -> tuple[int, list[str]]:
    """The node whose loss hurts the fold most, and what it is.

    The transaction coordinator of the schedulers (leader of ``__transaction_state``, one
    partition on ``ops/kafka``'s cluster): every fold batch commits through it, so its loss
    stalls every partition at once; a leader of commands partitions only stalls those.
    Falls back to the leader of commands partition 0.

    Returns:
        (node id, roles).
    """
    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30)

    def leaders(topic: str) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        if topic in meta.topics:
            for p in meta.topics[topic].partitions.values():
                out.setdefault(p.leader, []).append(p.id)
        return out

    txn, offsets, commands = leaders(TXN_STATE), leaders(OFFSETS), leaders(commands_topic)
    node = next(iter(txn), None)
    if node is None:
        node = next(b for b, parts in commands.items() if 0 in parts)
    roles = []
    if node in txn:
        roles.append("transaction coordinator")
    if node in offsets:
        roles.append("group coordinator")
    if node == meta.controller_id:
        roles.append("controller")
    if node in commands:
        roles.append(f"leader of commands partitions {sorted(commands[node])}")
    return node, roles


def kill_node(pid_file: str) -> None:
    """``kill -9`` the node whose pid ``ops/kafka`` wrote to ``pid_file``; returns once it is
    gone (no controlled shutdown, no flush: what a power cut or the OOM killer does)."""
    with open(pid_file) as f:
        pid = int(f.read().strip())
    os.kill(pid, signal.SIGKILL)
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


def measure_pause(kill: BrokerKill, records: Iterable[Rec], codec: Codec | None = None) -> None:
    """Fill ``kill``'s pause figures (and their baselines) from the run's run-events."""
    codec = codec or Codec()
    kill_ms = int(kill.at * 1000)
    horizon_ms = int(PAUSE_HORIZON_S * 1000)
    near = [r for r in records if kill_ms - horizon_ms <= r.timestamp_ms <= kill_ms + horizon_ms]
    ts = sorted(r.timestamp_ms for r in near)

    def longest_gap(lo: int, hi: int) -> float | None:
        inside = [t for t in ts if lo <= t <= hi]
        if len(inside) < 2:
            return None
        # the gap that spans the kill counts from the last event before it
        before = [t for t in ts if t < lo]
        if before and lo == kill_ms:
            inside.insert(0, before[-1])
        return max(b - a for a, b in itertools.pairwise(inside)) / 1000

    # the first event about each tick (a run started or queued, or the tick skipped): when the
    # fold decided it, whatever the workers' backlog
    first: dict[tuple[str, int], int] = {}
    for r in near:
        run_event = codec.decode_event(r.value)
        event = run_event.event
        if isinstance(event, ev.RunScheduled | ev.RunQueued):
            if event.trigger is not RunTrigger.SCHEDULE:
                continue
        elif not isinstance(event, ev.TickSkipped):
            continue
        key = (run_event.job_id, int(event.scheduled_for.timestamp() * 1000))
        first[key] = min(first.get(key, r.timestamp_ms), r.timestamp_ms)
    lags: dict[bool, list[float]] = {True: [], False: []}
    for (_job, due_ms), seen_ms in first.items():
        if kill_ms - horizon_ms <= due_ms < kill_ms + horizon_ms:
            lags[due_ms >= kill_ms].append((seen_ms - due_ms) / 1000)
    kill.gap_s = longest_gap(kill_ms, kill_ms + horizon_ms)
    kill.baseline_gap_s = longest_gap(kill_ms - horizon_ms, kill_ms - 1)
    kill.lag_s = max(lags[True], default=None)
    kill.baseline_lag_s = max(lags[False], default=None)
