"""The fold against a real broker: ticks fire once, pause/resume/delete, dedupe, dead letters,
and recovery after kill -9 (issue 2's "Done when", DESIGN.md invariants 1, 2, 5, 7)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from confluent_kafka import Producer

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.vocabulary import RejectReason
from tests.integration.harness import Cluster, DeadLetterLog, EventLog
from tests.integration.helpers import cron_job, once_job, whole_seconds
from topology.kafka.partitioning import partition_for
from topology.wire.codec import encode_command

pytestmark = pytest.mark.broker
START_TIMEOUT = 90.0


def scheduled(events: EventLog, job_id: str) -> list[datetime]:
    return [e.event.scheduled_for for e in events.of_type(ev.RunScheduled, job_id)]


def register(cluster: Cluster, events: EventLog, job_id: str, spec) -> ev.RunEvent:
    idem = cluster.send(job_id, cmd.RegisterJob(spec=spec))
    assert events.wait_until(
        lambda log: any(e.idem_key == idem for e in log.events(job_id)), START_TIMEOUT
    ), "scheduler never answered the registration"
    first = next(e for e in events.events(job_id) if e.idem_key == idem)
    assert isinstance(first.event, ev.JobRegistered), first
    return first


def test_six_field_cron_fires_each_tick_once_despite_duplicate_ticks(
    cluster: Cluster, events: EventLog
) -> None:
    cluster.scheduler()
    job = "every-2s"
    register(cluster, events, job, cron_job("*/2 * * * * *"))
    partition = partition_for(job, cluster.settings.partitions)
    stop = threading.Event()

    def duplicate_ticks() -> None:  # two Ticks for the same instant, over and over
        n = 0
        while not stop.is_set():
            for _ in range(2):
                n += 1
                value = encode_command(
                    cmd.Envelope(idem_key=f"dup-tick-{n}", job_id="", command=cmd.Tick())
                )
                cluster.send_raw(None, value, partition=partition)
            time.sleep(0.25)

    ticker = threading.Thread(target=duplicate_ticks, daemon=True)
    ticker.start()
    assert events.wait_until(lambda log: len(scheduled(log, job)) >= 6, 40)
    stop.set()
    ticker.join()
    events.poll(2.5)
    fired = scheduled(events, job)
    assert [t for t, n in Counter(fired).items() if n > 1] == []
    assert sorted(fired) == whole_seconds(min(fired), max(fired), step=2)


def test_one_off_job_fires_exactly_once(cluster: Cluster, events: EventLog) -> None:
    cluster.scheduler()
    run_at = (datetime.now(UTC) + timedelta(seconds=4)).replace(microsecond=0)
    register(cluster, events, "once", once_job(run_at))
    assert events.wait_until(lambda log: len(scheduled(log, "once")) >= 1, 40)
    events.poll(4)
    assert scheduled(events, "once") == [run_at]


def test_pause_stops_runs_and_resume_does_not_fire_paused_over_ticks(
    cluster: Cluster, events: EventLog
) -> None:
    cluster.scheduler()
    job = "pausable"
    register(cluster, events, job, cron_job("* * * * * *"))
    assert events.wait_until(lambda log: len(scheduled(log, job)) >= 2, 30)
    cluster.send(job, cmd.PauseJob())
    assert events.wait_until(lambda log: log.of_type(ev.JobPaused, job), 20)
    paused_at = events.of_type(ev.JobPaused, job)[0].at
    time.sleep(4)
    cluster.send(job, cmd.ResumeJob())
    assert events.wait_until(lambda log: log.of_type(ev.JobResumed, job), 20)
    resumed_at = events.of_type(ev.JobResumed, job)[0].at
    assert events.wait_until(lambda log: sum(t > resumed_at for t in scheduled(log, job)) >= 2, 20)
    fired = scheduled(events, job)
    assert resumed_at - paused_at >= timedelta(seconds=3)
    assert [t for t in fired if paused_at < t <= resumed_at] == []
    assert [t for t, n in Counter(fired).items() if n > 1] == []


def test_delete_stops_runs_and_keeps_history(cluster: Cluster, events: EventLog) -> None:
    cluster.scheduler()
    job = "deletable"
    register(cluster, events, job, cron_job("* * * * * *"))
    assert events.wait_until(lambda log: len(scheduled(log, job)) >= 2, 30)
    cluster.send(job, cmd.DeleteJob())
    assert events.wait_until(lambda log: log.of_type(ev.JobDeleted, job), 20)
    deleted_at = events.of_type(ev.JobDeleted, job)[0].at
    time.sleep(3)
    events.poll(1)
    fired = scheduled(events, job)
    assert len(fired) >= 2  # the history is still on the log
    assert [t for t in fired if t > deleted_at] == []
    idem = cluster.send(job, cmd.TriggerJob())
    assert events.wait_until(lambda log: any(e.idem_key == idem for e in log.events(job)), 20)
    answer = next(e for e in events.events(job) if e.idem_key == idem).event
    assert isinstance(answer, ev.CommandRejected)
    assert answer.reason is RejectReason.JOB_DELETED


def test_command_with_repeated_idem_key_changes_nothing(cluster: Cluster, events: EventLog) -> None:
    cluster.scheduler()
    job = "dedupe"
    spec = cron_job("0 0 1 1 *")
    cluster.send(job, cmd.RegisterJob(spec=spec), idem_key="register-once")
    cluster.send(job, cmd.RegisterJob(spec=spec), idem_key="register-once")
    cluster.send(job, cmd.PauseJob(), idem_key="pause-once")
    cluster.send(job, cmd.PauseJob(), idem_key="pause-once")
    marker = cluster.send(job, cmd.TriggerJob())
    assert events.wait_until(
        lambda log: any(e.idem_key == marker for e in log.events(job)), START_TIMEOUT
    )
    names = [type(e.event).__name__ for e in events.events(job)]
    assert names[:2] == ["JobRegistered", "JobPaused"]
    assert names.count("JobRegistered") == 1
    assert names.count("JobPaused") == 1
    assert "CommandRejected" not in names


def test_malformed_record_is_dead_lettered_and_fold_goes_on(
    cluster: Cluster, events: EventLog
) -> None:
    cluster.scheduler()
    cluster.send_raw(b"junk", b"\x00\x01this is not avro")
    cluster.send_raw(b"junk", b"\xc3\x01" + b"\x00" * 8 + b"garbage")
    register(cluster, events, "after-junk", cron_job("* * * * * *"))
    assert events.wait_until(lambda log: len(scheduled(log, "after-junk")) >= 1, 20)
    letters = DeadLetterLog(cluster.settings)
    try:
        deadline = time.monotonic() + 20
        while len(letters.records) < 2 and time.monotonic() < deadline:
            letters.poll(0.5)
        dead = letters.letters()
    finally:
        letters.close()
    assert len(dead) == 2
    assert {d.value for d in dead} == {
        b"\x00\x01this is not avro",
        b"\xc3\x01" + b"\x00" * 8 + b"garbage",
    }
    assert all(d.key == b"junk" and d.source_topic == cluster.topics.commands for d in dead)
    assert all(d.error_type == "DecodeError" and d.reason for d in dead)
    assert sorted(d.offset for d in dead) == [0, 1] or len({d.offset for d in dead}) == 2


def test_a_command_past_a_field_limit_is_dead_lettered_and_the_scheduler_goes_on(
    cluster: Cluster, events: EventLog
) -> None:
    # Issue 11: this TriggerJob (1,040,016 bytes, which the broker accepts) made the fold
    # produce an event past message.max.bytes; the scheduler exited 70 after every restart.
    sched = cluster.scheduler()
    register(cluster, events, "poisoned", cron_job("0 0 1 1 *"))
    poison = encode_command(
        cmd.Envelope(idem_key="k" * 1_040_000, job_id="poisoned", command=cmd.TriggerJob())
    )
    producer = Producer(cluster.settings.producer_config(**{"message.max.bytes": 2_000_000}))
    producer.produce(cluster.topics.commands, key=b"poisoned", value=poison)
    assert producer.flush(10) == 0
    pause = cluster.send("poisoned", cmd.PauseJob())
    assert events.wait_until(
        lambda log: any(e.idem_key == pause for e in log.events("poisoned")), 30
    ), "the command behind the poison pill was never folded"
    letters = DeadLetterLog(cluster.settings)
    try:
        deadline = time.monotonic() + 20
        while not letters.records and time.monotonic() < deadline:
            letters.poll(0.5)
        [letter] = letters.letters()
    finally:
        letters.close()
    assert letter.error_type == "DecodeError"
    assert letter.reason.startswith("Command.idem_key: 1040000 characters, at most 512")
    assert letter.value == poison[: 256 * 1024]
    assert sched.popen is not None and sched.popen.poll() is None  # still running


def test_kill9_then_restart_fires_every_tick_that_came_due_while_down_once(
    cluster: Cluster, events: EventLog
) -> None:
    sched = cluster.scheduler()
    job = "survivor"
    register(cluster, events, job, cron_job("* * * * * *"))
    assert events.wait_until(lambda log: len(scheduled(log, job)) >= 3, 30)
    sched.kill9()
    killed_at = datetime.now(UTC)
    time.sleep(6)
    sched.start()
    assert events.wait_until(
        lambda log: sum(t > killed_at + timedelta(seconds=12) for t in scheduled(log, job)) >= 2,
        START_TIMEOUT,
    )
    events.poll(1)
    fired = scheduled(events, job)
    assert [t for t, n in Counter(fired).items() if n > 1] == []
    assert sorted(fired) == whole_seconds(min(fired), max(fired))
    down = [t for t in fired if killed_at < t <= killed_at + timedelta(seconds=6)]
    assert len(down) >= 5  # the ticks that came due while nothing was folding did fire


def test_schedule_edits_never_fire_a_tick_twice(cluster: Cluster, events: EventLog) -> None:
    cluster.scheduler()
    job = "edited"
    register(cluster, events, job, cron_job("*/2 * * * * *"))
    assert events.wait_until(lambda log: len(scheduled(log, job)) >= 2, 30)
    edits = [
        cron_job("* * * * * *"),
        cron_job("*/2 * * * * *"),
        cron_job("*/2 * * * * *", command=("echo", "new command")),  # schedule unchanged
        cron_job("* * * * * *", tz="Europe/Berlin"),
        cron_job("*/3 * * * * *"),
    ]
    for spec in edits:
        idem = cluster.send(job, cmd.UpdateJob(spec=spec))
        assert events.wait_until(
            lambda log, k=idem: any(e.idem_key == k for e in log.events(job)), 20
        )
        time.sleep(1.3)
    edited_at = events.of_type(ev.JobRedefined, job)[-1].at
    assert events.wait_until(lambda log: sum(t > edited_at for t in scheduled(log, job)) >= 2, 20)
    fired = scheduled(events, job)
    assert len(events.of_type(ev.JobRedefined, job)) == len(edits)
    assert [t for t, n in Counter(fired).items() if n > 1] == []
    assert fired == sorted(fired)  # a tick never fires behind one already fired
