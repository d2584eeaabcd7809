"""Transient broker errors: which they are, retrying them, and ending what cannot go on.

Retries use capped backoff and are logged once per episode; a thread that cannot go on ends
its process.

Every long-lived consumer or producer loop uses this module; the rules and their sources are in
docs/architecture.md, "Broker errors and dead threads".
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import tenacity
from confluent_kafka import KafkaError, KafkaException, Message

from cronlog.errors import CronlogError

log = logging.getLogger("cronlog.retrying")
T = TypeVar("T")
FATAL_EXIT = 70
"""Exit status of a process ended by ``fatal`` (EX_SOFTWARE, sysexits.h)."""
BACKOFF_FIRST_S = 0.1
BACKOFF_MAX_S = 5.0
"""Retries wait 0.1, 0.2, 0.4 … seconds after consecutive failures, at most this long."""
MAX_DOUBLINGS = 16
"""Doublings counted at most: far past BACKOFF_MAX_S, far below a float's range."""

# confluent-kafka builds the KafkaError of a plain librdkafka error code (every exception of
# get_watermark_offsets, list_topics, committed, commit, a message's error(), error_cb) with
# retriable() False and fatal() False: only errors of librdkafka's rd_kafka_error_t APIs
# (transactions and a few others) carry librdkafka's retriable flag. So for those codes
# retriable() says nothing, and we add the codes that are transient by definition:
_PROTOCOL_RETRIABLE = {
    # Broker error codes the Kafka protocol marks "Retriable: True" (the error table of the
    # protocol guide, kafka.apache.org/39/generated/protocol_errors.html).
    KafkaError.UNKNOWN_TOPIC_OR_PART,  # also: a topic created a moment ago, not yet propagated
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.NOT_LEADER_FOR_PARTITION,  # also: leaders of new partitions still moving in
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError.REPLICA_NOT_AVAILABLE,
    KafkaError.NETWORK_EXCEPTION,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.NOT_COORDINATOR,
    KafkaError.NOT_ENOUGH_REPLICAS,
    KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    KafkaError.NOT_CONTROLLER,
    KafkaError.KAFKA_STORAGE_ERROR,
    KafkaError.FENCED_LEADER_EPOCH,
    KafkaError.UNKNOWN_LEADER_EPOCH,
    KafkaError.OFFSET_NOT_AVAILABLE,
    KafkaError.PREFERRED_LEADER_NOT_AVAILABLE,
    KafkaError.ELIGIBLE_LEADERS_NOT_AVAILABLE,
    KafkaError.UNSTABLE_OFFSET_COMMIT,
    KafkaError.THROTTLING_QUOTA_EXCEEDED,
}
_LOCAL_TRANSIENT = {
    # librdkafka's own codes for a cluster that is (for now) unreachable or slow: librdkafka
    # reconnects and refreshes metadata by itself, the call can be made again.
    KafkaError._TRANSPORT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._RESOLVE,
    KafkaError._TIMED_OUT,
    KafkaError._TIMED_OUT_QUEUE,
    KafkaError._MSG_TIMED_OUT,
    KafkaError._WAIT_COORD,
    # A request in flight on a broker handle librdkafka tears down: the broker left the
    # cluster's metadata (a node killed, then fenced by the controller). The call made again
    # goes to the partition's new leader (issue 25: restore's get_watermark_offsets).
    KafkaError._DESTROY_BROKER,
    # Documented "Permanent" by librdkafka, but what a client sees for a topic created a
    # moment ago by another process until its metadata reaches this client.
    KafkaError._UNKNOWN_TOPIC,
    KafkaError._UNKNOWN_PARTITION,
}
TRANSIENT_CODES = frozenset(_PROTOCOL_RETRIABLE | _LOCAL_TRANSIENT)


class Unavailable(CronlogError):
    """The cluster did not do something in time: transient, worth retrying.

    A flush that left records, a read that got nothing, a topic not there yet.
    """


class Stopped(CronlogError):
    """A retry loop gave up because its thread was asked to stop."""


