"""The one logging set-up (services/logging_setup.py): logfmt quoting, JSON, fields, secrets."""

from __future__ import annotations

import io
import json
import logging
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import SecretStr

from cronlog import events as ev
from services.api.settings import ApiSettings
from services.archive.settings import ArchiveSettings
from services.logging_setup import LineFormatter, configure_logging, log_settings, logfmt_value
from services.worker.attempts import log_task_started
from topology.kafka.config import KafkaSettings

PAIR = re.compile(r'([^\s="]+)=("(?:[^"\\]|\\.)*"|[^\s"]*)')
"""One logfmt pair: a bare key, then a bare value or a double-quoted one with escapes."""


def pairs(line: str) -> list[tuple[str, str]]:
    """The pairs of a logfmt line, quoted values JSON-decoded; fails on anything else."""
    assert "\n" not in line and "\r" not in line
    found, end = [], 0
    for m in PAIR.finditer(line):
        assert line[end : m.start()].strip() == "", f"junk before {m.group(0)!r} in {line!r}"
        value = m.group(2)
        found.append((m.group(1), json.loads(value) if value.startswith('"') else value))
        end = m.end()
    assert line[end:].strip() == "", f"junk at the end of {line!r}"
    return found


def fields(line: str) -> dict[str, str]:
    return dict(pairs(line))


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """The process's logging set up as a service's, writing to a buffer; restored after."""
    root = logging.getLogger()
    saved = root.handlers[:], root.level, sys.excepthook, threading.excepthook
    buffer = io.StringIO()
    configure_logging("test", stream=buffer, level="info", fmt="logfmt")
    yield buffer
    root.handlers[:], root.level, sys.excepthook, threading.excepthook = saved


def record(msg: str = "hello", **extra: object) -> logging.LogRecord:
    return logging.getLogger("cronlog.t").makeRecord(
        "cronlog.t", logging.INFO, __file__, 1, msg, (), None, extra=extra
    )


@pytest.mark.parametrize(
    ("value", "rendered"),
    [
        ("plain", "plain"),
        ("127.0.0.1:9092", "127.0.0.1:9092"),
        ("", '""'),
        ("two words", '"two words"'),
        ("a=b", '"a=b"'),
        ('say "hi"', '"say \\"hi\\""'),
        ('a"b', '"a\\"b"'),
        ("C:\\dir", '"C:\\\\dir"'),
        ("line\nbreak", '"line\\nbreak"'),
        ("cr\rtab\t", '"cr\\rtab\\t"'),
        ("bell\x07del\x7f", '"bell\\u0007del\\u007f"'),
        ("nel\x85ls\u2028", '"nel\\u0085ls\\u2028"'),
        ("émoji✓", "émoji✓"),
        (None, "null"),
        (True, "true"),
        (3, "3"),
        (2.5, "2.5"),
        ([0, 1, 2], "[0,1,2]"),
        (("a b",), '"[\\"a b\\"]"'),
        ({2, 1}, "[1,2]"),
        (datetime(2026, 12, 3, 10, 0, tzinfo=UTC), "2026-12-03T10:00:00+00:00"),
        (ValueError("bad value: x=1"), '"bad value: x=1"'),
    ],
)
def test_a_logfmt_value_is_bare_only_when_it_needs_no_quoting(value: object, rendered: str) -> None:
    assert logfmt_value(value) == rendered


@given(st.text())
def test_any_text_survives_a_logfmt_line_whole_and_on_one_line(text: str) -> None:
    line = LineFormatter("test").format(record(text, error=text, **{"k": text}))
    assert len(line.splitlines()) == 1
    got = fields(line)
    assert got["msg"] == got["error"] == got["k"] == text


@given(st.text())
def test_any_text_survives_a_json_line_whole_and_on_one_line(text: str) -> None:
    line = LineFormatter("test", json_lines=True).format(record(text, error=text))
    assert len(line.splitlines()) == 1
    got = json.loads(line)
    assert got["msg"] == got["error"] == text


