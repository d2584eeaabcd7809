"""Restoring a partition's store from the job table's changelog (topology/fold/restore.py) on a real
broker: only committed records, the latest per key, the recorded offset; a second restore reads
nothing, a later one only what was appended. And a scheduler killed (SIGKILL) in the middle of
a long restore resumes it from the offset its store recorded and ends with the right state."""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.decide import handle
from cronlog.model import JobSpec, Schedule, ScheduleKind, TaskKind, main_task
from cronlog.vocabulary import JobStatus
from tests.integration.harness import Cluster, EventLog
from tests.integration.helpers import wait_for
from tests.old_shape import v2_record
from topology.fold.partition_store import PartitionStore
from topology.fold.restore import CONSUMER_CONFIG, index_keys, last_write_committed, restore
from topology.kafka.partitioning import partition_for
from topology.wire.state_codec import dump_state, load_state

pytestmark = pytest.mark.broker

T = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
P = 2


def _stored(spec: JobSpec, *then: cmd.Command) -> bytes:
    """The stored record of a job registered with ``spec`` at T, then sent ``then``."""
    state, _ = handle(
        None, cmd.Envelope(idem_key="r", job_id="x", command=cmd.RegisterJob(spec=spec)), T
    )
    for i, command in enumerate(then):
        state, _ = handle(state, cmd.Envelope(idem_key=f"c{i}", job_id="x", command=command), T)
    assert state is not None
    return dump_state(state)


MANUAL = JobSpec(name="m", schedule=Schedule(ScheduleKind.MANUAL), task_specs=main_task(("true",)))
HOURLY = JobSpec(
    name="h", schedule=Schedule(ScheduleKind.CRON, "0 * * * *"), task_specs=main_task(("true",))
)
DAILY = JobSpec(
    name="d", schedule=Schedule(ScheduleKind.CRON, "0 3 * * *"), task_specs=main_task(("true",))
)
VALUES = (_stored(MANUAL), _stored(HOURLY), _stored(HOURLY, cmd.PauseJob()), _stored(DAILY))
"""Distinct stored records (some with a deadline, some without)."""
ABORTED = _stored(MANUAL, cmd.PauseJob())
"""Written only in aborted transactions: must never be restored."""


@dataclass
class Changelog:
    """A transactional writer of one changelog partition, and what it committed."""

    producer: Producer
    topic: str
    committed: dict[str, bytes | None] = field(default_factory=dict)
    last_offset: int = -1
    records: int = 0

    def transaction(
        self, rows: list[tuple[str, bytes | None]], *, commit: bool = True
    ) -> list[int]:
        """Write ``rows`` in one transaction; commit or abort it; return their offsets."""
        offsets: list[int] = []

        def delivered(err: KafkaError | None, msg: Message) -> None:
            assert err is None, err
            offsets.append(msg.offset() or 0)

        self.producer.begin_transaction()
        for key, value in rows:
            self.producer.produce(self.topic, value, key.encode(), P, on_delivery=delivered)
        self.producer.flush(30)
        if not commit:
            self.producer.abort_transaction(30)
            return offsets
        self.producer.commit_transaction(30)
        self.committed.update(rows)
        self.last_offset = max(offsets)
        self.records += len(rows)
        return offsets

    def expected(self) -> list[tuple[str, bytes]]:
        """The latest committed value per key, deletes gone, in key order."""
        return sorted((k, v) for k, v in self.committed.items() if v is not None)


@pytest.fixture
def changelog(cluster: Cluster) -> Iterator[Changelog]:
    producer = Producer(
        cluster.settings.producer_config(
            **{"transactional.id": f"{cluster.settings.topic_prefix}restore-test", "linger.ms": 5}
        )
    )
    producer.init_transactions(30)
    yield Changelog(producer, cluster.topics.job_table_changelog)
    producer.flush(10)


def _restorer(cluster: Cluster) -> Consumer:
    return Consumer(
        cluster.settings.consumer_config(f"restore-{uuid.uuid4().hex}", **CONSUMER_CONFIG)
    )


def _rows(keys: range, variant: int, prefix: str = "job") -> list[tuple[str, bytes | None]]:
    return [(f"{prefix}{k:05d}", VALUES[(k + variant) % len(VALUES)]) for k in keys]


def _deadlines(rows: list[tuple[str, bytes]]) -> list[tuple[str, int]]:
    return [(k, d) for k, v in rows if (d := index_keys(v)[0]) is not None]


