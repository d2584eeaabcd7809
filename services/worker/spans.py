"""OpenTelemetry spans of a worker: a grant taken (``claim``), its execution (``task.execute``)
and each renewal of its lease (``lease.renew``).

One trace per attempt: ``claim`` → ``task.execute`` (in the attempt's thread) → ``lease.renew``
(in the renewer's). Off unless ``services/tracing.py`` installed an SDK provider: the worker
then holds no tracer and opens no span (nothing is paid per attempt or renewal).
Attributes as the fold's (``topology/fold/spans.py``): docs/architecture.md, "Traces". Every
span is ``guarded``: a tracing SDK that raises loses spans, never an attempt or its completion.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, Status, StatusCode, Tracer

from cronlog import events as ev
from services.worker.execute import Outcome
from topology.fold.spans import guarded, lease_attributes, safely, sdk_tracer

SCOPE = "cronlog.worker"
"""The worker's instrumentation scope."""


def worker_tracer(tracer: Tracer | None = None) -> Tracer | None:
    """Return ``tracer``, else the installed SDK provider's tracer; None while tracing is off
    (the helpers below then open no span at all: nothing is paid per attempt)."""
    return sdk_tracer(SCOPE, tracer)


def claim(
    tracer: Tracer | None, job_id: str, grant: ev.TaskClaimed
) -> AbstractContextManager[Span | None]:
    """Open the current ``claim`` span of a grant this worker starts (its lease fields)."""
    if tracer is None:
        return nullcontext()
    attrs = lease_attributes(job_id, grant)
    return guarded("claim", lambda: tracer.start_as_current_span("claim", attributes=attrs))


def executing(
    tracer: Tracer | None, job_id: str, grant: ev.TaskClaimed, parent: Context | None
) -> AbstractContextManager[Span | None]:
    """Open the current ``task.execute`` span of an attempt.

    Args:
        tracer: the worker's tracer.
        job_id: the attempt's job.
        grant: the lease it runs under (run_id, task, attempt, epoch, worker_id).
        parent: the context its ``claim`` span was current in (another thread's), or None.
    """
    if tracer is None:
        return nullcontext()
    attrs = lease_attributes(job_id, grant)
    attrs["timeout_s"] = grant.timeout.total_seconds()
    return guarded(
        "task.execute",
        lambda: tracer.start_as_current_span("task.execute", context=parent, attributes=attrs),
    )


def ended(span: Span | None, outcome: Outcome, revoked: bool) -> None:
    """Record how an attempt ended on its ``task.execute`` span (None: nothing to record).

    ``exit_code`` when the process exited; on failure ``failure_kind`` and status ERROR (its
    description the failure kind); ``revoked`` when its lease was lost or given back. A
    failure of the tracing SDK is logged once and ignored.
    """
    if span is not None:
        safely("task.execute", lambda: _ended(span, outcome, revoked))


def _ended(span: Span, outcome: Outcome, revoked: bool) -> None:
    if outcome.exit_code is not None:
        span.set_attribute("exit_code", outcome.exit_code)
    if revoked:
        span.set_attribute("revoked", True)
    if outcome.failure_kind is not None:
        span.set_attribute("failure_kind", outcome.failure_kind.value)
        span.set_status(Status(StatusCode.ERROR, outcome.failure_kind.value))


def renewing(
    tracer: Tracer | None,
    job_id: str,
    grant: ev.TaskClaimed,
    renewal: int,
    attempt_span: Span | None,
) -> AbstractContextManager[Span | None]:
    """Open a ``lease.renew`` span, a child of the attempt's ``task.execute`` span if given.

    ``renewal``: its number for this lease (1, 2, …). The span covers queueing the
    RenewLease; the fold's answer comes later, on the replies (a refusal kills the attempt).
    """
    if tracer is None:
        return nullcontext()
    attrs = lease_attributes(job_id, grant)
    attrs["renewal"] = renewal
    parent = trace.set_span_in_context(attempt_span) if attempt_span is not None else None
    return guarded(
        "lease.renew",
        lambda: tracer.start_as_current_span("lease.renew", context=parent, attributes=attrs),
    )
