"""The worker's replies reader: answers to its claims and renewals, from its own partition of
``cronlog.replies`` (keyed by worker_id; manual assignment from the end, no group)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from functools import partial

from confluent_kafka import Consumer, TopicPartition

from cronlog import events as ev
from services.worker.settings import ANSWER_FETCH_WAIT_MS, WorkerSettings
from topology.kafka.partitioning import partition_for
from topology.kafka.retrying import Liveness, call_with_retry, check_topic, record_ok
from topology.wire.codec import DecodeError, decode_event

log = logging.getLogger("cronlog.worker")
REPLIES_PER_CALL = 500
"""Replies taken from librdkafka's queue in one call at most."""


def read_replies(
    settings: WorkerSettings,
    topic: str,
    ready: threading.Event,
    keep_going: Callable[[], bool],
    on_answer: Callable[[ev.RunEvent], None],
    *,
    liveness: Liveness,
    stop: threading.Event,
) -> None:
    """Read this worker's replies until ``keep_going()`` is false, calling
    ``on_answer(run_event)`` for each; ``ready`` is set once reading from the end.

    Transient broker errors are retried and reported through ``liveness`` (right after topic
    creation the partition may have no leader yet); ``stop`` ends the wait for the end offset.

    Raises:
        topology.kafka.retrying.Stopped: ``stop`` was set before the end offset could be read.
        KafkaException: a fatal or permanent broker error.
    """
    consumer = Consumer(
        settings.consumer_config(
            f"{settings.ready_group()}-replies-{settings.worker_id}",
            # answered as the grant's transaction commits, whatever the wait (settings.py)
            **{"error_cb": liveness.failed, "fetch.wait.max.ms": ANSWER_FETCH_WAIT_MS},
        )
    )
    tp = TopicPartition(topic, partition_for(settings.worker_id, settings.partitions))
    try:
        _low, high = call_with_retry(
            partial(consumer.get_watermark_offsets, tp, timeout=10),
            what="reading the replies partition's end offset",
            liveness=liveness,
            stop=stop,
        )
        consumer.assign([TopicPartition(tp.topic, tp.partition, high)])
        ready.set()
        me = settings.worker_id.encode()
        while keep_going():
            liveness.beat()
            # wait for one answer, then take what else has arrived in one call (a busy
            # worker's answers come many at a time; consume() with a timeout would wait for
            # all REPLIES_PER_CALL of them)
            first = consumer.poll(0.2)
            liveness.probe(lambda: check_topic(consumer, topic))
            if first is None:
                continue
            msgs = [first, *consumer.consume(num_messages=REPLIES_PER_CALL, timeout=0)]
            for msg in msgs:
                if not record_ok(msg, liveness) or msg.key() != me:
                    continue  # another worker's answer (partitions are shared): never decoded
                try:
                    record = decode_event(msg.value() or b"")
                except DecodeError:
                    log.exception("undecodable reply")
                    continue
                on_answer(record)
    finally:
        consumer.close()
