"""OpenTelemetry spans of the fold adapter: a batch, each decision, each lease granted.

The pure core makes no spans; the adapter wraps its calls into it. Tracing is off unless
``services/tracing.py`` installed an SDK provider: the fold then holds no tracer and its hot
path pays one ``is None`` test per decision. Attribute names are the plain ``job_id``,
``run_id``, ``task``, ``attempt``, ``epoch``, ``worker_id`` of the structured logs (STYLE.md),
so a span and a log line join on the same keys (docs/architecture.md, "Traces").

Spans never change what is decided: every call into the tracing SDK goes through ``safely`` or
``guarded``, which log a failure once per kind and carry on, and a decision runs exactly once
whatever its span does (an exporter or processor that raises loses spans, never a command).
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from typing import TypeVar

from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode, Tracer
from opentelemetry.util.types import AttributeValue

from cronlog import commands as cmd
from cronlog import events as ev

log = logging.getLogger("cronlog.tracing")
T = TypeVar("T")
Attributes = dict[str, AttributeValue]
LEASE_FIELDS = ("run_id", "task", "attempt", "epoch", "worker_id")
"""The fields of a command or event that name a task instance's lease, as span attributes."""


def sdk_tracer(name: str, tracer: Tracer | None = None) -> Tracer | None:
    """Return ``tracer``, else the global provider's tracer ``name`` when one was installed.

    Args:
        name: the instrumentation scope (``cronlog.fold``).
        tracer: an explicit tracer (tests); wins.

    Returns:
        None while the global provider is the API's default (nothing installed): the caller
        then makes no spans at all.
    """
    if tracer is not None:
        return tracer
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None
    return provider.get_tracer(name)


def lease_attributes(job_id: str, item: object) -> Attributes:
    """Return ``job_id`` and the ``LEASE_FIELDS`` that ``item`` (a command or event) sets."""
    attrs: Attributes = {"job_id": job_id}
    for name in LEASE_FIELDS:
        value = getattr(item, name, None)
        if isinstance(value, str | int):
            attrs[name] = value
    return attrs


@functools.cache
def _warn_once(what: str) -> None:
    """Log the first failure of ``what`` (with its traceback); later ones are silent."""
    log.warning(
        "spans are dropped, work goes on",
        exc_info=True,
        extra={"action": "tracing_failed", "what": what},
    )


def safely(what: str, fn: Callable[[], T]) -> T | None:
    """Return ``fn()``; None if it raised (an Exception), logged once per ``what``."""
    try:
        return fn()
    except Exception:
        _warn_once(what)
        return None


@contextlib.contextmanager
def guarded(what: str, opened: Callable[[], AbstractContextManager[Span]]) -> Iterator[Span | None]:
    """Enter the span context ``opened()`` returns; yield its span, or None if opening failed.

    The body runs exactly once whatever the tracing SDK does; its exceptions reach the caller
    unchanged (recorded on the span by the SDK when it can); a failure to open or close the
    span is logged once per ``what`` and otherwise ignored.
    """
    cm = safely(what, opened)
    span = safely(what, cm.__enter__) if cm is not None else None
    if cm is None or span is None:
        yield None
        return
    try:
        yield span
    except BaseException as exc:
        safely(what, functools.partial(cm.__exit__, type(exc), exc, exc.__traceback__))
        raise
    safely(what, lambda: cm.__exit__(None, None, None))


def traced_decision(
    tracer: Tracer, env: cmd.Addressed, decide: Callable[[], list[ev.Event]]
) -> list[ev.Event]:
    """Run ``decide`` (one command for one job) once, in a ``fold.command`` span.

    The span has ``command`` (``command_kind``: its type; a PollJob's is PollTasks),
    ``job_id``, the command's lease fields, ``run_id`` from the first event that names a run
    when the command does not, and ``events`` (how many); each ``TaskClaimed`` decided gets a
    child ``claim`` span with the lease granted. A span that fails to open, annotate or end is
    dropped (``safely``); the events returned are the ones ``decide`` returned.
    """
    attrs = lease_attributes(env.job_id, env.command)
    attrs["command"] = cmd.command_kind(env.command).value
    span = safely("fold.command", lambda: tracer.start_span("fold.command", attributes=attrs))
    if span is None:
        return decide()
    try:
        events = decide()
    except BaseException as exc:
        safely("fold.command", functools.partial(_failed, span, exc))
        raise
    safely("fold.command", lambda: _annotate(tracer, span, env.job_id, attrs, events))
    return events


def _failed(span: Span, exc: BaseException) -> None:
    span.record_exception(exc)
    span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
    span.end()


def _annotate(
    tracer: Tracer, span: Span, job_id: str, attrs: Attributes, events: list[ev.Event]
) -> None:
    try:
        span.set_attribute("events", len(events))
        parent = trace.set_span_in_context(span)
        for event in events:
            if "run_id" not in attrs and isinstance(run_id := getattr(event, "run_id", None), str):
                attrs["run_id"] = run_id
                span.set_attribute("run_id", run_id)
            if isinstance(event, ev.TaskClaimed):
                claim = lease_attributes(job_id, event)
                tracer.start_span("claim", context=parent, attributes=claim).end()
            elif isinstance(event, ev.CommandRejected):
                span.set_attribute("rejected", event.reason.value)
    finally:
        span.end()


@contextlib.contextmanager
def batch_span(tracer: Tracer | None) -> Iterator[None]:
    """Open a current ``fold.batch`` span around one batch; nothing when ``tracer`` is None.

    Current: the batch's ``fold.command`` spans are its children and ``batch_attributes``
    finds it. Guarded (``guarded``): the batch runs once whatever the span does.
    """
    if tracer is None:
        yield
        return
    with guarded("fold.batch", lambda: tracer.start_as_current_span("fold.batch")):
        yield


def batch_attributes(records: int, partitions: Iterable[int], decisions: int) -> None:
    """Set ``records``, ``partitions`` (sorted) and ``decisions`` on the current span.

    Nothing when no span is recording (tracing off); a failure is logged once and ignored.
    """
    span = trace.get_current_span()
    if span.is_recording():
        attrs: Attributes = {
            "records": records,
            "partitions": sorted(partitions),
            "decisions": decisions,
        }
        safely("fold.batch", lambda: span.set_attributes(attrs))
