"""The worker's replies reader: answers to its claims and renewals, from its own partition of
``cronlog.replies`` (keyed by worker_id; manual assignment from the end, no group)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from confluent_kafka import Consumer, KafkaException, TopicPartition

from cronlog import events as ev
from cronlog.errors import CronlogError
from services.worker.settings import WorkerSettings
from topology.codec import DecodeError, decode_event
from topology.partitioning import partition_for

log = logging.getLogger("cronlog.worker")
T = TypeVar("T")


def retry(call: Callable[[], T], what: str, attempts: int = 20) -> T:
    """Call ``call`` until it succeeds (right after topic creation leaders may still move)."""
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except KafkaException as exc:
            if attempt == attempts:
                raise CronlogError(f"{what}: {exc}") from exc
            log.warning("%s failed (%s); retrying", what, exc)
            time.sleep(min(0.2 * 2**attempt, 3.0))
    raise AssertionError("unreachable")


def read_replies(
    settings: WorkerSettings,
    topic: str,
    ready: threading.Event,
    keep_going: Callable[[], bool],
    on_answer: Callable[[str, ev.Event], None],
) -> None:
    """Read this worker's replies until ``keep_going()`` is false, calling
    ``on_answer(job_id, event)`` for each; ``ready`` is set once reading from the end.

    Raises:
        CronlogError: the partition's end offset could not be read (after retries).
    """
    consumer = Consumer(
        settings.consumer_config(f"{settings.ready_group()}-replies-{settings.worker_id}")
    )
    tp = TopicPartition(topic, partition_for(settings.worker_id, settings.partitions))
    high = retry(
        lambda: consumer.get_watermark_offsets(tp, timeout=10)[1],
        "reading the replies partition's end offset",
    )
    consumer.assign([TopicPartition(tp.topic, tp.partition, high)])
    ready.set()
    me = settings.worker_id.encode()
    try:
        while keep_going():
            msg = consumer.poll(0.2)
            if msg is None or msg.error() or msg.key() != me:
                continue
            try:
                record = decode_event(msg.value() or b"")
            except DecodeError:
                log.exception("undecodable reply")
                continue
            on_answer(record.job_id, record.event)
    finally:
        consumer.close()
