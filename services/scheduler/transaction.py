"""One batch, one transaction: the scheduler's transactional producer and its failure rules.

A batch's run-events, copies, dead letters, continuation Ticks, changelog records and consumed
offsets are produced in one transaction (Kafka Streams' EOS v2, KIP-447: the offsets go with
the consumer's group metadata, so a zombie whose group generation is over cannot commit).
Transient failures are retried with backoff; the group moving on aborts the batch (the caller
folds it again once it knows what it owns); a fenced producer is renewed; a call that blocks
past its own timeout ends the process (``topology.kafka.watchdog``), except
``send_offsets_to_transaction``, which librdkafka can leave blocked for good after a broker
restart: past its deadline the producer is abandoned and a new one takes over (``abandon``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from functools import partial

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from services.scheduler.faults import CrashPoints
from services.scheduler.settings import SchedulerSettings
from topology.fold.folder import BatchResult
from topology.fold.markers import changelog_key
from topology.kafka.retrying import call_with_retry, is_transient
from topology.kafka.topics import Topics
from topology.kafka.watchdog import Watchdog

log = logging.getLogger("cronlog.scheduler")
UNASSIGNED = -1
"""librdkafka's RD_KAFKA_PARTITION_UA: let the (murmur2) partitioner choose."""
CALL_TIMEOUT_S = 30.0
"""Timeout of each blocking transactional call, seconds (the watchdog adds its grace)."""
COMMIT_BACKOFF_S = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
ABORT_TRIES = 3
"""Calls of ``abort_transaction`` (each CALL_TIMEOUT_S) before the process gives up."""
"""Waits between attempts to commit a batch through transient broker errors, seconds."""
OFFSETS_TIMEOUT_S = 10.0
"""``send_offsets_to_transaction``'s own timeout, seconds."""
OFFSETS_DEADLINE_S = OFFSETS_TIMEOUT_S + 5.0
"""How long ``send_offsets_to_transaction`` is waited for before it is taken as stuck:
librdkafka checks its timeout only once the request is sent, so a call waiting for a group
coordinator connection after a broker restart can block for good (librdkafka #5456, #5511)."""
FENCED_LIMIT = 5
"""Producer renewals after a fence allowed per minute before the process gives up."""
GROUP_ERRORS = frozenset(
    {
        KafkaError.ILLEGAL_GENERATION,
        KafkaError.UNKNOWN_MEMBER_ID,
        KafkaError.FENCED_INSTANCE_ID,
        KafkaError.REBALANCE_IN_PROGRESS,
    }
)
"""Offsets refused because the group moved on: this batch's partitions may be another
process's now. The transaction is aborted and the loop polls (and is told of the revoke)."""


class Fenced(Exception):
    """This process may no longer write: its producer was fenced too often (another live
    process has its transactional.id) or its consumer failed fatally. The process must end."""


class CallStuck(Exception):
    """A transactional call did not return by its deadline (librdkafka #5456, #5511)."""


def _call_with_deadline(call: Callable[[], None], deadline_s: float, what: str) -> None:
    """Run ``call`` on a daemon thread and wait for it at most ``deadline_s`` seconds.

    Raises:
        CallStuck: it had not returned by then (the thread is left to it: a daemon, so it
            never holds the process's exit).
        KafkaException: what ``call`` raised.
    """
    done = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # handed to the waiting thread
            failure.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, name=f"txn-{what}", daemon=True).start()
    if not done.wait(deadline_s):
        raise CallStuck(f"{what} did not return in {deadline_s:.0f}s")
    if failure:
        raise failure[0]


