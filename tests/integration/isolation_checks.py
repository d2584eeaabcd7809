"""The assertions of issue 25's "isolation on by default", shared by the ``./ops/up`` and the
docker-compose variants of tests/integration/test_isolation_default.py.

Tenant A has a job. Tenant B runs a task (``isolation_probe.py``) that tries every route it
has to it: the files in ``state/``, the worker's environment, the broker's listeners without
credentials (client and controller ports, the commands topic and A's ingress topic), the API
without a token and with B's own. B's services, with B's own Kafka user, then try A's ingress
topic, the commands topic, and B's ingress topic with A's name in the envelope or A's job.
A's job must come out of all of it untouched.
"""

from __future__ import annotations

import json
import os
import random
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from confluent_kafka import KafkaError, Producer
from pydantic import SecretStr

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.vocabulary import RejectReason
from cronlog_client import CommandProducer
from services.api.access.auth import Role, add_token
from services.cli.broker_access import grant_tenant, new_password
from tests.chaos.harness import _port_free
from tests.integration.harness import DeadLetterLog, EventLog
from tests.integration.helpers import wait_for
from topology.kafka.config import KafkaSettings
from topology.kafka.topics import Topics, ingress_topic
from topology.wire.codec import DeadLetter, encode_command


def free_port_pair() -> int:
    """A port P with P and P + 1 free, below Linux's ephemeral range (32768-60999)."""
    rng = random.Random()  # noqa: S311 (a port number, not a secret)
    return next(
        p
        for p in (rng.randrange(21000, 29000, 2) for _ in range(200))
        if _port_free(p) and _port_free(p + 1)
    )


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any cronlog or broker setting (the suite's own),
    then ``extra``: what a fresh shell running ``./ops/up`` has."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("CRONLOG_") and k != "KAFKA_BOOTSTRAP"
    }
    return {**env, **extra}


PROBE = Path(__file__).with_name("isolation_probe.py")
JOB_A = "a-nightly"


@dataclass
class Deployment:
    """A running cronlog set up as the default path sets it up.

    Attributes:
        api: the API's base URL.
        tokens_file: the API's static tokens file.
        state: the services' ``state/`` directory (a task must not read it).
        listeners: every broker address a task could try (the client and controller ports).
        service: settings authenticated as the services' user (to read events).
        admin: settings authenticated as the broker's admin (to give tenants users).
        task_uid: the uid tasks must run as.
    """

    api: str
    tokens_file: Path
    state: Path
    listeners: list[str]
    service: KafkaSettings
    admin: KafkaSettings
    task_uid: int


def _client(d: Deployment, token: str) -> httpx.Client:
    return httpx.Client(base_url=d.api, headers={"Authorization": f"Bearer {token}"}, timeout=30)


def _tenant_settings(d: Deployment, user: str, password: str) -> KafkaSettings:
    update = {"kafka_sasl_username": user, "kafka_sasl_password": SecretStr(password)}
    return d.service.model_copy(update={**update, "kafka_sasl_password_file": ""})


def task_python() -> str:
    """An interpreter of this Python version a task's user may run: this one, unless it lives
    where others cannot enter (a pyenv under /root), else the system's of the same version."""
    real = Path(sys.executable).resolve()
    if all(p.stat().st_mode & 0o001 for p in real.parents):
        return str(real)
    system = Path(f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}")
    assert system.exists(), f"no interpreter a task's user may run ({real} is not one)"
    return str(system)


def run_probe_as_tenant_b(d: Deployment, b: httpx.Client, b_token: str) -> dict[str, Any]:
    """Run ``isolation_probe.py`` as a task of tenant B; return what it printed."""
    cfg = {
        "state": str(d.state),
        "kafka": d.listeners,
        "api": d.api,
        "token_b": b_token,
        "job_a": JOB_A,
        "topics": [Topics.of(d.service).commands, ingress_topic(d.service, "team-a")],
        "site": sysconfig.get_paths()["purelib"],  # confluent-kafka and httpx for the probe
    }
    body = {
        "job_id": "b-probe",
        "name": "b's probe",
        "schedule": {"type": "manual"},
        "command": [task_python(), str(PROBE), json.dumps(cfg)],
    }
    assert b.post("/api/v1/jobs", json=body).status_code == 201
    run_id = b.post("/api/v1/jobs/b-probe/trigger").json()["run_id"]

    def ended() -> str | None:
        state = b.get(f"/api/v1/runs/{run_id}").json().get("state")
        return state if state in ("succeeded", "failed") else None

    state = wait_for(ended, 180, "b's probe to end")
    text = b.get(f"/api/v1/runs/{run_id}/tasks/main/attempts/1/log").text
    assert state == "succeeded", text
    (line,) = [ln for ln in text.splitlines() if ln.startswith("PROBE ")]
    return dict(json.loads(line.removeprefix("PROBE ")))


