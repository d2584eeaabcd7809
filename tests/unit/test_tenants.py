"""Tenants in the fold: a user command acts only on its own tenant's jobs (cronlog.tenants)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given as hgiven
from hypothesis import strategies as st

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.decide import handle
from cronlog.job import JobState
from cronlog.model import JobSpec, Schedule, ScheduleKind, main_task
from cronlog.tenants import DEFAULT_TENANT, PLATFORM_COMMANDS, is_tenant_name, tenant_mismatch
from cronlog.vocabulary import JobStatus, RejectReason

JOB = "nightly"
T0 = datetime(2024, 6, 10, 12, 0, tzinfo=UTC)
SPEC_A = JobSpec(
    "report", Schedule(ScheduleKind.CRON, expression="*/5 * * * *"), main_task(("true",))
)
SPEC_A = replace(SPEC_A, tenant="team-a")


def send(
    state: JobState | None, command: cmd.Command, tenant: str, key: str = "k1"
) -> tuple[JobState | None, list[ev.Event]]:
    envelope = cmd.Envelope(idem_key=key, job_id=JOB, command=command, tenant=tenant)
    return handle(state, envelope, T0 + timedelta(seconds=1))


def owned_by_a() -> JobState:
    state, events = send(None, cmd.RegisterJob(spec=SPEC_A), "team-a", key="reg")
    assert [type(e) for e in events] == [ev.JobRegistered]
    assert state is not None
    return state


def refusal(events: list[ev.Event]) -> ev.CommandRejected:
    assert len(events) == 1 and isinstance(events[0], ev.CommandRejected)
    assert events[0].reason is RejectReason.WRONG_TENANT
    return events[0]


def test_a_job_registered_without_a_tenant_belongs_to_the_default_tenant() -> None:
    spec = replace(SPEC_A, tenant=DEFAULT_TENANT)
    state, _ = handle(
        None, cmd.Envelope(idem_key="r", job_id=JOB, command=cmd.RegisterJob(spec=spec)), T0
    )
    assert state is not None and state.spec.tenant == "default"


@pytest.mark.parametrize(
    "command",
    [
        cmd.PauseJob(),
        cmd.ResumeJob(),
        cmd.DeleteJob(),
        cmd.TriggerJob(),
        cmd.UpdateJob(spec=replace(SPEC_A, tenant="team-b")),
        cmd.CancelRun(run_id="r1"),
        cmd.ReplayTask(run_id="r1", task="main", scheduled_for=T0),
        cmd.BackfillJob(ticks=(T0,)),
    ],
    ids=lambda c: type(c).__name__,
)
def test_another_tenants_user_command_is_refused_and_changes_nothing(command: cmd.Command) -> None:
    state = owned_by_a()
    after, events = send(state, command, "team-b")
    r = refusal(events)
    assert r.command == type(command).__name__
    assert r.detail == "job 'nightly' does not belong to tenant 'team-b'" or (
        isinstance(command, cmd.UpdateJob) and "names tenant 'team-b'" in r.detail
    )
    assert "team-a" not in r.detail  # the refusal never names the owner
    assert after is not None and after.spec == state.spec and after.status is state.status
    assert after.runs == state.runs


def test_the_owner_tenants_commands_are_applied() -> None:
    state = owned_by_a()
    after, events = send(state, cmd.PauseJob(), "team-a")
    assert [type(e) for e in events] == [ev.JobPaused]
    assert after is not None and after.status is JobStatus.PAUSED


def test_register_must_name_the_senders_tenant() -> None:
    _, events = send(None, cmd.RegisterJob(spec=SPEC_A), "team-b")
    assert refusal(events).detail == (
        "the definition names tenant 'team-a' but the command was sent for tenant 'team-b'"
    )


def test_an_update_cannot_move_a_job_to_another_tenant() -> None:
    state = owned_by_a()
    after, events = send(state, cmd.UpdateJob(spec=replace(SPEC_A, tenant="team-b")), "team-a")
    assert "names tenant 'team-b'" in refusal(events).detail
    assert after is not None and after.spec.tenant == "team-a"


def test_a_deleted_jobs_id_cannot_be_taken_over_by_another_tenant() -> None:
    state, _ = send(owned_by_a(), cmd.DeleteJob(), "team-a", key="del")
    spec_b = replace(SPEC_A, tenant="team-b")
    after, events = send(state, cmd.RegisterJob(spec=spec_b), "team-b", key="reg-b")
    refusal(events)
    assert after is not None and after.spec.tenant == "team-a"
    _, events = send(state, cmd.RegisterJob(spec=SPEC_A), "team-a", key="reg-a2")
    assert [type(e) for e in events] == [ev.JobRegistered]  # its own tenant may re-register


def test_a_malformed_tenant_is_refused_with_the_rule() -> None:
    _, events = send(None, cmd.RegisterJob(spec=replace(SPEC_A, tenant="Team A")), "Team A")
    assert refusal(events).detail.startswith("tenant 'Team A' is not a tenant name (")


@pytest.mark.parametrize(
    "command",
    [
        cmd.Tick(),
        cmd.PollTasks(worker_id="w1", slots=1, poll_id="p1"),
    ],
    ids=lambda c: type(c).__name__,
)
def test_platform_commands_carry_no_tenant_check(command: cmd.Command) -> None:
    assert (
        tenant_mismatch("team-a", cmd.Envelope(idem_key="t", job_id=JOB, command=command)) is None
    )


def test_every_platform_command_is_sent_by_scheduler_worker_or_relay() -> None:
    assert {c.__name__ for c in PLATFORM_COMMANDS} == {
        "Tick",
        "ClaimTask",
        "RenewLease",
        "CompleteTask",
        "ReleaseTask",
        "PollTasks",
        "PollJob",  # the fold's own, one per job a poll looks at
        "UpstreamRunEnded",
        "GrantSlots",  # the tenant ledger's (cronlog.ledger)
        "AskSlots",
        "ReturnSlots",
        "SetTenantLimits",  # the API sends it for a platform admin only
    }


@hgiven(st.text(max_size=70))
def test_tenant_names_follow_the_pattern(name: str) -> None:
    ok = (
        1 <= len(name) <= 63
        and all(c in "abcdefghijklmnopqrstuvwxyz0123456789_-" for c in name)
        and name[0] not in "_-"
    )
    assert is_tenant_name(name) is ok


@hgiven(
    owner=st.sampled_from(["default", "team-a", "team-b"]),
    sender=st.sampled_from(["default", "team-a", "team-b"]),
)
def test_a_user_command_passes_exactly_when_the_sender_owns_the_job(
    owner: str, sender: str
) -> None:
    envelope = cmd.Envelope(idem_key="k", job_id=JOB, command=cmd.TriggerJob(), tenant=sender)
    assert (tenant_mismatch(owner, envelope) is None) is (owner == sender)