class BatchTransactions:
    """The transactional producer of one scheduler process.

    Args:
        settings: the scheduler's settings (instance id → transactional.id, timeout).
        consumer: the fold's consumer (its group metadata goes with the offsets).
        faults: crash points (``before_commit``).
        stop: SIGTERM; ends waiting for a broker that is down.
        watchdog: guards the blocking calls.

    Thread safety: one thread at a time: ``init`` on the fold's, then ``commit`` (and the
    ``abort`` and ``renew`` it calls) on the pipeline's commit thread
    (``services/scheduler/pipeline.py``), one commit at a time; ``member_fenced`` is read by
    the fold once the commit returned.
    """

    def __init__(
        self,
        settings: SchedulerSettings,
        consumer: Consumer,
        faults: CrashPoints,
        stop: threading.Event,
        watchdog: Watchdog,
    ) -> None:
        self.settings = settings
        self.topics = Topics.of(settings)
        self.consumer = consumer
        self.faults = faults
        self.stop = stop
        self.watchdog = watchdog
        self.producer = self._new_producer()
        self.fenced_at: list[float] = []
        """When the producer was last renewed after being fenced (a bound on how often)."""
        self.abandoned: list[Producer] = []
        """Producers left inside a stuck call: kept referenced, since destroying a client
        while one of its calls runs is undefined in librdkafka."""
        self.member_fenced: KafkaError | None = None
        """Set when the group refused a batch's offsets as from a fenced static member
        (FENCED_INSTANCE_ID): the consumer is dead too; the fold rejoins and clears it."""

    def _new_producer(self) -> Producer:
        s = self.settings
        return Producer(
            s.producer_config(
                **{
                    "transactional.id": f"{self.topics.scheduler_app}-{s.instance_id}",
                    "transaction.timeout.ms": int(s.transaction_timeout_s * 1000),
                    "linger.ms": 1,
                    "queue.buffering.max.messages": 500_000,
                }
            )
        )

    def init(self) -> None:
        """Register the transactional.id (fencing any older producer of it and aborting its
        open transaction); a broker that is down is waited for (librdkafka: a timed-out
        ``init_transactions`` may be called again).

        Raises:
            Stopped: SIGTERM while waiting for the broker.
        """

        def once() -> None:
            with self.watchdog.guard("init_transactions", CALL_TIMEOUT_S):
                self.producer.init_transactions(CALL_TIMEOUT_S)

        call_with_retry(once, what="init_transactions", stop=self.stop)

    def renew(self, err: KafkaError) -> None:
        """The producer was fenced: its transaction timed out and was aborted (a broker
        outage, a process frozen past the timeout) or the group moved on. Kafka Streams' rule:
        close it as a zombie and start again with a new one (``init_transactions`` bumps the
        epoch), after rolling the batch back. More than ``FENCED_LIMIT`` times a minute means
        another live process uses this transactional.id (a duplicated instance id): that is
        fatal.

        Raises:
            Fenced: fenced too often.
            Stopped: SIGTERM while waiting for the broker.
        """
        self._count_renewal(err)
        log.warning(
            "fenced; a new producer takes over", extra={"action": "producer_renewed", "error": err}
        )
        with contextlib.suppress(KafkaException):  # a fatal producer may raise on any call
            self.producer.purge()
        self.producer = self._new_producer()
        self.init()

    def commit(
        self, out: BatchResult, ends: dict[int, int], group: object | None = None
    ) -> dict[int, int] | None:
        """Produce the batch's output and its offsets in one transaction and commit it.

        Args:
            out: what the batch decided.
            ends: commands partition → offset of the next record to fold there.
            group: the consumer's group metadata, read on the consumer's thread when the
                batch was handed over (default: read here).

        Returns:
            partition → offset of the last changelog record produced there (empty when the
            batch wrote no record); None when the transaction was aborted (the caller
            re-folds the batch: nothing of it is visible, nothing was written).

        Raises:
            Fenced: the producer is fenced too often.
        """
        guard = self.watchdog.guard
        for attempt, backoff in enumerate((0.0, *COMMIT_BACKOFF_S)):
            time.sleep(backoff)
            changelog: dict[int, int] = {}
            try:
                self.producer.begin_transaction()
                self._produce(out, changelog)
                if out.sends or out.writes:
                    self.faults.reached("before_commit")
                offsets = [TopicPartition(self.topics.commands, p, o) for p, o in ends.items()]
                meta = group or self.consumer.consumer_group_metadata()
                _call_with_deadline(
                    partial(
                        self.producer.send_offsets_to_transaction,
                        offsets,
                        meta,
                        OFFSETS_TIMEOUT_S,
                    ),
                    OFFSETS_DEADLINE_S,
                    "send_offsets_to_transaction",
                )
                with guard("commit_transaction", CALL_TIMEOUT_S):
                    self.producer.commit_transaction(CALL_TIMEOUT_S)
                return changelog
            except CallStuck as exc:  # nothing of the batch is visible; fold it again
                self.abandon(exc)
                return None
            except KafkaException as exc:
                err = exc.args[0]
                if err.fatal():  # fenced: nothing of the batch is visible; fold it again
                    self.renew(err)
                    return None
                log.warning(
                    "transaction failed",
                    extra={"action": "txn_failed", "attempt": attempt + 1, "error": err},
                )
                if err.code() == KafkaError.FENCED_INSTANCE_ID:
                    self.member_fenced = err
                if not self.abort():
                    return None
                if err.code() in GROUP_ERRORS or (
                    not is_transient(err) and not err.txn_requires_abort()
                ):
                    return None
        return None

    def _count_renewal(self, why: object) -> None:
        """Count one producer renewal (a fence or a stuck call) in the last minute.

        Raises:
            Fenced: more than ``FENCED_LIMIT`` renewals in a minute.
        """
        now = time.monotonic()
        self.fenced_at = [t for t in self.fenced_at if now - t < 60.0] + [now]
        if len(self.fenced_at) > FENCED_LIMIT:
            raise Fenced(f"producer fenced {len(self.fenced_at)} times in a minute: {why}")

    def abandon(self, exc: CallStuck) -> None:
        """A call of the producer is stuck inside librdkafka: leave that producer where it
        is and start a new one of the same transactional.id, whose ``init_transactions``
        fences the old one and aborts its open transaction (the batch is folded again).
        Kafka Streams' rule for a zombie producer, applied to one that cannot answer. Counted
        with the fences against ``FENCED_LIMIT``.

        Raises:
            Fenced: renewed too often in a minute.
            Stopped: SIGTERM while waiting for the broker.
        """
        self._count_renewal(exc)
        log.warning(
            "a transactional call is stuck; a new producer takes over",
            extra={"action": "producer_abandoned", "error": str(exc)},
        )
        self.abandoned.append(self.producer)
        self.producer = self._new_producer()
        self.init()

    def abort(self) -> bool:
        """Abort the open transaction; False when the producer had to be renewed.

        An abort that times out is still in progress: librdkafka's rule is to call
        ``abort_transaction`` again to resume it (any other transactional call fails with
        ``_CONFLICT`` until then, which once kept a scheduler retrying for minutes without
        folding). After ABORT_TRIES timed-out calls the transaction coordinator is taken as
        lost for this client (librdkafka #5456): the producer is abandoned and a new one's
        ``init_transactions`` fences it and aborts the transaction (``abandon``).

        Raises:
            Fenced: renewed too often in a minute (``abandon``).
        """
        err: KafkaError | None = None
        for _ in range(ABORT_TRIES):
            try:
                with self.watchdog.guard("abort_transaction", CALL_TIMEOUT_S):
                    self.producer.abort_transaction(CALL_TIMEOUT_S)
                return True
            except KafkaException as exc:
                err = exc.args[0]
                if err.fatal():
                    self.renew(err)
                    return False
                log.warning("abort failed", extra={"action": "txn_abort_failed", "error": err})
                if not err.retriable():  # e.g. no transaction to abort: nothing to resume
                    return True
        self.abandon(
            CallStuck(
                f"abort_transaction did not complete after {ABORT_TRIES} calls of "
                f"{CALL_TIMEOUT_S:.0f}s ({err})"
            )
        )
        return False

    def _produce(self, out: BatchResult, changelog: dict[int, int]) -> None:
        def track(err: KafkaError | None, msg: Message) -> None:
            p, offset = msg.partition(), msg.offset()
            if err is None and p is not None and offset is not None:
                changelog[p] = max(changelog.get(p, -1), offset)

        send = self._sender()
        for s in out.sends:
            send(s.topic, s.key, s.value, s.partition, None)
        rows: list[tuple[bytes, bytes | None, int]] = [
            (job_id.encode(), w.value, w.partition) for job_id, w in out.writes.items()
        ]
        # None: a tombstone (the marker expired)
        rows += [(changelog_key(key), value, p) for (p, key), value in out.markers.items()]
        # Only each partition's last record reports its offset (the idempotent producer keeps
        # a partition's order): a report per record needs the GIL back once each, and with
        # the fold deciding on the other thread each waited out a switch interval (a commit
        # of ~3,000 records took 8-11 s on a loaded box).
        last = {p: i for i, (_, _, p) in enumerate(rows)}
        for i, (key, value, p) in enumerate(rows):
            send(self.topics.job_table_changelog, key, value, p, track if last[p] == i else None)
        self.producer.flush(CALL_TIMEOUT_S)  # serves the delivery reports: changelog offsets

    def _sender(self) -> Callable[..., None]:
        produce, poll = self.producer.produce, self.producer.poll

        def send(
            topic: str,
            key: bytes | None,
            value: bytes | None,
            partition: int | None,
            cb: Callable[[KafkaError | None, Message], None] | None,
        ) -> None:
            p = UNASSIGNED if partition is None else partition
            while True:
                try:
                    produce(topic, value, key, p, on_delivery=cb)
                    return
                except BufferError:
                    poll(0.05)  # the local queue is full: let deliveries drain

        return send
