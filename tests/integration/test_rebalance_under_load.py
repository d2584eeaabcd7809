"""A scheduler that folds a burst while a second one joins the group gives half of its
partitions away in the middle of its batches (cooperative-sticky revokes them inside poll or
consume). Neither process fails, every command is folded once, nothing is delivered twice, and
``cronlog replay --verify`` agrees."""

from __future__ import annotations

import collections
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.model import JobSpec, Schedule, ScheduleKind, main_task
from services.cli.replay import ReplayOptions, run_replay
from tests.chaos.harness import owned_partitions, read_all
from tests.integration.harness import Cluster
from tests.integration.helpers import wait_for
from topology.wire.codec import Codec, encode_command

pytestmark = pytest.mark.broker

BURST = 20_000
"""Manual jobs registered at once: the first scheduler folds them for several seconds."""


def _burst(cluster: Cluster) -> None:
    producer = Producer(cluster.settings.producer_config(**{"linger.ms": 20}))
    spec = JobSpec(
        name="burst", schedule=Schedule(ScheduleKind.MANUAL), task_specs=main_task(("true",))
    )
    for i in range(BURST):
        job = f"r{i:05d}"
        env = cmd.Envelope(
            idem_key=f"register:{job}", job_id=job, command=cmd.RegisterJob(spec=spec)
        )
        while True:
            try:
                producer.produce(cluster.topics.commands, encode_command(env), job.encode())
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(30) == 0


def _registrations(cluster: Cluster) -> collections.Counter[str]:
    codec = Codec()
    return collections.Counter(
        e.job_id
        for r in read_all(cluster.settings, cluster.topics.run_events)
        if isinstance((e := codec.decode_event(r.value)).event, ev.JobRegistered)
    )


def test_a_scheduler_that_loses_partitions_mid_burst_goes_on(
    cluster: Cluster, tmp_path: Path
) -> None:
    n = cluster.settings.partitions
    env = {"CRONLOG_AFTER_RELAY": "false", "CRONLOG_BATCH_SIZE": "500"}
    a = cluster.scheduler("a", **env)
    wait_for(lambda: owned_partitions(a) == list(range(n)), 90, "A to own every partition")
    _burst(cluster)
    b = cluster.scheduler("b", **env)  # joins while A folds the burst
    t0 = time.monotonic()
    wait_for(
        lambda: owned_partitions(a) and owned_partitions(b),
        90,
        "A and B to share the partitions",
    )
    t_shared = time.monotonic()
    counts = wait_for(
        lambda: (c := _registrations(cluster)) and len(c) == BURST and c,
        90,
        "every registration on run-events",
        every=2,
    )
    assert a.popen is not None and a.popen.poll() is None, a.log_tail()
    assert b.popen is not None and b.popen.poll() is None, b.log_tail()
    assert "Traceback" not in a.log_tail(400) + b.log_tail(400)
    assert set(counts.values()) == {1}  # each folded once: no event delivered twice
    shares = (owned_partitions(a), owned_partitions(b))
    a.stop()
    b.stop()
    report = run_replay(cluster.settings, ReplayOptions(state_dir=tmp_path / "replay", verify=True))
    assert report.ok, report
    print(
        f"\nrebalance under load: B joined while A folded {BURST} registrations; shared after "
        f"{t_shared - t0:.1f} s; A owns {shares[0]}, B {shares[1]}"
    )