def test_restore_reads_the_latest_committed_value_per_key_and_resumes_from_its_offset(
    cluster: Cluster, changelog: Changelog, tmp_path: Path
) -> None:
    for variant in range(3):  # 3 x 1000 keys, each overwritten twice
        for start in range(0, 1000, 250):
            changelog.transaction(_rows(range(start, start + 250), variant))
        if variant == 1:  # an aborted transaction in the middle: new keys and overwrites
            changelog.transaction(
                [(f"job{k:05d}", ABORTED) for k in range(0, 1000, 7)]
                + [(f"ghost{k}", ABORTED) for k in range(50)],
                commit=False,
            )
    changelog.transaction([("job00005", None), ("job00006", VALUES[0])])  # a delete, a put
    assert changelog.records == 3002

    consumer = _restorer(cluster)
    store = PartitionStore(tmp_path / f"jobs-{P}")
    try:
        first = restore(consumer, changelog.topic, P, store)
        assert first.records == 3002
        assert first.start == 0
        assert first.end == changelog.last_offset + 2  # the commit marker takes one offset
        assert list(store.jobs()) == changelog.expected()
        assert not [k for k, v in store.jobs() if v == ABORTED or k.startswith("ghost")]
        assert list(store.deadlines()) == _deadlines(changelog.expected())
        assert store.changelog_offset() == changelog.last_offset

        again = restore(consumer, changelog.topic, P, store)
        assert (again.records, again.start) == (0, changelog.last_offset + 1)
        assert store.changelog_offset() == changelog.last_offset

        changelog.transaction(_rows(range(900, 1100), 3))  # 100 overwrites, 100 new keys
        changelog.transaction([("ghost1", ABORTED)], commit=False)  # the tail is aborted
        more = restore(consumer, changelog.topic, P, store)
        assert more.records == 200
        assert list(store.jobs()) == changelog.expected()
        assert list(store.deadlines()) == _deadlines(changelog.expected())
        assert store.changelog_offset() == changelog.last_offset
        assert restore(consumer, changelog.topic, P, store).records == 0
        print(
            f"\nrestore: {first.records} records in {first.seconds:.2f} s "
            f"({first.records / first.seconds:.0f}/s), incremental {more.records} in "
            f"{more.seconds:.2f} s"
        )
    finally:
        store.close()
        consumer.close()


def test_a_store_is_trusted_only_up_to_a_committed_changelog_record(
    cluster: Cluster, changelog: Changelog
) -> None:
    # A broker that acknowledged a commit and never wrote its markers, then an operator's abort
    # of the hanging transaction: the store recorded an offset the log does not have (F2).
    committed = changelog.transaction(_rows(range(0, 10), 0))
    aborted = changelog.transaction(_rows(range(10, 20), 1), commit=False)
    after = changelog.transaction(_rows(range(20, 30), 2))
    consumer = _restorer(cluster)
    try:
        assert last_write_committed(consumer, changelog.topic, P, -1)  # an empty store
        for offset in (committed[0], committed[-1], after[-1]):
            assert last_write_committed(consumer, changelog.topic, P, offset), offset
        for offset in (aborted[0], aborted[-1], after[-1] + 1, after[-1] + 100):
            assert not last_write_committed(consumer, changelog.topic, P, offset), offset
    finally:
        consumer.close()


def test_a_changelog_partition_not_answering_yet_is_waited_for_not_raised(
    cluster: Cluster, tmp_path: Path
) -> None:
    # A broker node killed during a restore failed its get_watermark_offsets with a transient
    # error (_DESTROY_BROKER) that ended the scheduler with a raw traceback (issue 25). The
    # same call fails at once, as reliably, for a partition not in the metadata yet: both are
    # retried until the broker answers.
    topic = f"{cluster.settings.topic_prefix}late-changelog"
    admin = AdminClient(cluster.settings.admin_config())
    later = threading.Timer(
        1.0, lambda: admin.create_topics([NewTopic(topic, P + 1, 1)])[topic].result(30)
    )
    consumer = _restorer(cluster)
    store = PartitionStore(tmp_path / "late")
    later.start()
    try:
        assert not last_write_committed(consumer, topic, P, 5)  # a store ahead of an empty log
        done = restore(consumer, topic, P, store)
        assert (done.records, done.start, done.end) == (0, 0, 0)
    finally:
        later.join()
        store.close()
        consumer.close()


def test_a_changelog_written_before_the_one_shape_restores_and_the_fold_goes_on(
    cluster: Cluster, events: EventLog, tmp_path: Path
) -> None:
    # A job record the code before issue 23 stored (format v2, the task at job level).
    old = v2_record("one_task")
    job = "legacy"
    p = partition_for(job, cluster.settings.partitions)
    producer = Producer(cluster.settings.producer_config())
    producer.produce(cluster.topics.job_table_changelog, old, job.encode(), p)
    assert producer.flush(30) == 0
    store = PartitionStore(tmp_path / f"jobs-{p}")
    consumer = _restorer(cluster)
    try:
        assert restore(consumer, cluster.topics.job_table_changelog, p, store).records == 1
        assert list(store.jobs()) == [(job, old)]
        assert list(store.deadlines()) == [(job, index_keys(old)[0])]
    finally:
        consumer.close()
        store.close()
    spec = load_state(old).spec
    assert spec.task_specs == main_task(kind=TaskKind.SHELL, shell="echo hi")  # noqa: S604

    # a scheduler restores it and folds on: the old registration re-sent is a re-delivery (the
    # digest the old code kept), a pause applies and the record is written in format v3
    cluster.scheduler(CRONLOG_AFTER_RELAY="false")
    cluster.send(job, cmd.RegisterJob(spec=spec), idem_key="k0")
    cluster.send(job, cmd.PauseJob(), idem_key="pause-legacy")
    assert events.wait_until(lambda e: e.of_type(ev.JobPaused, job), 60)
    assert [e.idem_key for e in events.events(job) if e.idem_key == "k0"] == []
    reread = _restorer(cluster)
    fresh = PartitionStore(tmp_path / "fresh")
    try:
        restore(reread, cluster.topics.job_table_changelog, p, fresh)
        [value] = [v for k, v in fresh.jobs() if k == job]
    finally:
        reread.close()
        fresh.close()
    assert value.startswith(b"v3:")
    assert load_state(value).spec == spec and load_state(value).status is JobStatus.PAUSED