def kafka_error(exc: BaseException) -> KafkaError | None:
    """Return the KafkaError carried by ``exc`` or by an exception it was raised from."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, KafkaException) and seen.args and isinstance(seen.args[0], KafkaError):
            return seen.args[0]
        seen = seen.__cause__
    return None


def is_fatal(err: KafkaError) -> bool:
    """True when the client instance that reported ``err`` is unusable.

    librdkafka raises a consumer's fatal error (a static member fenced by another with its
    ``group.instance.id``) as an error event coded ``_FATAL`` whose ``fatal()`` flag is not
    set; both count.
    """
    return bool(err.fatal()) or err.code() == KafkaError._FATAL


def is_transient(err: KafkaError) -> bool:
    """True when the operation that failed with ``err`` may succeed if made again.

    A fatal error never is (the client instance is unusable); librdkafka's retriable flag
    counts; otherwise ``TRANSIENT_CODES`` decides.
    """
    if is_fatal(err):
        return False
    return bool(err.retriable()) or err.code() in TRANSIENT_CODES


def transient(exc: BaseException) -> bool:
    """True for an exception worth retrying: a transient KafkaError, or ``Unavailable``."""
    err = kafka_error(exc)
    if err is not None:
        return is_transient(err)
    return isinstance(exc, Unavailable)


class Liveness:
    """One long-lived loop's health: a progress heartbeat and its current episode of trouble.

    The loop calls ``beat()`` every pass, ``failed(err)`` on each transient error (the first of
    an episode is logged, the rest only counted) and ``recovered()`` once a call works again
    (logged once). Meant as a client's ``error_cb`` too: librdkafka's error callback reports
    errors it recovers from by itself (fatal ones are raised by ``poll`` instead). Thread-safe.

    Args:
        name: the loop's name in log lines and health answers (e.g. ``read-model``).
        logger: where the episode lines go; default this module's.
    """

    def __init__(self, name: str, logger: logging.Logger | None = None) -> None:
        self.name, self.log = name, logger or log
        self.failures = 0
        """Failures in the current episode (0: none)."""
        self._error: str | None = None
        self._since = self._last_beat = time.monotonic()
        self._next_probe = 0.0
        self._lock = threading.Lock()

    def beat(self) -> None:
        """Say the loop made progress (or at least went round) just now."""
        self._last_beat = time.monotonic()

    def failed(self, err: object) -> None:
        """Count a transient error; the first of an episode is logged (warning)."""
        with self._lock:
            self.failures += 1
            first, self._error = self._error is None, str(err)
            if first:
                self._since = time.monotonic()
        if first:
            self.log.warning(
                "retrying with backoff up to %.0fs (logged once until it recovers)",
                BACKOFF_MAX_S,
                extra={"action": "broker_trouble", "thread_": self.name, "error": err},
            )

    def recovered(self) -> None:
        """End the current episode, if any (logged once, info)."""
        with self._lock:
            was, failures, self._error, self.failures = self._error, self.failures, None, 0
        if was is not None:
            self.log.info(
                "broker recovered",
                extra={
                    "action": "broker_recovered",
                    "thread_": self.name,
                    "after": f"{time.monotonic() - self._since:.1f}s",
                    "errors": failures,
                    "last_error": was,
                },
            )

    @property
    def troubled(self) -> bool:
        """True during an episode (between a failure and the next success)."""
        return self._error is not None

    def backoff_s(self) -> float:
        """Seconds to wait before the next try: doubles with each failure of the episode."""
        # the exponent is capped: a long outage counts thousands of failures, and 0.1 * 2**1025
        # does not fit a float (OverflowError ended the API and the worker after ~1 minute)
        doublings = min(max(self.failures - 1, 0), MAX_DOUBLINGS)
        return float(min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2**doublings))

    def stalled(self, max_age_s: float) -> bool:
        """True when the loop has not beaten for more than ``max_age_s`` seconds."""
        return time.monotonic() - self._last_beat > max_age_s

    def status(self) -> dict[str, object]:
        """Return ``{thread, ok, error, since_s, beat_age_s}`` for a health answer."""
        now = time.monotonic()
        return {
            "thread": self.name,
            "ok": self._error is None,
            "error": self._error,
            "since_s": round(now - self._since, 1) if self._error is not None else None,
            "beat_age_s": round(now - self._last_beat, 1),
        }

    def probe(self, check: Callable[[], object]) -> None:
        """During an episode, call ``check`` at most every ``backoff_s()``.

        Its success ends the episode (a loop that reads an idle topic has no other sign of
        recovery).

        Raises:
            Exception: whatever ``check`` raises that is not transient.
        """
        if self._error is None or time.monotonic() < self._next_probe:
            return
        self._next_probe = time.monotonic() + self.backoff_s()
        try:
            check()
        except Exception as exc:
            if not transient(exc):
                raise
            self.failed(exc)
            return
        self.recovered()


def record_ok(msg: Message, liveness: Liveness) -> bool:
    """Return True for a consumed record to use.

    An error record is a partition EOF (ignored), a fatal error (raised as KafkaException),
    or else counted as trouble: librdkafka goes on fetching by itself, so the loop goes on
    too.

    Raises:
        KafkaException: the record carries a fatal error.
    """
    err = msg.error()
    if err is None:
        liveness.recovered()
        return True
    if is_fatal(err):
        raise KafkaException(err)
    if err.code() != KafkaError._PARTITION_EOF:
        liveness.failed(err)
    return False


def check_topic(client: Any, topic: str, timeout_s: float = 2.0) -> None:
    """Ask the cluster for ``topic``'s metadata (a probe for ``Liveness.probe``).

    Args:
        client: a confluent-kafka Consumer, Producer or AdminClient.
        topic: the topic to look up.
        timeout_s: how long the metadata request may take, seconds.

    Raises:
        Unavailable: the topic is missing or a partition has no leader.
        KafkaException: the request failed.
    """
    meta = client.list_topics(topic, timeout=timeout_s).topics.get(topic)
    if meta is None or meta.error is not None or not meta.partitions:
        raise Unavailable(f"topic {topic} not in the metadata")
    leaderless = sorted(p for p, m in meta.partitions.items() if m.leader < 0)
    if leaderless:
        raise Unavailable(f"{topic} partitions {leaderless} have no leader")


def call_with_retry(
    fn: Callable[[], T],
    *,
    what: str,
    deadline_s: float | None = None,
    liveness: Liveness | None = None,
    stop: threading.Event | None = None,
) -> T:
    """Return ``fn()``, retrying transient errors (``transient``) with capped backoff.

    Args:
        fn: the call; any exception that is not transient is raised at once.
        what: names the call in the episode's log line.
        deadline_s: give up after this many seconds from the first try; None: never.
        liveness: the loop's Liveness (beats, episode); default a new one named ``what``.
        stop: when set, waiting ends and ``Stopped`` is raised.

    Returns:
        What ``fn`` returned; the episode, if there was one, is logged as recovered.

    Raises:
        Stopped: ``stop`` was set while retrying.
        Exception: ``fn``'s exception when not transient, or the last one at the deadline.
    """
    lv = liveness or Liveness(what)
    stops: list[tenacity.stop.stop_base] = []
    if deadline_s is not None:
        stops.append(tenacity.stop_after_delay(deadline_s))
    if stop is not None:
        stops.append(tenacity.stop_when_event_set(stop))

    def sleep(seconds: float) -> None:
        if stop is None:
            time.sleep(seconds)
        else:
            stop.wait(seconds)

    def before_sleep(state: tenacity.RetryCallState) -> None:
        lv.beat()
        lv.failed(f"{what}: {state.outcome.exception() if state.outcome else '?'}")

    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception(transient),
        wait=lambda _state: lv.backoff_s(),
        stop=tenacity.stop_any(*stops) if stops else tenacity.stop_never,
        sleep=sleep,
        before_sleep=before_sleep,
        reraise=True,
    )
    try:
        result = retrying(fn)
    except Exception as exc:
        if stop is not None and stop.is_set() and transient(exc):
            raise Stopped(f"{what}: stopped while retrying ({exc})") from exc
        raise
    lv.recovered()
    return result


def fatal(thread: str, exc: BaseException | str) -> NoReturn:
    """End the whole process: a thread that cannot go on must not leave a zombie behind.

    Logs one critical line naming the thread and the error (with its traceback), flushes the
    log handlers and exits with ``FATAL_EXIT`` at once (``os._exit``: no other thread or
    atexit hook can hold the process up).
    """
    log.critical(
        "this thread cannot go on; ending the process (exit %d)",
        FATAL_EXIT,
        exc_info=exc if isinstance(exc, BaseException) else None,
        extra={"action": "fatal", "thread_": thread, "error": exc},
    )
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(FATAL_EXIT)


def start_thread(name: str, target: Callable[[], None]) -> threading.Thread:
    """Run ``target`` in a daemon thread named ``name``.

    Whatever it raises but ``Stopped`` ends the process (``fatal``).
    """

    def run() -> None:
        try:
            target()
        except Stopped:
            return
        except BaseException as exc:
            fatal(name, exc)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread
