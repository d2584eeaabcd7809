"""The ingress relay on a real broker: a tenant's commands on its ingress topic reach the fold;
one naming another tenant is dead-lettered ``wrong_tenant`` and never folded; one for another
tenant's job is forwarded and refused by the fold, changing nothing (docs/security.md, "Who may
send as which tenant"). The ACLs that keep a tenant to its own ingress topic are tested on a
secure broker: tests/integration/test_isolation_default.py."""

from __future__ import annotations

from dataclasses import replace

import pytest
from confluent_kafka import Producer

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.model import JobSpec, Schedule, ScheduleKind, main_task
from cronlog.vocabulary import RejectReason
from cronlog_client import CommandProducer
from services.cli.broker_access import create_ingress_topic
from tests.integration.harness import Cluster, DeadLetterLog, EventLog, Proc
from tests.integration.helpers import wait_for
from topology.wire.codec import DeadLetter, encode_command

pytestmark = pytest.mark.broker
SPEC = JobSpec(name="j", schedule=Schedule(ScheduleKind.MANUAL), task_specs=main_task(("true",)))


def _envelope(job_id: str, command: cmd.Command, tenant: str, key: str) -> bytes:
    return encode_command(cmd.Envelope(idem_key=key, job_id=job_id, command=command, tenant=tenant))


def test_a_tenants_ingress_forwards_its_own_commands_and_refuses_the_others(
    cluster: Cluster, events: EventLog
) -> None:
    ingress = create_ingress_topic(cluster.settings, "team-b")
    cluster.scheduler()
    cluster.worker()
    relay = Proc("ingress", cluster.env(CRONLOG_INSTANCE_ID="i1"), cluster.tmp / "ingress.log")
    cluster.procs.append(relay.start())
    a_spec = replace(SPEC, tenant="team-a")
    cluster.send_raw(b"a-job", _envelope("a-job", cmd.RegisterJob(spec=a_spec), "team-a", "a1"))
    with CommandProducer(cluster.settings, tenant="team-b", ingress=True) as b:
        assert b.topic == ingress
        b.register("b-job", replace(SPEC, tenant="team-b"))
        b.trigger("b-job")
        b.delete("a-job")  # b's own envelope for a's job: forwarded, refused by the fold
    raw = Producer(cluster.settings.producer_config())  # a's name in the envelope, on b's topic
    raw.produce(ingress, key=b"a-job", value=_envelope("a-job", cmd.DeleteJob(), "team-a", "f1"))
    raw.flush(10)

    assert events.wait_until(lambda log: bool(log.of_type(ev.RunSucceeded, "b-job")), 90), (
        relay.log_tail()
    )
    assert events.wait_until(lambda log: bool(log.of_type(ev.CommandRejected, "a-job")), 60)
    (rejected,) = [r.event for r in events.of_type(ev.CommandRejected, "a-job")]
    assert rejected.reason is RejectReason.WRONG_TENANT  # type: ignore[attr-defined]
    letters = DeadLetterLog(cluster.settings)
    try:

        def refused() -> list[DeadLetter]:
            letters.poll(0.5)
            return [d for d in letters.letters() if d.source_topic == ingress]

        (letter,) = wait_for(refused, 60, "the relay's dead letter")
    finally:
        letters.close()
    assert letter.error_type == "IngressRefused"
    assert letter.reason == (
        "wrong_tenant: the command is sent for tenant 'team-a' on the ingress topic of "
        "tenant 'team-b'"
    )
    assert events.of_type(ev.JobDeleted, "a-job") == []
    assert "action=ingress_refused" in relay.log_tail(200)
