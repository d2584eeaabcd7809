"""cronlog on a SASL_PLAINTEXT (SCRAM-SHA-512) listener with ACLs enforced: the scheduler,
a worker and the API, each with its Kafka clients configured only by the ``CRONLOG_KAFKA_*``
security settings, run a job to success; the user's ACLs are prefixed to the deployment's
topic prefix (topics, consumer groups, transactional ids), nothing more. A user without ACLs
is refused, and a wrong password is refused at authentication.

The broker is one of the test's own (``PrivateBroker`` with ``CRONLOG_KAFKA_SASL_PORT``): its
PLAINTEXT listener is the administrator's (User:ANONYMOUS, a super user), which creates the
topics, the SCRAM users and the ACLs, as an operator would (docs/security.md).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.model import JobSpec, Schedule, ScheduleKind, main_task
from tests.chaos.harness import PrivateBroker, _port_free
from tests.integration.harness import Cluster, EventLog
from tests.integration.helpers import start_api, wait_for
from topology.kafka.bootstrap import ensure_topics
from topology.kafka.config import KafkaSettings
from topology.kafka.topics import Topics

pytestmark = [
    pytest.mark.own_broker,
    pytest.mark.broker,
    pytest.mark.slow,
    pytest.mark.timeout(400),
]
USER, PASSWORD = "cronlog", "cronlog-secret-1"
STRANGER, STRANGER_PASSWORD = "stranger", "stranger-secret-1"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[tuple[PrivateBroker, int]]:
    b = PrivateBroker(tmp_path / "kafka")
    rng = random.Random()  # noqa: S311 (a port number, not a secret)
    # below the ephemeral range (32768-60999), as every port of the tests (ops/kafka)
    sasl_port = next(p for p in (rng.randrange(29000, 30000) for _ in range(200)) if _port_free(p))
    b.env["CRONLOG_KAFKA_SASL_PORT"] = str(sasl_port)
    b.start()
    yield b, sasl_port
    b.destroy()


def _admin_setup(bootstrap: str, prefix: str) -> None:
    """As the administrator: SCRAM users, and the cronlog user's prefixed ACLs."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    users = [
        UserScramCredentialUpsertion(USER, info, PASSWORD.encode()),
        UserScramCredentialUpsertion(STRANGER, info, STRANGER_PASSWORD.encode()),
    ]
    for future in admin.alter_user_scram_credentials(users).values():
        future.result(30)
    acls = [
        AclBinding(
            kind,
            prefix,
            ResourcePatternType.PREFIXED,
            f"User:{USER}",
            "*",
            AclOperation.ALL,
            AclPermissionType.ALLOW,
        )
        for kind in (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID)
    ]
    for future in admin.create_acls(acls).values():
        future.result(30)


def _sasl(port: int, prefix: str, user: str, password: str) -> KafkaSettings:
    return KafkaSettings(
        bootstrap=f"127.0.0.1:{port}",
        topic_prefix=prefix,
        partitions=4,
        kafka_security_protocol="SASL_PLAINTEXT",
        kafka_sasl_mechanism="SCRAM-SHA-512",
        kafka_sasl_username=user,
        kafka_sasl_password=password,
    )


def _produce_error(settings: KafkaSettings) -> KafkaError | None:
    """Produce one record to the commands topic; return the delivery (or client) error."""
    errors: list[KafkaError] = []
    producer = Producer(
        settings.producer_config(**{"message.timeout.ms": 15000, "error_cb": errors.append})
    )
    delivered: list[KafkaError | None] = []
    producer.produce(
        Topics.of(settings).commands,
        key=b"x",
        value=b"x",
        on_delivery=lambda e, m: delivered.append(e),
    )
    producer.flush(20)
    return delivered[0] if delivered and delivered[0] is not None else (errors or [None])[0]


def test_cronlog_runs_a_job_as_a_scram_user_with_prefixed_acls_and_refuses_others(
    broker: tuple[PrivateBroker, int], tmp_path: Path
) -> None:
    b, sasl_port = broker
    prefix = f"sasl{uuid.uuid4().hex[:6]}."
    ensure_topics(KafkaSettings(bootstrap=b.bootstrap, topic_prefix=prefix, partitions=4))
    _admin_setup(b.bootstrap, prefix)
    settings = _sasl(sasl_port, prefix, USER, PASSWORD)

    cluster = Cluster(settings, tmp_path)
    events = EventLog(settings)
    try:
        cluster.scheduler()
        cluster.worker()
        api = start_api(cluster)
        spec = JobSpec(
            name="secure", schedule=Schedule(ScheduleKind.MANUAL), task_specs=main_task(("true",))
        )
        cluster.send("secure", cmd.RegisterJob(spec=spec), idem_key="reg-secure")
        cluster.send("secure", cmd.TriggerJob(), idem_key="trigger-secure")
        assert events.wait_until(lambda log: log.of_type(ev.RunSucceeded, "secure"), 120), (
            "\n".join(p.log_tail(30) for p in cluster.procs)
        )
        wait_for(
            lambda: [j["job_id"] for j in api.get("/api/v1/jobs").json()["jobs"]] == ["secure"],
            60,
            "the API (its read model on the SASL listener) to list the job",
        )
    finally:
        events.close()
        cluster.stop_all()

    refused = _produce_error(_sasl(sasl_port, prefix, STRANGER, STRANGER_PASSWORD))
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, refused
    bad_password = _produce_error(_sasl(sasl_port, prefix, USER, "wrong-password"))
    assert bad_password is not None, "a wrong password was accepted"
    assert bad_password.code() in (
        KafkaError._AUTHENTICATION,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError._MSG_TIMED_OUT,
    ), bad_password