# -- a scheduler killed during a long restore ----------------------------------------------

BIG = 50_000
"""Changelog records of the big partition: a restore of several seconds on this machine."""


def _store_bytes(path: Path) -> int:
    """Bytes RocksDB has written in ``path`` (write-ahead log and tables)."""
    if not path.exists():
        return 0
    return sum(f.stat().st_size for f in path.iterdir() if f.suffix in (".log", ".sst"))


def _restored_lines(log: str) -> list[int]:
    """``changelog_records`` of every ``partition_restored`` line of partition P."""
    return [
        int(m.group(1))
        for m in re.finditer(
            rf"action=partition_restored partition={P} changelog_records=(\d+)", log
        )
    ]


def test_a_scheduler_killed_during_a_long_restore_resumes_it_and_ends_right(
    cluster: Cluster, events: EventLog, tmp_path: Path
) -> None:
    quiet = (_stored(MANUAL), _stored(HOURLY, cmd.PauseJob()))  # no deadline: nothing fires
    producer = Producer(cluster.settings.producer_config(**{"linger.ms": 20}))
    expected: dict[str, bytes] = {}
    for i in range(BIG):  # 40,000 keys, the first 10,000 written twice
        key = f"bulk{i % 40_000:05d}"
        value = quiet[i // 40_000]
        expected[key] = value
        while True:
            try:
                producer.produce(cluster.topics.job_table_changelog, value, key.encode(), P)
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(60) == 0

    state = tmp_path / "state-s1" / f"jobs-{P}"
    sched = cluster.scheduler("s1", CRONLOG_AFTER_RELAY="false")
    t_start = time.monotonic()
    # kill it once its store of P holds part of the changelog, before P is restored
    wait_for(
        lambda: _store_bytes(state) > 2_000_000,
        60,
        f"the restore of partition {P} to start",
        every=0.05,
    )
    t_kill = time.monotonic()
    sched.kill9()
    first_log = sched.log_tail(400)
    assert _restored_lines(first_log) == [], "the restore ended before the kill: make BIG larger"
    prefix = PartitionStore(state)
    held = prefix.changelog_offset() + 1
    prefix.close()
    assert 0 < held < BIG, held

    restarted = cluster.scheduler("s1", CRONLOG_AFTER_RELAY="false")
    log = wait_for(
        lambda: _restored_lines(restarted.log_tail(400)) and restarted.log_tail(400),
        90,
        f"partition {P} restored after the restart",
    )
    t_restored = time.monotonic()
    [resumed] = _restored_lines(log)
    assert resumed == BIG - held  # from the recorded offset on, not from 0

    probe = next(
        f"probe{i}"
        for i in range(100)
        if partition_for(f"probe{i}", cluster.settings.partitions) == P
    )
    cluster.send(probe, cmd.RegisterJob(spec=MANUAL), idem_key="register-probe")
    cluster.send(probe, cmd.TriggerJob(), idem_key="trigger-probe")
    assert events.wait_until(lambda e: e.of_type(ev.RunScheduled, probe), 60), restarted.log_tail()
    restarted.stop()
    assert restarted.popen is not None and restarted.popen.returncode == 0, restarted.log_tail()

    store = PartitionStore(state)
    fresh = PartitionStore(tmp_path / "fresh")
    consumer = _restorer(cluster)
    try:
        restore(consumer, cluster.topics.job_table_changelog, P, fresh)
        assert dict((k, v) for k, v in store.jobs() if k.startswith("bulk")) == expected
        assert list(store.jobs()) == list(fresh.jobs())  # the probe's record included
        assert list(store.deadlines()) == list(fresh.deadlines())
        assert store.changelog_offset() == fresh.changelog_offset()
    finally:
        consumer.close()
        fresh.close()
        store.close()
    print(
        f"\nkill during restore: {held} of {BIG} changelog records in the store at the kill "
        f"({t_kill - t_start:.1f} s after start); the restart restored the other {resumed} "
        f"({t_restored - t_kill:.1f} s from the kill to partition {P} restored)"
    )
