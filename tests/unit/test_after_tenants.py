"""The tenant of ``after`` chains: another tenant's upstream runs start nothing.

The fold stamps a run's end with the job's tenant, the after relay's index copies it into
UpstreamRunEnded.upstream_tenant, and ``cronlog.after`` refuses a foreign one
(docs/tenants.md, "The tenant of after chains").
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.after import QUALIFYING
from cronlog.after_index import AfterIndex
from cronlog.decide import handle
from cronlog.evolve import evolve
from cronlog.job import JobState
from cronlog.model import AfterOn, JobSpec, Schedule, ScheduleKind, main_task
from cronlog.tenants import DEFAULT_TENANT
from cronlog.vocabulary import (
    CommandKind,
    JobStatus,
    RejectReason,
    RunTrigger,
    UpstreamOutcome,
)
from tests.builders import completed

UP, DOWN = "extract", "load"
T0 = datetime(2024, 6, 10, 12, 0, tzinfo=UTC)
UP_TICK = T0 - timedelta(minutes=5)
NOW = T0 + timedelta(seconds=30)


def after_spec(
    tenant: str = DEFAULT_TENANT, upstream: str = UP, on: AfterOn = AfterOn.SUCCESS
) -> JobSpec:
    sched = Schedule(ScheduleKind.AFTER, after_job_id=upstream, after_on=on)
    return JobSpec("load after extract", sched, main_task(("true",)), tenant=tenant)


def downstream(spec: JobSpec, *, paused: bool = False) -> JobState:
    state = evolve(None, DOWN, ev.JobRegistered(spec=spec, next_fire_at=None))
    if paused:
        state = evolve(state, DOWN, ev.JobPaused())
    assert state is not None
    return replace(state, clock=T0)


def ended(
    upstream_tenant: str,
    outcome: UpstreamOutcome = UpstreamOutcome.SUCCEEDED,
    upstream: str = UP,
) -> cmd.UpstreamRunEnded:
    return cmd.UpstreamRunEnded(
        upstream_job_id=upstream,
        upstream_run_id="rup1",
        upstream_scheduled_for=UP_TICK,
        outcome=outcome,
        upstream_event_id="e1",
        upstream_tenant=upstream_tenant,
    )


def when(state: JobState, command: cmd.UpstreamRunEnded) -> tuple[JobState, list[ev.Event]]:
    # the relay's envelope: no tenant of its own (a platform command)
    envelope = cmd.Envelope(idem_key=f"after:{DOWN}:rup1:e1", job_id=DOWN, command=command)
    after, events = handle(state, envelope, NOW)
    assert after is not None
    return after, events


def refusal(events: list[ev.Event]) -> ev.CommandRejected:
    assert len(events) == 1 and isinstance(events[0], ev.CommandRejected), events
    return events[0]


@pytest.mark.parametrize(
    ("down_tenant", "up_tenant"),
    [("team-b", "team-a"), (DEFAULT_TENANT, "team-a"), ("team-b", DEFAULT_TENANT)],
)
def test_a_downstream_of_another_tenant_is_not_triggered_and_the_refusal_is_wrong_tenant(
    down_tenant: str, up_tenant: str
) -> None:
    state, events = when(downstream(after_spec(down_tenant)), ended(up_tenant))
    r = refusal(events)
    assert (r.command, r.reason) == (CommandKind.UPSTREAM_RUN_ENDED, RejectReason.WRONG_TENANT)
    assert state.runs == () and state.queue == ()


def test_the_refusal_names_neither_the_other_tenant_nor_its_run() -> None:
    _, events = when(downstream(after_spec("team-b")), ended("team-a"))
    r = refusal(events)
    assert "team-a" not in r.detail and "rup1" not in r.detail and "e1" not in r.detail
    assert r.run_id is None and r.task is None and r.worker_id is None
    assert r.detail == (
        "job 'load' is after 'extract', which belongs to another tenant: "
        "its runs start nothing here"
    )


@pytest.mark.parametrize("tenant", ["team-a", DEFAULT_TENANT])
def test_a_downstream_of_the_same_tenant_is_triggered(tenant: str) -> None:
    state, events = when(downstream(after_spec(tenant)), ended(tenant))
    assert isinstance(events[0], ev.RunScheduled) and events[0].trigger is RunTrigger.AFTER
    assert len(state.runs) == 1


@pytest.mark.parametrize("tenant", ["team-a", DEFAULT_TENANT])
def test_an_unknown_upstream_tenant_is_not_checked_so_old_logs_replay_unchanged(
    tenant: str,
) -> None:
    _, events = when(downstream(after_spec(tenant)), ended(""))
    assert isinstance(events[0], ev.RunScheduled)


def test_a_paused_downstream_and_a_non_qualifying_outcome_still_show_the_refusal() -> None:
    _, paused = when(downstream(after_spec("team-b"), paused=True), ended("team-a"))
    assert refusal(paused).reason is RejectReason.WRONG_TENANT
    failed = ended("team-a", UpstreamOutcome.FAILED)
    _, events = when(downstream(after_spec("team-b", on=AfterOn.SUCCESS)), failed)
    assert refusal(events).reason is RejectReason.WRONG_TENANT


def test_a_foreign_end_of_a_job_the_downstream_is_not_after_is_ignored_silently() -> None:
    _, events = when(downstream(after_spec("team-b")), ended("team-a", upstream="other"))
    assert events == []


@settings(max_examples=200, deadline=None)
@given(
    down_tenant=st.sampled_from([DEFAULT_TENANT, "team-a", "team-b"]),
    up_tenant=st.sampled_from(["", DEFAULT_TENANT, "team-a", "team-b"]),
    outcome=st.sampled_from(list(UpstreamOutcome)),
    on=st.sampled_from(list(AfterOn)),
    paused=st.booleans(),
)
def test_a_run_starts_only_for_a_qualifying_end_of_the_same_or_an_unknown_tenant(
    down_tenant: str, up_tenant: str, outcome: UpstreamOutcome, on: AfterOn, paused: bool
) -> None:
    state = downstream(after_spec(down_tenant, on=on), paused=paused)
    after, events = when(state, ended(up_tenant, outcome))
    foreign = up_tenant not in ("", down_tenant)
    starts = not foreign and not paused and outcome in QUALIFYING[on]
    assert (len(after.runs) == 1) is starts
    assert any(isinstance(e, ev.RunScheduled) for e in events) is starts
    assert any(isinstance(e, ev.CommandRejected) for e in events) is foreign
    assert after.status is (JobStatus.PAUSED if paused else JobStatus.ACTIVE)


# --- the whole chain: the fold stamps the end, the relay's index carries it ---------------


def _send(
    state: JobState | None, command: cmd.Command, key: str, tenant: str
) -> tuple[JobState | None, list[ev.Event]]:
    return handle(state, cmd.Envelope(idem_key=key, job_id=UP, command=command, tenant=tenant), T0)


def upstream_run_end(tenant: str) -> list[ev.Event]:
    """Register, trigger, claim and complete one run of ``UP`` owned by ``tenant``."""
    spec = JobSpec("extract", Schedule(ScheduleKind.MANUAL), main_task(("true",)), tenant=tenant)
    state, _ = _send(None, cmd.RegisterJob(spec=spec), "k1", tenant)
    state, events = _send(state, cmd.TriggerJob(), "k2", tenant)
    run = events[0].run_id  # type: ignore[attr-defined]
    if tenant != DEFAULT_TENANT:  # the tenant ledger gives the run's task a slot
        state, _ = _send(state, cmd.GrantSlots(tenant=tenant, count=1), "k3", DEFAULT_TENANT)
    state, _ = _send(
        state, cmd.ClaimTask(run_id=run, task="main", attempt=1, worker_id="w"), "k4", tenant
    )
    done = completed(run, worker="w", at=T0)
    _, events = _send(state, done, "k5", tenant)
    return events


@pytest.mark.parametrize("tenant", ["team-a", DEFAULT_TENANT])
def test_the_fold_stamps_a_runs_end_with_its_jobs_tenant(tenant: str) -> None:
    ends = [e for e in upstream_run_end(tenant) if isinstance(e, ev.RunSucceeded)]
    assert len(ends) == 1 and ends[0].tenant == tenant


def test_cancelled_runs_carry_their_jobs_tenant() -> None:
    spec = JobSpec("extract", Schedule(ScheduleKind.MANUAL), main_task(("true",)), tenant="team-a")
    state, _ = _send(None, cmd.RegisterJob(spec=spec), "k1", "team-a")
    state, events = _send(state, cmd.TriggerJob(), "k2", "team-a")
    run = events[0].run_id  # type: ignore[attr-defined]
    _, events = _send(state, cmd.CancelRun(run_id=run), "k3", "team-a")
    cancelled = [e for e in events if isinstance(e, ev.RunCancelled)]
    assert len(cancelled) == 1 and cancelled[0].tenant == "team-a"


def test_a_team_a_run_end_triggers_team_as_follower_and_not_team_bs() -> None:
    index = AfterIndex()
    followers = {"a-follower": after_spec("team-a"), "b-follower": after_spec("team-b")}
    states: dict[str, JobState | None] = {}
    for job, spec in followers.items():
        registered = ev.JobRegistered(spec=spec, next_fire_at=None)
        index.apply(
            ev.RunEvent(event_id=job, job_id=job, at=T0, idem_key=job, index=0, event=registered)
        )
        states[job] = replace(evolve(None, job, registered), clock=T0)
    end = next(e for e in upstream_run_end("team-a") if isinstance(e, ev.RunSucceeded))
    record = ev.RunEvent(event_id="e-end", job_id=UP, at=T0, idem_key="k5", index=1, event=end)
    outcomes: dict[str, list[type]] = {}
    for envelope in index.apply(record):
        assert isinstance(envelope.command, cmd.UpstreamRunEnded)
        assert envelope.command.upstream_tenant == "team-a"
        _, events = handle(states[envelope.job_id], envelope, NOW)
        outcomes[envelope.job_id] = [type(e) for e in events]
    assert outcomes["a-follower"][0] is ev.RunScheduled
    assert outcomes["b-follower"] == [ev.CommandRejected]


def test_the_index_sends_no_tenant_for_an_end_written_before_the_field() -> None:
    index = AfterIndex()
    registered = ev.JobRegistered(spec=after_spec("team-b"), next_fire_at=None)
    index.apply(
        ev.RunEvent(event_id="r", job_id=DOWN, at=T0, idem_key="r", index=0, event=registered)
    )
    old = ev.RunFailed(run_id="rup1", scheduled_for=UP_TICK)
    (envelope,) = index.apply(
        ev.RunEvent(event_id="e", job_id=UP, at=T0, idem_key="k", index=0, event=old)
    )
    assert isinstance(envelope.command, cmd.UpstreamRunEnded)
    assert envelope.command.upstream_tenant == ""
