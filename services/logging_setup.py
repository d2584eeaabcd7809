"""One logging set-up for every cronlog process: a line per record, logfmt or JSON, every field.

Each entry point calls ``configure_logging(service)`` first. A line (logfmt, the default)::

    ts=2026-12-03T10:00:00.123Z level=info service=worker logger=cronlog.worker
    action=task_started job_id=nightly run_id=r-1 task=load attempt=1 epoch=3 worker_id=w-1
    msg="task started"

(one line, wrapped here). ``CRONLOG_LOG_FORMAT=json`` writes the same fields as one JSON
object per line; ``CRONLOG_LOG_LEVEL`` (``debug``, ``info`` (default), ``warning``, ``error``,
``critical``) sets the level. docs/operations.md, "Logs".

The convention, for every log call of cronlog:

- ``action`` is a field, never text in the message: ``log.info("task started",
  extra={"action": "task_started", "run_id": ..., "task": ...})``. The message is for people;
  the action code and the fields are for grep and machines (``action=task_started`` still
  reads the same in a logfmt line). Fields are named as STYLE.md says: ``job_id``,
  ``run_id``, ``task``, ``attempt``, ``epoch``, ``worker_id`` where they apply.
- Values go in raw (an exception, a number, a list, a dict): they are rendered only when a
  line is written, so a call below the level costs no formatting. A dict becomes dotted keys
  (``settings.bootstrap=…``), a list compact JSON (``partitions=[0,1,2]``).
- A field named like a ``LogRecord`` attribute (``thread``, ``name``, ``module``, …), which
  ``logging`` refuses in ``extra``, is passed with a trailing underscore (``thread_``) and
  printed without it. A field named like one of the line's own keys (``ts``, ``level``,
  ``service``, ``logger``, ``msg``, ``exc``, ``stack``) is printed with a trailing underscore.

logfmt values are quoted when empty or holding a space, ``=``, ``"``, ``\\`` or a character
that is not printable (newline, tab, any control); quoted text takes JSON's string escapes,
which is what the format's reference decoder (go-logfmt) reads. A traceback is one escaped
``exc`` field: no line ever holds a raw line break, in either format.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
import threading
from collections.abc import Mapping
from datetime import UTC, date, datetime
from types import TracebackType
from typing import IO, TYPE_CHECKING, cast

if TYPE_CHECKING:  # the CLI sets logging up before it needs any settings class
    from topology.kafka.config import KafkaSettings

FORMATS = ("logfmt", "json")
"""The values of ``CRONLOG_LOG_FORMAT``."""
LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}
"""The values of ``CRONLOG_LOG_LEVEL``."""
RECORD_ATTRS = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {
    "message",
    "asctime",
    "taskName",  # Python 3.12+
}
"""What a ``LogRecord`` holds by itself: everything else on a record is a field."""
NOT_FIELDS = RECORD_ATTRS | {"color_message"}
"""What is never printed: the record's own attributes, and uvicorn's copy of its message with
terminal colour codes in it."""
OWN_KEYS = ("ts", "level", "service", "logger", "action", "msg", "exc", "stack")
"""The line's own keys, in order (``action`` comes from the fields, first of them)."""
_PLAIN_FORBIDDEN = frozenset(' ="\\')


