"""Job after job: what an ``after`` job does when a run of its upstream job ended.

The after relay (``services/scheduler/after_relay.py``) turns the upstream's RunSucceeded /
RunFailed /
RunCancelled into an UpstreamRunEnded command for each downstream job; this module decides
it. Rules and their reasons: docs/schedules.md, "After"; tenants: docs/tenants.md.
"""

from __future__ import annotations

from datetime import datetime

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.decision import Decision
from cronlog.ids import run_id_for_after
from cronlog.job import JobState
from cronlog.model import AfterOn, ScheduleKind
from cronlog.runs import start_run
from cronlog.vocabulary import (
    JobStatus,
    QueueReason,
    RejectReason,
    RunTrigger,
    SkipReason,
    UpstreamOutcome,
)

QUALIFYING = {
    AfterOn.SUCCESS: frozenset({UpstreamOutcome.SUCCEEDED}),
    AfterOn.DONE: frozenset(UpstreamOutcome),
}
"""The upstream outcomes each ``after_on`` value starts a run for."""


def wants(state: JobState, command: cmd.UpstreamRunEnded) -> bool:
    """Return whether ``state``'s job starts a run for ``command``.

    True when the job is active, its schedule is ``after`` the command's upstream job, and
    the outcome qualifies under ``after_on``. A paused job lets upstream runs pass (as ticks
    pass while paused); a job no longer ``after`` that upstream (the relay's index lags a
    redefinition) ignores them.
    """
    sched = state.spec.schedule
    return (
        state.status is JobStatus.ACTIVE
        and sched.kind is ScheduleKind.AFTER
        and sched.after_job_id == command.upstream_job_id
        and command.outcome in QUALIFYING[sched.after_on]
    )


def foreign_upstream(state: JobState, command: cmd.UpstreamRunEnded) -> bool:
    """Return whether ``command`` is the end of a run of another tenant's upstream job.

    True when ``state``'s job is ``after`` the command's upstream job and the command names an
    upstream tenant that is not the job's own. An empty ``upstream_tenant`` (a command from a
    relay, or about a run-event, written before the field existed) is not checked, so old
    logs replay as they were folded. Rule and reasons: docs/tenants.md, "The tenant of after
    chains".

    Determinism: decided from the command (the relay copies the tenant from the upstream's
    run-ending event) and the job's record only.
    """
    sched = state.spec.schedule
    return (
        command.upstream_tenant != ""
        and command.upstream_tenant != state.spec.tenant
        and sched.kind is ScheduleKind.AFTER
        and sched.after_job_id == command.upstream_job_id
    )


def upstream_run_ended(
    d: Decision, state: JobState, command: cmd.UpstreamRunEnded, now: datetime
) -> None:
    """Start the run an upstream run's end asks for, if any.

    Refuses with ``wrong_tenant`` the end of a run of another tenant's upstream job
    (``foreign_upstream``): no run starts, whatever the job's state and ``after_on``, and the
    refusal names neither that tenant nor the run. Otherwise emits nothing when the job does
    not want it (``wants``) or when its run is already active (a re-sent command). A fact
    about another job is not a refusal, so nothing else is rejected. ``max_runs`` spent:
    TickSkipped ``max_runs``; ``max_active_runs`` reached: TickSkipped ``max_active_runs``
    (the job record must stay bounded). After runs
    are outside the overlap policy, like manual triggers: each was asked for by one upstream
    run.

    The run takes the upstream run's ``scheduled_for`` (its data interval, as Airflow's
    TriggerDagRunOperator passes the logical date on), or ``now`` when unknown; it is
    released at once (no jitter: the upstream's tick was jittered already).

    Idempotency: run_id = ``run_id_for_after(job_id, upstream_run_id, incarnation,
    upstream_event_id)``; the envelope's idem_key ``after:<job_id>:<upstream_run_id>:<event_id>``
    dedupes within the marker window. One upstream run reopened by a rerun and ended again is
    a new end: it may start another run.
    """
    if foreign_upstream(state, command):
        d.reject(
            command,
            RejectReason.WRONG_TENANT,
            f"job {d.job_id!r} is after {command.upstream_job_id!r}, which belongs to another "
            "tenant: its runs start nothing here",
        )
        return
    if not wants(state, command):
        return
    run_id = run_id_for_after(
        d.job_id, command.upstream_run_id, state.incarnation, command.upstream_event_id
    )
    if state.run(run_id) is not None or state.is_queued(run_id):
        return
    scheduled_for = command.upstream_scheduled_for or now
    remaining = state.runs_remaining()
    reason = None
    if remaining == 0:
        reason = SkipReason.MAX_RUNS
    elif (
        state.queue
        or state.active_runs() >= state.spec.max_active_runs
        or state.suspended_until is not None
    ):
        if len(state.queue) >= state.spec.max_queued_runs:
            reason = SkipReason.QUEUE_FULL
        else:  # delayed, not dropped: it starts when a slot frees (progress.release_queued)
            d.emit(
                ev.RunQueued(
                    run_id=run_id,
                    scheduled_for=scheduled_for,
                    trigger=RunTrigger.AFTER,
                    next_fire_at=state.next_fire_at,
                    runs_remaining=None if remaining is None else remaining - 1,
                    upstream_job_id=command.upstream_job_id,
                    upstream_run_id=command.upstream_run_id,
                    reason=(
                        QueueReason.SUSPENDED
                        if state.suspended_until is not None
                        else QueueReason.MAX_ACTIVE_RUNS
                    ),
                )
            )
            return
    if reason is not None:
        d.emit(
            ev.TickSkipped(
                scheduled_for=scheduled_for, reason=reason, next_fire_at=state.next_fire_at
            )
        )
        return
    d.emit_all(
        start_run(
            state,
            run_id=run_id,
            scheduled_for=scheduled_for,
            trigger=RunTrigger.AFTER,
            now=now,
            next_fire_at=state.next_fire_at,
            runs_remaining=None if remaining is None else remaining - 1,
            upstream_job_id=command.upstream_job_id,
            upstream_run_id=command.upstream_run_id,
        )
    )