def test_a_line_has_its_own_keys_then_the_action_then_every_field_then_the_message() -> None:
    line = LineFormatter("worker").format(
        record("task started", run_id="r1", action="task_started", task="t", attempt=2)
    )
    keys = [k for k, _ in pairs(line)]
    assert keys == [
        "ts",
        "level",
        "service",
        "logger",
        "action",
        "run_id",
        "task",
        "attempt",
        "msg",
    ]
    got = fields(line)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", got["ts"])
    assert (got["level"], got["service"], got["logger"]) == ("info", "worker", "cronlog.t")
    assert " action=task_started run_id=r1 task=t attempt=2 " in line


def test_a_field_named_like_a_record_attribute_or_an_own_key_keeps_a_readable_name() -> None:
    line = LineFormatter("s").format(record("m", thread_="fold", level="x", service="otel"))
    got = fields(line)
    assert got["thread"] == "fold"
    assert (got["level"], got["level_"]) == ("info", "x")
    assert (got["service"], got["service_"]) == ("s", "otel")


def test_a_dict_field_becomes_dotted_keys_and_json_keeps_it_nested() -> None:
    rec = record("m", settings={"a": 1, "b": {"c": "x y"}, "e": {}})
    got = fields(LineFormatter("s").format(rec))
    assert (got["settings.a"], got["settings.b.c"], got["settings.e"]) == ("1", "x y", "{}")
    assert json.loads(LineFormatter("s", json_lines=True).format(rec))["settings"] == {
        "a": 1,
        "b": {"c": "x y"},
        "e": {},
    }


def test_an_exception_is_one_escaped_exc_field_never_a_raw_traceback(
    captured: io.StringIO,
) -> None:
    try:
        raise RuntimeError('the consumer is gone "now"')
    except RuntimeError:
        logging.getLogger("cronlog.t").exception(
            "read failed", extra={"action": "fatal", "thread_": "read-model"}
        )
    lines = captured.getvalue().splitlines()
    assert len(lines) == 1
    got = fields(lines[0])
    assert (got["level"], got["action"], got["thread"]) == ("error", "fatal", "read-model")
    assert got["exc"].startswith("Traceback (most recent call last):\n")
    assert got["exc"].endswith('RuntimeError: the consumer is gone "now"')


def test_the_level_and_the_format_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, captured: io.StringIO
) -> None:
    monkeypatch.setenv("CRONLOG_LOG_LEVEL", "WARNING")
    monkeypatch.setenv("CRONLOG_LOG_FORMAT", "json")
    buffer = io.StringIO()
    configure_logging("api", stream=buffer)
    log = logging.getLogger("cronlog.t")
    log.info("not shown", extra={"action": "x"})
    log.warning("shown", extra={"action": "y", "n": 1})
    (line,) = buffer.getvalue().splitlines()
    got = json.loads(line)
    assert {k: got[k] for k in ("level", "service", "action", "n", "msg")} == {
        "level": "warning",
        "service": "api",
        "action": "y",
        "n": 1,
        "msg": "shown",
    }


def test_an_unknown_log_setting_falls_back_to_the_default_and_says_so(
    monkeypatch: pytest.MonkeyPatch, captured: io.StringIO
) -> None:
    monkeypatch.setenv("CRONLOG_LOG_FORMAT", "xml")
    monkeypatch.setenv("CRONLOG_LOG_LEVEL", "loud")
    buffer = io.StringIO()
    configure_logging("api", stream=buffer)
    lines = [fields(ln) for ln in buffer.getvalue().splitlines()]
    assert [(f["action"], f["variable"], f["value"], f["used"]) for f in lines] == [
        ("log_setting_unknown", "CRONLOG_LOG_FORMAT", "xml", "logfmt"),
        ("log_setting_unknown", "CRONLOG_LOG_LEVEL", "loud", "info"),
    ]
    assert logging.getLogger().level == logging.INFO


def test_a_call_below_the_level_renders_no_field(captured: io.StringIO) -> None:
    class Loud:
        def __str__(self) -> str:
            raise AssertionError("rendered although below the level")

    logging.getLogger("cronlog.t").debug("quiet", extra={"action": "x", "v": Loud()})
    assert captured.getvalue() == ""


SECRET = "s3cr3t-Pa55"  # noqa: S105 (the secret the lines must not show)