def configure_logging(
    service: str,
    *,
    stream: IO[str] | None = None,
    level: str | None = None,
    fmt: str | None = None,
    default_level: str = "info",
    uncaught: bool = True,
) -> logging.Handler:
    """Send every logger of this process to one handler that writes cronlog's lines.

    Replaces the root logger's handlers (``logging.basicConfig(force=True)``) and, with
    ``uncaught``, the hooks that print an uncaught exception's traceback raw
    (``sys.excepthook``, ``threading.excepthook``): it is logged as one line,
    ``action=uncaught``.

    Args:
        service: the process's name (``scheduler``, ``worker``, ``api``, …), the ``service``
            key of every line.
        stream: where lines go; default: whatever ``sys.stderr`` is when a line is written
            (a progress bar that redirects it, or a test runner that swaps it, gets them).
        level: a ``LEVELS`` name; default ``CRONLOG_LOG_LEVEL``, else ``default_level``.
        fmt: ``logfmt`` or ``json``; default ``CRONLOG_LOG_FORMAT``, else ``logfmt``.
        default_level: the level when neither ``level`` nor ``CRONLOG_LOG_LEVEL`` is given
            (the CLI's is ``warning``: its own output is for people).
        uncaught: route uncaught exceptions through the handler (services); the CLI keeps
            its own hook, which shows a bug's traceback to the person at the terminal.

    Returns:
        The installed handler. An unknown level or format falls back to the default and
        says so in a warning line (a log setting never stops a service).
    """
    fmt_name = (fmt or os.environ.get("CRONLOG_LOG_FORMAT") or "logfmt").strip().lower()
    level_name = (level or os.environ.get("CRONLOG_LOG_LEVEL") or default_level).strip().lower()
    problems = []
    if fmt_name not in FORMATS:
        problems.append(("CRONLOG_LOG_FORMAT", fmt_name, "logfmt"))
        fmt_name = "logfmt"
    if level_name not in LEVELS:
        problems.append(("CRONLOG_LOG_LEVEL", level_name, default_level))
        level_name = default_level
    handler = logging.StreamHandler(stream) if stream is not None else _StderrHandler()
    handler.setFormatter(LineFormatter(service, json_lines=fmt_name == "json"))
    logging.basicConfig(handlers=[handler], level=LEVELS[level_name], force=True)
    if uncaught:
        sys.excepthook = _uncaught
        threading.excepthook = _uncaught_in_thread
    for variable, given, used in problems:
        logging.getLogger("cronlog.logging").warning(
            "unknown value; the default is used",
            extra={
                "action": "log_setting_unknown",
                "variable": variable,
                "value": given,
                "used": used,
            },
        )
    return handler


def log_settings(logger: logging.Logger, settings: KafkaSettings, action: str = "start") -> None:
    """Log the process's settings once, secrets redacted (``KafkaSettings.redacted``).

    Args:
        logger: the service's logger.
        settings: its settings; each one is printed as ``settings.<name>=<value>``.
        action: the line's action code.
    """
    logger.info(
        "starting (settings, secrets redacted)",
        extra={"action": action, "settings": settings.redacted()},
    )


def _uncaught(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    """What Python prints raw for an exception nothing caught, as one line (exit status 1 as
    before); Ctrl-C keeps its usual short report."""
    if issubclass(kind, KeyboardInterrupt):
        sys.__excepthook__(kind, exc, tb)
        return
    logging.getLogger("cronlog").critical(
        "uncaught exception: the process ends",
        exc_info=(kind, exc, tb),
        extra={"action": "uncaught", "thread_": "main", "error": exc},
    )


def _uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
    """The same for a thread's exception (the thread ends; threads started with
    ``topology.kafka.retrying.start_thread`` end the process instead)."""
    if args.exc_value is None or issubclass(args.exc_type, SystemExit):
        return
    logging.getLogger("cronlog").critical(
        "uncaught exception: the thread ends",
        exc_info=(args.exc_type, args.exc_value, args.exc_traceback),
        extra={
            "action": "uncaught",
            "thread_": args.thread.name if args.thread else "?",
            "error": args.exc_value,
        },
    )


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A stream handler on the ``sys.stderr`` of the moment, not the one at set-up."""

    @property
    def stream(self) -> IO[str]:
        return sys.stderr

    @stream.setter
    def stream(self, _value: object) -> None:
        pass  # StreamHandler.__init__ sets it; the property is the truth


class LineFormatter(logging.Formatter):
    """Format a record as one logfmt line (or one JSON object): own keys, then its fields.

    Args:
        service: the ``service`` key of every line.
        json_lines: JSON objects instead of logfmt.
    """

    def __init__(self, service: str, *, json_lines: bool = False) -> None:
        super().__init__()
        self.service = service
        self.json_lines = json_lines

    def format(self, record: logging.LogRecord) -> str:
        """Return ``record`` as one line (no line break in it)."""
        fields = self.fields(record)
        if self.json_lines:
            return _escape_unprintable(json.dumps(fields, ensure_ascii=False, default=str))
        return logfmt(fields)

    def fields(self, record: logging.LogRecord) -> dict[str, object]:
        """Return the line's keys and values in order: own keys, ``action``, fields, ``msg``."""
        ts = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
        line: dict[str, object] = {
            "ts": ts.replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "service": self.service,
            "logger": record.name,
        }
        extra = {
            _field_name(key): value
            for key, value in record.__dict__.items()
            if key not in NOT_FIELDS
        }
        if "action" in extra:
            line["action"] = extra.pop("action")
        for key, value in extra.items():
            line[f"{key}_" if key in OWN_KEYS else key] = value
        line["msg"] = record.getMessage()
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info).rstrip("\n")
        elif record.exc_text:
            line["exc"] = record.exc_text.rstrip("\n")
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info).rstrip("\n")
        return line


