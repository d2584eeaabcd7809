"""topology.kafka.retrying: which KafkaErrors are transient (real KafkaError objects), retries with
backoff and a deadline, one log line per episode, and ``fatal`` ending the process."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time

import pytest
from confluent_kafka import KafkaError, KafkaException

from cronlog.errors import CronlogError
from services.logging_setup import LineFormatter
from topology.kafka.retrying import (
    FATAL_EXIT,
    Liveness,
    Stopped,
    Unavailable,
    call_with_retry,
    is_fatal,
    is_transient,
    transient,
)
from topology.kafka.retrying import log as retry_log

TRANSIENT = [
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.NOT_COORDINATOR,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError._TRANSPORT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._TIMED_OUT,
    KafkaError._MSG_TIMED_OUT,
    KafkaError._UNKNOWN_PARTITION,
    KafkaError._DESTROY_BROKER,  # a broker-node kill during restore (issue 25)
]
PERMANENT = [
    KafkaError._DESTROY,  # the client itself is being closed
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.MSG_SIZE_TOO_LARGE,
    KafkaError.INVALID_CONFIG,
    KafkaError._INVALID_ARG,
    KafkaError.OFFSET_OUT_OF_RANGE,
]


@pytest.mark.parametrize("code", TRANSIENT)
def test_plainly_transient_codes_are_transient_although_librdkafka_flags_them_not_retriable(
    code: int,
) -> None:
    err = KafkaError(code)
    assert (err.retriable(), err.fatal()) == (False, False)  # what confluent-kafka reports
    assert is_transient(err)
    assert transient(KafkaException(err))


@pytest.mark.parametrize("code", PERMANENT)
def test_permanent_codes_are_not_transient(code: int) -> None:
    assert not is_transient(KafkaError(code))
    assert not transient(KafkaException(KafkaError(code)))


def test_librdkafkas_retriable_flag_counts() -> None:
    assert is_transient(KafkaError(KafkaError.INVALID_CONFIG, retriable=True))


def test_a_fatal_error_is_never_transient_whatever_its_code() -> None:
    assert not is_transient(KafkaError(KafkaError._TRANSPORT, fatal=True))
    assert not is_transient(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION, "x", True, True))


def test_a_wrapped_kafka_error_is_classified_by_its_cause() -> None:
    try:
        try:
            raise KafkaException(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION))
        except KafkaException as exc:
            raise CronlogError("cannot read the offsets") from exc
    except CronlogError as wrapped:
        assert transient(wrapped)
    assert transient(Unavailable("flush left 3 records"))
    assert not transient(CronlogError("a bug"))
    assert not transient(ValueError("a bug"))


def _failing(errors: list[BaseException], result: str = "ok") -> tuple[list[int], object]:
    calls = [0]

    def fn() -> str:
        calls[0] += 1
        if errors:
            raise errors.pop(0)
        return result

    return calls, fn


def test_transient_errors_are_retried_until_the_call_works(
    caplog: pytest.LogCaptureFixture,
) -> None:
    not_leader = KafkaException(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION))
    calls, fn = _failing([not_leader, not_leader, not_leader])
    with caplog.at_level(logging.INFO, logger=retry_log.name):
        assert call_with_retry(fn, what="watermarks") == "ok"  # type: ignore[arg-type]
    assert calls == [4]
    actions = [getattr(r, "action", None) for r in caplog.records]
    assert actions == ["broker_trouble", "broker_recovered"]
    assert " errors=3 " in LineFormatter("test").format(caplog.records[1])


def test_a_permanent_error_is_raised_at_once() -> None:
    denied = KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    calls, fn = _failing([denied])
    with pytest.raises(KafkaException) as raised:
        call_with_retry(fn, what="watermarks")  # type: ignore[arg-type]
    assert raised.value is denied
    assert calls == [1]


def test_the_deadline_gives_up_with_the_last_error() -> None:
    down = [KafkaException(KafkaError(KafkaError._ALL_BROKERS_DOWN)) for _ in range(100)]
    calls, fn = _failing(down)
    started = time.monotonic()
    with pytest.raises(KafkaException) as raised:
        call_with_retry(fn, what="watermarks", deadline_s=0.5)  # type: ignore[arg-type]
    assert raised.value.args[0].code() == KafkaError._ALL_BROKERS_DOWN
    assert 0.5 <= time.monotonic() - started < 2.0
    assert 3 <= calls[0] < 10  # 0.1 + 0.2 + 0.4 s of backoff, then past the deadline


def test_a_stop_ends_the_retries_with_stopped() -> None:
    stop = threading.Event()
    down = [KafkaException(KafkaError(KafkaError._TRANSPORT)) for _ in range(1000)]
    _calls, fn = _failing(down)
    threading.Timer(0.3, stop.set).start()
    with pytest.raises(Stopped):
        call_with_retry(fn, what="watermarks", stop=stop)  # type: ignore[arg-type]


def test_backoff_doubles_and_is_capped() -> None:
    lv = Liveness("t")
    waits = []
    for _ in range(10):
        lv.failed("x")
        waits.append(lv.backoff_s())
    assert waits[:4] == [0.1, 0.2, 0.4, 0.8]
    assert waits[-1] == 5.0
    lv.recovered()
    assert lv.backoff_s() == 0.1


def test_a_long_outage_of_thousands_of_failures_keeps_the_capped_backoff() -> None:
    # librdkafka reports ~19 errors a second while the broker is down: 2**1024 * 0.1 raised
    # OverflowError after ~55 s and ended the API and the worker (adversary finding F4)
    lv = Liveness("t")
    for _ in range(5000):
        lv.failed("x")
    assert lv.backoff_s() == 5.0


def test_an_episode_is_logged_once_and_its_recovery_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lv = Liveness("read-model")
    with caplog.at_level(logging.INFO, logger=retry_log.name):
        for _ in range(50):  # what error_cb reports while the broker is down: ~20 a second
            lv.failed(KafkaError(KafkaError._TRANSPORT, "Connection refused"))
        assert lv.troubled and lv.status()["ok"] is False
        lv.recovered()
        lv.recovered()
    lines = [LineFormatter("test").format(r) for r in caplog.records]  # the lines as written
    assert len(lines) == 2
    assert " action=broker_trouble thread=read-model error=" in lines[0]
    assert "Connection refused" in lines[0]
    assert " action=broker_recovered thread=read-model after=" in lines[1]
    assert " errors=50 " in lines[1]
    assert not lv.troubled


def test_probe_ends_an_episode_only_when_the_check_works() -> None:
    lv = Liveness("t")
    lv.probe(lambda: 1 / 0)  # not troubled: no check made
    lv.failed("down")
    lv._next_probe = 0.0

    def still_down() -> None:
        raise KafkaException(KafkaError(KafkaError._TRANSPORT))

    lv.probe(still_down)
    assert lv.troubled and lv.failures == 2
    lv._next_probe = 0.0
    lv.probe(lambda: None)
    assert not lv.troubled


def test_stalled_after_no_beat() -> None:
    lv = Liveness("t")
    assert not lv.stalled(5.0)
    time.sleep(0.05)
    assert lv.stalled(0.01)
    lv.beat()
    assert not lv.stalled(1.0)


def test_a_thread_that_raises_ends_its_process_with_70_and_a_clear_last_line() -> None:
    code = (
        "import time\n"
        "from services.logging_setup import configure_logging\n"
        "from topology.kafka.retrying import start_thread\n"
        "configure_logging('test')\n"
        "def boom():\n"
        "    raise RuntimeError('the consumer is gone')\n"
        "start_thread('read-model', boom)\n"
        "time.sleep(30)\n"
        "print('still alive')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == FATAL_EXIT
    assert "still alive" not in done.stdout
    lines = done.stderr.rstrip().splitlines()
    assert len(lines) == 1  # the traceback is in the line (exc=…), not after it
    assert ' action=fatal thread=read-model error="the consumer is gone" ' in lines[0]
    assert lines[0].endswith('\\nRuntimeError: the consumer is gone"')


def test_a_consumer_fatal_event_counts_as_fatal_though_its_flag_is_not_set() -> None:
    # what librdkafka hands a static member fenced by its own rejoin (KAFKA-20985)
    event = KafkaError(KafkaError._FATAL, "Static consumer fenced by other consumer")
    assert not event.fatal()
    assert is_fatal(event)
    assert not is_transient(event)
    assert is_fatal(KafkaError(KafkaError._FENCED, "fenced", fatal=True))
    assert not is_fatal(KafkaError(KafkaError._TRANSPORT, "down"))
