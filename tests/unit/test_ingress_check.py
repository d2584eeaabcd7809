"""The ingress relay's check (services/ingress/check.py): a tenant's ingress topic forwards that
tenant's user commands only; the topic, not the envelope, says who sent it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cronlog import commands as cmd
from cronlog.model import JobSpec, Schedule, ScheduleKind, main_task
from cronlog.tenants import PLATFORM_COMMANDS
from services.ingress.check import refusal
from topology.kafka.config import KafkaSettings
from topology.kafka.topics import ingress_pattern, ingress_tenant, ingress_topic

SPEC = JobSpec(
    name="b",
    schedule=Schedule(ScheduleKind.MANUAL),
    task_specs=main_task(("true",)),
    tenant="team-b",
)


def _env(command: cmd.Command, tenant: str = "team-b") -> cmd.Envelope:
    return cmd.Envelope(idem_key="k", job_id="j", command=command, tenant=tenant)


@pytest.mark.parametrize(
    "command",
    [cmd.RegisterJob(spec=SPEC), cmd.PauseJob(), cmd.DeleteJob(), cmd.TriggerJob()],
)
def test_the_tenants_own_user_commands_pass(command: cmd.Command) -> None:
    assert refusal("team-b", _env(command)) is None


def test_another_tenant_in_the_envelope_is_wrong_tenant() -> None:
    why = refusal("team-b", _env(cmd.DeleteJob(), tenant="team-a"))
    assert why is not None and why.reason == "wrong_tenant"
    assert (
        why.detail
        == "the command is sent for tenant 'team-a' on the ingress topic of tenant 'team-b'"
    )


def test_a_definition_of_another_tenant_is_wrong_tenant() -> None:
    why = refusal("team-b", _env(cmd.RegisterJob(spec=replace(SPEC, tenant="team-a"))))
    assert why is not None and why.reason == "wrong_tenant"


@pytest.mark.parametrize(
    "command",
    [
        cmd.ClaimTask(run_id="r", task="t", attempt=1, worker_id="w"),
        cmd.PollTasks(worker_id="w", slots=1, poll_id="p"),
    ],
)
def test_a_platform_command_never_passes_whatever_its_envelope(command: cmd.Command) -> None:
    assert isinstance(command, PLATFORM_COMMANDS)
    why = refusal("team-b", _env(command))
    assert why is not None and why.reason == "platform_command"


def test_ingress_topics_name_their_tenant_and_nothing_else() -> None:
    s = KafkaSettings(topic_prefix="t1.x-")
    assert ingress_topic(s, "team-a") == "t1.x-cronlog.ingress.team-a"
    assert ingress_tenant(s, "t1.x-cronlog.ingress.team-a") == "team-a"
    assert ingress_tenant(s, "t1.x-cronlog.ingress.Team A") is None
    assert ingress_tenant(s, "t1.x-cronlog.commands") is None
    assert ingress_pattern(s) == r"^t1\.x-cronlog\.ingress\..+$"
    with pytest.raises(ValueError, match="not a tenant name"):
        ingress_topic(s, "*")
