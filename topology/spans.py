"""OpenTelemetry spans of the fold adapter: a batch, each decision, each lease granted.

The pure core makes no spans; the adapter wraps its calls into it. Tracing is off unless
``services/tracing.py`` installed an SDK provider: the fold then holds no tracer and its hot
path pays one ``is None`` test per decision. Attribute names are the plain ``job_id``,
``run_id``, ``task``, ``attempt``, ``epoch``, ``worker_id`` of the structured logs (STYLE.md),
so a span and a log line join on the same keys (docs/architecture.md, "Traces").
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator

from opentelemetry import trace
from opentelemetry.trace import Tracer
from opentelemetry.util.types import AttributeValue

from cronlog import commands as cmd
from cronlog import events as ev

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


def traced_decision(
    tracer: Tracer, env: cmd.Envelope, decide: Callable[[], list[ev.Event]]
) -> list[ev.Event]:
    """Run ``decide`` (one command for one job) in a ``fold.command`` span; return its events.

    The span has ``command`` (its type), ``job_id``, the command's lease fields, ``run_id``
    from the first event that names a run when the command does not, and ``events`` (how many);
    each ``TaskClaimed`` decided gets a child ``claim`` span with the lease granted.
    """
    attrs = lease_attributes(env.job_id, env.command)
    attrs["command"] = type(env.command).__name__
    with tracer.start_as_current_span("fold.command", attributes=attrs) as span:
        events = decide()
        span.set_attribute("events", len(events))
        for event in events:
            if "run_id" not in attrs and isinstance(run_id := getattr(event, "run_id", None), str):
                attrs["run_id"] = run_id
                span.set_attribute("run_id", run_id)
            if isinstance(event, ev.TaskClaimed):
                tracer.start_span("claim", attributes=lease_attributes(env.job_id, event)).end()
            elif isinstance(event, ev.CommandRejected):
                span.set_attribute("rejected", event.reason.value)
        return events


@contextlib.contextmanager
def batch_span(tracer: Tracer | None) -> Iterator[None]:
    """Open a current ``fold.batch`` span around one batch; nothing when ``tracer`` is None.

    Current: the batch's ``fold.command`` spans are its children and ``batch_attributes``
    finds it.
    """
    if tracer is None:
        yield
        return
    with tracer.start_as_current_span("fold.batch"):
        yield


def batch_attributes(records: int, partitions: Iterable[int], decisions: int) -> None:
    """Set ``records``, ``partitions`` (sorted) and ``decisions`` on the current span.

    Nothing when no span is recording (tracing off).
    """
    span = trace.get_current_span()
    if span.is_recording():
        span.set_attributes(
            {"records": records, "partitions": sorted(partitions), "decisions": decisions}
        )
