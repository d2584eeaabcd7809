"""A 30 s broker outage under load: every service rides it out, each of their reader threads
logs the episode once and its end once, /readyz answers 503 during it and 200 after, and
nothing is lost: every due tick of every job has a run that the worker ran to success, and the
API lists them all.

No process exits, with two allowed exceptions, both a scheduler's exit 70 that the supervisor
restarts, as ``./ops/up`` would (``harness.planned_exit``): a ``send_offsets_to_transaction``
in flight when the broker went away can stay blocked in librdkafka for good (issues #5456,
#5511) and its watchdog ends the process (one ``action=fatal`` line naming the call); or the
scheduler's consumer, a static member, is fenced by its own rejoin after the coordinator
stall (KAFKA-20985: ``action=fenced … Static consumer fenced``). Any other exit fails the
test; so would a scheduler left alive with a dead consumer.

The broker is one of the test's own (``PrivateBroker``: another port and CRONLOG_KAFKA_HOME),
since the test stops it. So is the second test's: a scheduler started on a port with no broker
waits for it (past the 120 s it once gave up after) and folds once it is there.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from cronlog import commands as cmd
from cronlog import events as ev
from tests.chaos.harness import PrivateBroker
from tests.integration.harness import Cluster, EventLog, Supervisor, planned_exit
from tests.integration.helpers import once_job, start_api, wait_for, whole_seconds
from topology.kafka.bootstrap import ensure_topics
from topology.kafka.config import KafkaSettings

pytestmark = [
    pytest.mark.own_broker,
    pytest.mark.broker,
    pytest.mark.slow,
    pytest.mark.timeout(600),
]
JOBS = 3
LOAD_S = 10.0
OUTAGE_S = 30.0
AFTER_S = 10.0
"""Seconds of normal running after the broker is back whose ticks are checked too."""


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[PrivateBroker]:
    b = PrivateBroker(tmp_path / "kafka")
    b.start()
    yield b
    b.destroy()


def _parse(iso: str) -> datetime:
    return datetime.fromisoformat(iso.replace("Z", "+00:00"))


def _runs(api: httpx.Client, job_id: str) -> list[dict]:
    return api.get(f"/api/v1/jobs/{job_id}/runs", params={"limit": 1000}).json()["runs"]


def _ready(api: httpx.Client) -> int | None:
    try:
        return api.get("/readyz", timeout=3).status_code
    except httpx.TransportError:
        return None


def test_every_service_rides_out_a_30s_broker_outage_and_nothing_is_lost(
    broker: PrivateBroker, tmp_path: Path
) -> None:
    settings = KafkaSettings(
        bootstrap=broker.bootstrap, topic_prefix=f"out{uuid.uuid4().hex[:6]}.", partitions=4
    )
    ensure_topics(settings)
    cluster = Cluster(settings, tmp_path)
    supervisor = Supervisor(cluster)
    try:
        cluster.scheduler()
        cluster.worker(CRONLOG_SLOTS="8")
        api = start_api(cluster)
        jobs = [f"every-second-{i}" for i in range(JOBS)]
        for job_id in jobs:
            body = {
                "job_id": job_id,
                "name": "every second",
                "schedule": {
                    "type": "cron",
                    "expression": "* * * * * *",
                    "timezone": "UTC",
                    "catchup": "all",
                },
                "command": ["true"],
                "max_active_runs": 256,
            }
            created = api.post("/api/v1/jobs", json=body)
            assert created.status_code == 201, created.text
        registered = datetime.now(UTC)
        time.sleep(LOAD_S)

        broker.stop()
        down_at = time.monotonic()
        answers = set()
        while time.monotonic() - down_at < OUTAGE_S:
            answers.add(_ready(api))
            time.sleep(1.0)
        assert 503 in answers, f"/readyz answered {answers} while the broker was down"
        broker.start()
        back = datetime.now(UTC)
        wait_for(lambda: _ready(api) == 200, 120, "/readyz 200 after the outage")
        recovered_s = time.monotonic() - down_at - OUTAGE_S
        time.sleep(AFTER_S)

        # Every tick from the first after registration to AFTER_S after the broker came back.
        due = whole_seconds(registered + timedelta(seconds=1), back + timedelta(seconds=AFTER_S))

        def all_succeeded() -> bool:
            for job_id in jobs:
                done = {_parse(r["scheduled_for"]) for r in _runs(api, job_id)}
                if not set(due) <= done:
                    return False
            return all(
                r["state"] == "succeeded"
                for job_id in jobs
                for r in _runs(api, job_id)
                if _parse(r["scheduled_for"]) in set(due)
            )

        wait_for(all_succeeded, 180, "every due tick has a succeeded run", every=2.0)
        triggers: dict[str, int] = {}
        for job_id in jobs:
            runs = {_parse(r["scheduled_for"]): r for r in _runs(api, job_id)}
            for tick in due:
                run = runs[tick]
                assert run["exit_code"] == 0
                assert run["claimed_by"] == f"{settings.topic_prefix}w1"
                triggers[run["trigger"]] = triggers.get(run["trigger"], 0) + 1
        supervisor.stop()
        for name, rc, fatal in supervisor.exits:
            assert planned_exit(name, rc, fatal), (name, rc, fatal)
        assert len(supervisor.exits) <= 2, supervisor.exits
        for proc in cluster.procs:
            assert proc.popen is not None
            assert proc.popen.poll() is None, f"{proc.name} exited:\n{proc.log_tail()}"
        episodes = {
            proc.name: (
                proc.log_path.read_text().count("action=broker_trouble"),
                proc.log_path.read_text().count("action=broker_recovered"),
            )
            for proc in cluster.procs
            if proc.name in ("api", "worker")
        }
        for name, (trouble, recovered) in episodes.items():
            assert 1 <= trouble <= 10, f"{name}: {trouble} trouble lines"
            assert recovered >= 1, f"{name}: no recovery line"
        print(
            f"{len(due)} ticks x {JOBS} jobs all ran (triggers {triggers}); "
            f"/readyz 200 again {recovered_s:.1f}s after "
            f"the broker restart began; episode lines (trouble, recovered): {episodes}; "
            f"planned scheduler exits: {[fatal[-160:] for _, _, fatal in supervisor.exits]}"
        )
    except AssertionError:
        if _restore_stuck(tmp_path):
            pytest.xfail(STUCK_RESTORE)
        raise
    finally:
        supervisor.stop()
        cluster.stop_all()


STUCK_RESTORE = (
    "known, open: after the outage one partition's committed offset stayed unstable for more "
    "than 60 s (a transaction holding it not ended; the scheduler waits and logs it, "
    "action=offsets_unstable … waited=); README, Known limitations"
)
UNSTABLE_LONG = re.compile(r"action=offsets_unstable partition=\d+ waited=")
"""The line StableGate logs when a partition's offset has been unstable for 60 s and more."""


def _restore_stuck(tmp_path: Path) -> bool:
    """Whether the scheduler's log shows the open bug (STUCK_RESTORE), not another."""
    log = tmp_path / "s1.log"
    return log.exists() and UNSTABLE_LONG.search(log.read_text(errors="replace")) is not None


OLD_START_DEADLINE_S = 120.0
"""How long a scheduler waited for its broker at start before issue 25 (then rc 1 and a raw
traceback)."""


def test_a_scheduler_started_before_its_broker_waits_for_it_then_folds(tmp_path: Path) -> None:
    broker = PrivateBroker(tmp_path / "kafka")  # a port with no broker on it yet
    settings = KafkaSettings(
        bootstrap=broker.bootstrap, topic_prefix=f"pre{uuid.uuid4().hex[:6]}.", partitions=2
    )
    cluster = Cluster(settings, tmp_path)
    try:
        scheduler = cluster.scheduler()
        started = time.monotonic()
        wait_for(
            lambda: "action=broker_trouble" in scheduler.log_path.read_text(errors="replace"),
            60,
            "the scheduler logs why it waits",
        )
        # outlive the old deadline: the process is still there, waiting
        time.sleep(max(0.0, OLD_START_DEADLINE_S + 5 - (time.monotonic() - started)))
        assert scheduler.popen is not None
        assert scheduler.popen.poll() is None, scheduler.log_tail()
        broker.start()
        job = "after-the-broker"
        spec = once_job(datetime.now(UTC) + timedelta(days=1))
        wait_for(
            lambda: scheduler.log_path.read_text().count("action=partition_restored") == 2,
            120,
            "both partitions restored once the broker is up",
        )
        cluster.send(job, cmd.RegisterJob(spec=spec))
        events = EventLog(settings)
        try:
            assert events.wait_until(lambda e: bool(e.of_type(ev.JobRegistered, job)), 60)
        finally:
            events.close()
        text = scheduler.log_path.read_text(errors="replace")
        assert "Traceback" not in text
        assert "action=broker_recovered" in text
        assert scheduler.popen.poll() is None
    finally:
        cluster.stop_all()
        broker.destroy()


def test_a_lone_scheduler_folds_on_after_its_broker_is_killed_and_restarted(
    broker: PrivateBroker, tmp_path: Path
) -> None:
    """Issue 25: a lone scheduler whose broker is killed with -9 and started again must fold
    on in the same process (no supervisor here) and run a job triggered after the restart.

    Before the fix (2026-12-03, 17:32, 17:35, librdkafka 2.16.0) it failed every time: no
    consumer was fenced; the partitions were reassigned and restored, then the first batch's
    ``send_offsets_to_transaction`` blocked 45-46 s, whether given 30 s or 10 s, and the
    watchdog ended the process (exit 70). Now the call is waited for OFFSETS_DEADLINE_S, its
    producer abandoned and a new one takes over (``action=producer_abandoned``)."""
    settings = KafkaSettings(
        bootstrap=broker.bootstrap, topic_prefix=f"k9{uuid.uuid4().hex[:6]}.", partitions=2
    )
    ensure_topics(settings)
    cluster = Cluster(settings, tmp_path)
    try:
        scheduler = cluster.scheduler()
        cluster.worker()
        wait_for(
            lambda: scheduler.log_path.read_text().count("action=partition_restored") == 2,
            120,
            "both partitions restored",
        )
        spec = cmd.RegisterJob(spec=once_job(datetime.now(UTC) + timedelta(days=1)))
        cluster.send("before-the-kill", spec)
        time.sleep(3.0)  # folded; the ticker's Ticks keep transactions going as the broker dies
        broker.kill9(1)
        time.sleep(5.0)
        broker.start()
        job = "after-the-kill"
        cluster.send(job, cmd.RegisterJob(spec=once_job(datetime.now(UTC) + timedelta(seconds=5))))
        events = EventLog(settings)
        try:
            ran = events.wait_until(  # or the scheduler exited: no need to wait on
                lambda e: (
                    bool(e.of_type(ev.RunSucceeded, job)) or scheduler.popen.poll() is not None
                ),
                180,
            )
        finally:
            events.close()
        text = scheduler.log_path.read_text(errors="replace")
        assert scheduler.popen is not None
        assert scheduler.popen.poll() is None, scheduler.log_tail()
        assert ran, scheduler.log_tail()
        assert "action=fatal" not in text and "action=fenced" not in text, scheduler.log_tail()
        assert "Traceback" not in text
        print("rejoined in place" if "action=consumer_rejoined" in text else "no fence this run")
    finally:
        cluster.stop_all()