def check_probe(d: Deployment, probe: dict[str, Any]) -> None:
    """A task of B runs unprivileged and reaches nothing of the deployment's."""
    assert probe["uid"] == probe["euid"] == d.task_uid != 0, probe
    assert Path(probe["cwd"]).name.startswith("attempt-") and probe["home"] == probe["cwd"]
    assert probe["env_secrets"] == []
    for read in ("api_token", "tokens_file", "kafka_password", "list_state", "worker_environ"):
        assert probe[read] == "PermissionError", (read, probe[read])
    produced = {k: v for k, v in probe.items() if k.startswith("produce")}
    assert len(produced) == 3 * len(d.listeners), produced
    for name, result in produced.items():
        assert "delivered" not in result and result != "no answer", (name, result)
    for name, result in produced.items():
        if name.startswith("produce-as-admin") and d.listeners[0] in name:
            assert "_AUTHENTICATION" in result, (name, result)  # a guessed password: refused
    assert probe["api_delete_no_token"] == probe["api_trigger_no_token"] == 401
    assert probe["api_delete_token_b"] == probe["api_pause_token_b"] == 404


def _produce_error(settings: KafkaSettings, topic: str) -> KafkaError | None:
    done: list[KafkaError | None] = []
    p = Producer(settings.producer_config(**{"message.timeout.ms": 15000, "log_level": 0}))
    p.produce(topic, key=JOB_A.encode(), value=b"x", on_delivery=lambda e, m: done.append(e))
    p.flush(20)
    return done[0] if done else None


def check_b_services_cannot_reach_a(d: Deployment) -> None:
    """B's own Kafka user: not A's ingress topic, not the commands topic; on B's topic, a
    command in A's name is dead-lettered and one for A's job is refused by the fold."""
    users = {}
    for tenant in ("team-a", "team-b"):
        users[tenant] = new_password()
        grant_tenant(d.admin, tenant, f"tenant-{tenant}", users[tenant])
    b = _tenant_settings(d, "tenant-team-b", users["team-b"])
    for topic in (ingress_topic(d.service, "team-a"), Topics.of(d.service).commands):
        err = _produce_error(b, topic)
        assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, (topic, err)
    events, letters = EventLog(d.service), DeadLetterLog(d.service)
    try:
        with CommandProducer(b, tenant="team-b", ingress=True) as producer:
            producer.delete(JOB_A)  # b's envelope, a's job: the fold refuses it
        forged = cmd.Envelope(idem_key="f1", job_id=JOB_A, command=cmd.DeleteJob(), tenant="team-a")
        raw = Producer(b.producer_config(log_level=0))
        raw.produce(
            ingress_topic(d.service, "team-b"), key=JOB_A.encode(), value=encode_command(forged)
        )
        assert raw.flush(20) == 0

        def refused() -> list[DeadLetter]:
            letters.poll(0.5)
            return [x for x in letters.letters() if x.reason.startswith("wrong_tenant: ")]

        (letter,) = wait_for(refused, 120, "the ingress relay's wrong_tenant dead letter")
        assert letter.source_topic == ingress_topic(d.service, "team-b")
        assert events.wait_until(lambda log: bool(log.of_type(ev.CommandRejected, JOB_A)), 120)
        (rejected,) = [r.event for r in events.of_type(ev.CommandRejected, JOB_A)]
        assert rejected.reason is RejectReason.WRONG_TENANT  # type: ignore[attr-defined]
        assert events.of_type(ev.JobDeleted, JOB_A) == events.of_type(ev.JobPaused, JOB_A) == []
    finally:
        events.close()
        letters.close()


def check_isolation(d: Deployment) -> None:
    """Everything above, in order, and A's job untouched at the end."""
    a_token = add_token(d.tokens_file, "a-admin", "team-a", Role.ADMIN)
    b_token = add_token(d.tokens_file, "b-admin", "team-b", Role.ADMIN)
    with _client(d, a_token) as a, _client(d, b_token) as b:
        wait_for(lambda: a.get("/api/v1/jobs").status_code == 200, 60, "the API to take A's token")
        job = {"job_id": JOB_A, "name": "a's", "schedule": {"type": "manual"}, "command": ["true"]}
        assert a.post("/api/v1/jobs", json=job).status_code == 201
        check_probe(d, run_probe_as_tenant_b(d, b, b_token))
        check_b_services_cannot_reach_a(d)
        answer = a.get(f"/api/v1/jobs/{JOB_A}")
        assert answer.status_code == 200 and answer.json()["status"] == "active", answer.text
