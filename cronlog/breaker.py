"""Circuit breaking of a job: stop starting runs of a job whose attempts fail everywhere.

A job with ``breaker_failures = N > 0`` counts its failed attempts (``JobState.failures``,
from TaskFailed; a TaskSucceeded clears them). When N attempts failed within
``breaker_window`` with no success between, the circuit **opens**: ``JobSuspended``. While
open, ticks (and after-runs) queue (``RunQueued`` reason ``suspended``, up to
``max_queued_runs``; past it ``queue_full`` as always): overload and failure delay, never
drop. Manual triggers still start (an operator's own probe). The circuit closes when:

- an operator resumes the job (``ResumeJob``: ``cronlog jobs resume``): ``JobUnsuspended``
  reason ``operator``, and queued runs start as slots allow; or the definition turns the
  breaker off (``breaker_failures`` 0): reason ``breaker_off``; or
- it **half-opens** after ``breaker_cooldown``: the oldest queued run starts as the one
  probe (``JobProbing``); with none queued, the first run that starts after it (a tick's, a
  manual one) is the probe. Its success closes the circuit (``probe_succeeded``); its failure
  or cancellation opens it again for another cool-down (``JobSuspended`` ``probe_failed``).

The states are Hystrix's and resilience4j's (closed, open, half-open with a bounded number of
trial calls, here one run). Counting attempts rather than runs makes a job whose retries
all fail trip as fast as one without retries: it is the fleet's attempts that are burned.
Every transition is decided in the fold from the log alone (failure instants are the
TaskFailed's ``finished_at``, the cool-down runs on the fold's now), so a replay agrees.
"""

from __future__ import annotations

from datetime import datetime

from cronlog import events as ev
from cronlog.decision import Decision
from cronlog.progress import release_waiting
from cronlog.vocabulary import JobStatus, SuspendReason, UnsuspendReason

MAX_BREAKER_FAILURES = 100
"""The largest ``breaker_failures`` (the record keeps that many failure instants)."""


def check_breaker(d: Decision, now: datetime) -> None:
    """Decide the circuit's transition after the events of one command, if any.

    Args:
        d: the decision, its events already emitted.
        now: the fold's now, aware UTC.

    Emits:
        JobUnsuspended (``probe_succeeded``) and what ``release_waiting`` starts, when the
        probe run succeeded; JobSuspended (``probe_failed``) when it failed or was cancelled;
        JobSuspended (``circuit_open``) when the failures within the window reached the
        threshold. Nothing otherwise.
    """
    state = d.state
    if state is None or state.status is JobStatus.DELETED:
        return
    spec = state.spec
    if state.suspended_until is not None and spec.breaker_failures <= 0:
        # the definition turned the breaker off: an open circuit has nothing to guard
        d.emit(ev.JobUnsuspended(reason=UnsuspendReason.BREAKER_OFF))
        release_waiting(d, now)
        return
    if state.probe_run is None and state.suspended_until is not None:
        if now >= state.suspended_until:  # half-open, nothing was queued: the first run
            started = next(
                (
                    e
                    for e in d.events
                    if isinstance(e, ev.RunScheduled) and state.run(e.run_id) is not None
                ),
                None,
            )  # a run started and already replaced (cancel_previous) is no probe
            if started is not None:
                d.emit(ev.JobProbing(run_id=started.run_id))
        return
    if state.probe_run is not None:
        end = _run_end(d.events, state.probe_run)
        if (
            isinstance(end, ev.RunCancelled)
            and end.replaced_by is not None
            and state.run(end.replaced_by) is not None
        ):  # replaced by a newer run (overlap cancel_previous): that run is the probe now
            d.emit(ev.JobProbing(run_id=end.replaced_by))
            return
        if isinstance(end, ev.RunSucceeded):
            d.emit(ev.JobUnsuspended(reason=UnsuspendReason.PROBE_SUCCEEDED))
            release_waiting(d, now)
        elif end is not None:
            d.emit(
                ev.JobSuspended(
                    reason=SuspendReason.PROBE_FAILED,
                    failed_attempts=0,
                    window=spec.breaker_window,
                    resume_at=now + spec.breaker_cooldown,
                )
            )
        return
    if state.suspended_until is not None or spec.breaker_failures <= 0:
        return
    recent = sum(t > now - spec.breaker_window for t in state.failures)
    if recent >= spec.breaker_failures:
        d.emit(
            ev.JobSuspended(
                reason=SuspendReason.CIRCUIT_OPEN,
                failed_attempts=recent,
                window=spec.breaker_window,
                resume_at=now + spec.breaker_cooldown,
            )
        )


def _run_end(events: list[ev.Event], run_id: str) -> ev.Event | None:
    for e in events:
        if isinstance(e, (ev.RunSucceeded, ev.RunFailed, ev.RunCancelled)) and e.run_id == run_id:
            return e
    return None
