"""The client SDK's refusals, made before anything is produced (no broker needed).

What it sends, and that cronlog folds it, is ``tests/integration/test_client.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from cronlog import commands as cmd
from cronlog.errors import InvalidDefinition
from cronlog.model import JobSpec, Schedule, ScheduleKind, main_task
from cronlog_client import CommandProducer
from cronlog_client.refs import CommandNotSent, derived_key
from tests.builders import completed
from topology.kafka.config import KafkaSettings

T = datetime(2026, 12, 2, tzinfo=UTC)
SPEC = JobSpec(
    name="r", schedule=Schedule(kind=ScheduleKind.MANUAL), task_specs=main_task(("true",))
)


@pytest.fixture
def producer() -> Iterator[CommandProducer]:
    # Nothing listens there: every test below must refuse before producing.
    p = CommandProducer(KafkaSettings(bootstrap="127.0.0.1:1"), tenant="billing")
    yield p
    p.close(0)


def test_another_partitioner_is_refused() -> None:
    with pytest.raises(ValueError, match="murmur2_random"):
        CommandProducer(
            KafkaSettings(bootstrap="127.0.0.1:1"), producer_config={"partitioner": "crc32"}
        )


def test_a_spec_of_another_tenant_or_an_invalid_one_is_refused_before_sending(
    producer: CommandProducer,
) -> None:
    with pytest.raises(InvalidDefinition) as refused:
        producer.register("r", SPEC)  # SPEC is the default tenant's
    assert refused.value.field == "tenant"
    bad = JobSpec(
        name="r",
        schedule=Schedule(kind=ScheduleKind.CRON, expression="61 * * * *"),
        task_specs=main_task(("true",)),
        tenant="billing",
    )
    with pytest.raises(InvalidDefinition) as refused:
        producer.update("r", bad)
    assert refused.value.field == "schedule.expression"


@pytest.mark.parametrize(
    "command", [cmd.Tick(), cmd.PollTasks(worker_id="w", slots=1, poll_id="p")]
)
def test_ticks_and_polls_are_not_sent_with_send(
    producer: CommandProducer, command: cmd.Command
) -> None:
    with pytest.raises(ValueError, match="not sent with send"):
        producer.send("r", command)
    with pytest.raises(ValueError, match="job_id may not be empty"):
        producer.send("", cmd.PauseJob())


def test_a_lease_s_completion_and_release_get_the_worker_s_keys() -> None:
    done = completed("r1", epoch=3, worker="w", at=T)
    release = cmd.ReleaseTask(
        run_id="r1", task="main", attempt=1, epoch=3, worker_id="w", reason=""
    )
    assert derived_key(done) == "complete:r1:main:3"
    assert derived_key(release) == "release:r1:main:3"
    assert derived_key(cmd.TriggerJob()) is None


def test_an_ingress_producer_writes_its_tenants_ingress_topic_and_no_platform_command() -> None:
    settings = KafkaSettings(bootstrap="127.0.0.1:1", topic_prefix="p.")
    p = CommandProducer(settings, tenant="billing", ingress=True)
    try:
        assert p.topic == "p.cronlog.ingress.billing"
        assert CommandProducer(settings, tenant="billing").topic == "p.cronlog.commands"
        claim = cmd.ClaimTask(run_id="r", task="t", attempt=1, worker_id="w")
        with pytest.raises(ValueError, match="ClaimTask is a platform command"):
            p.send("job", claim)
        with pytest.raises(ValueError, match="PollTasks is a platform command"):
            p.poll(0, worker_id="w", slots=1, poll_id="x")
    finally:
        p.close(0)
    with pytest.raises(ValueError, match="not a tenant name"):
        CommandProducer(settings, tenant="Bad Name", ingress=True)


def test_a_command_not_sent_tells_the_key_and_issued_at_to_re_send_with(
    producer: CommandProducer,
) -> None:
    with pytest.raises(CommandNotSent) as caught:
        producer.send("j", cmd.PauseJob(), idem_key="pause-1", issued_at=T, timeout_s=0.2)
    assert (caught.value.idem_key, caught.value.issued_at) == ("pause-1", T)
    with pytest.raises(CommandNotSent) as fresh:
        producer.send("j", cmd.PauseJob(), timeout_s=0.2)
    issued = fresh.value.issued_at  # none given: the sender's now, aware UTC
    assert issued is not None and issued.tzinfo is UTC and issued > T