def logfmt(fields: Mapping[str, object]) -> str:
    """Return ``fields`` as one logfmt line, ``key=value`` pairs joined by spaces.

    A nested dict becomes dotted keys (an empty one is ``{}``); each value is rendered by
    ``logfmt_value``; a key keeps only characters that need no quoting (others become ``_``).
    """
    parts: list[str] = []
    _flat(fields, "", parts)
    return " ".join(parts)


def logfmt_value(value: object) -> str:
    """Return one logfmt value: bare when it needs no quoting, else a JSON-escaped string.

    ``None`` is ``null``, booleans ``true``/``false``, numbers as ``str``, instants ISO-8601,
    lists, tuples and sets compact JSON, anything else its ``str``.
    """
    kind = type(value)
    if kind is int or kind is float:  # most fields: no quoting to consider
        return str(value)
    if kind is str:
        text = cast(str, value)
    elif value is None:
        text = "null"
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, datetime | date):
        text = value.isoformat()
    elif isinstance(value, list | tuple | set | frozenset):
        items = sorted(value, key=str) if isinstance(value, set | frozenset) else list(value)
        text = json.dumps(items, separators=(",", ":"), ensure_ascii=False, default=str)
    else:
        text = str(value)
    if text and text.isprintable() and _PLAIN_FORBIDDEN.isdisjoint(text):
        return text
    return _escape_unprintable(json.dumps(text, ensure_ascii=False))


def _escape_unprintable(text: str) -> str:
    """``text`` (JSON) with every character ``json.dumps`` leaves raw but that is not
    printable (DEL, U+0085, U+2028, …: line breaks to some readers) escaped as ``\\uXXXX``."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else json.dumps(c)[1:-1] for c in text)


def _flat(fields: Mapping[str, object], prefix: str, out: list[str]) -> None:
    for key, value in fields.items():
        name = prefix + _logfmt_key(str(key))
        if isinstance(value, dict):
            if value:
                _flat(value, name + ".", out)
            else:
                out.append(name + "={}")
        else:
            out.append(f"{name}={logfmt_value(value)}")


@functools.lru_cache(maxsize=4096)
def _logfmt_key(key: str) -> str:
    # cached: a process logs the same few hundred keys over and over
    cleaned = "".join(c if c.isprintable() and c not in _PLAIN_FORBIDDEN else "_" for c in key)
    return cleaned or "_"


def _field_name(key: str) -> str:
    """A field passed as ``thread_`` (``thread`` is a LogRecord attribute) is ``thread``."""
    if key.endswith("_") and key[:-1] in RECORD_ATTRS:
        return key[:-1]
    return key