def test_the_settings_line_prints_every_setting_and_no_secret(captured: io.StringIO) -> None:
    settings = ApiSettings(
        bootstrap="127.0.0.1:19292",
        kafka_security_protocol="SASL_SSL",
        kafka_sasl_username="cronlog",
        kafka_sasl_password=SecretStr(SECRET),
        schema_registry_url=f"https://registry-user:{SECRET}@registry.internal:8081",
        schema_registry_basic_auth=SecretStr(f"u:{SECRET}"),
        api_cursor_key=SecretStr(SECRET),
    )
    log_settings(logging.getLogger("cronlog.api"), settings, action="api.start")
    archive = ArchiveSettings(archive_s3_secret_key=SecretStr(SECRET))
    log_settings(logging.getLogger("cronlog.archive"), archive)
    text = captured.getvalue()
    assert SECRET not in text
    api_line, archive_line = (fields(ln) for ln in text.splitlines())
    assert api_line["action"] == "api.start"
    assert {k.removeprefix("settings.") for k in api_line if k.startswith("settings.")} == set(
        ApiSettings.model_fields
    )
    assert api_line["settings.bootstrap"] == "127.0.0.1:19292"
    assert api_line["settings.kafka_sasl_username"] == "cronlog"
    assert api_line["settings.kafka_sasl_password"] == "**********"  # noqa: S105
    assert api_line["settings.schema_registry_url"] == (
        "https://registry-user:***@registry.internal:8081"
    )
    assert (archive_line["action"], archive_line["settings.archive_s3_secret_key"]) == (
        "start",
        "**********",
    )


def test_redacted_settings_hold_no_secret_in_json_either() -> None:
    settings = KafkaSettings(
        schema_registry_url=f"http://u:{SECRET}@[::1",  # not parsable: redacted whole
        schema_registry_basic_auth=SecretStr(SECRET),
    )
    line = LineFormatter("s", json_lines=True).format(record("m", settings=settings.redacted()))
    assert SECRET not in line
    assert json.loads(line)["settings"]["schema_registry_url"] == "***"


def test_the_workers_task_start_line_carries_the_attempts_identity(
    captured: io.StringIO,
) -> None:
    at = datetime(2026, 12, 3, 10, 0, tzinfo=UTC)
    grant = ev.TaskClaimed(
        run_id="r0123456789abcdef01234567",
        task="load",
        attempt=2,
        epoch=7,
        worker_id="w-1",
        lease_expires_at=at + timedelta(seconds=30),
        lease_ttl=timedelta(seconds=30),
        scheduled_for=at,
        command=("true",),
        timeout=timedelta(seconds=60),
    )
    log_task_started("nightly-etl", grant, "w-1")
    (line,) = captured.getvalue().splitlines()
    got = fields(line)
    assert {
        k: got[k]
        for k in ("logger", "action", "job_id", "run_id", "task", "attempt", "epoch", "worker_id")
    } == {
        "logger": "cronlog.worker",
        "action": "task_started",
        "job_id": "nightly-etl",
        "run_id": "r0123456789abcdef01234567",
        "task": "load",
        "attempt": "2",
        "epoch": "7",
        "worker_id": "w-1",
    }


def test_uvicorns_coloured_copy_of_its_message_is_not_printed() -> None:
    line = LineFormatter("api").format(record("Started", color_message="\x1b[36mStarted\x1b[0m"))
    assert "color_message" not in line
    assert fields(line)["msg"] == "Started"


def test_an_uncaught_exception_is_one_line_and_the_status_stays_1() -> None:
    code = (
        "import threading\n"
        "from services.logging_setup import configure_logging\n"
        "configure_logging('test')\n"
        "def boom():\n"
        "    raise KeyError('in a thread')\n"
        "t = threading.Thread(target=boom, name='helper')\n"
        "t.start()\n"
        "t.join()\n"
        "raise ValueError('bad setting:\\n  field required')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1
    thread_line, main_line = (fields(ln) for ln in done.stderr.splitlines())
    assert (thread_line["action"], thread_line["thread"]) == ("uncaught", "helper")
    assert thread_line["exc"].endswith("KeyError: 'in a thread'")
    assert (main_line["level"], main_line["action"], main_line["thread"]) == (
        "critical",
        "uncaught",
        "main",
    )
    assert main_line["error"] == "bad setting:\n  field required"
    assert main_line["exc"].endswith("ValueError: bad setting:\n  field required")
