"""Who may use the broker: generated passwords, the service user's and tenants' SCRAM users and
ACLs, and the broker's own secret settings (docker-compose). Used by ``cronlog up``, ``cronlog
secure`` and ``cronlog tenants kafka-access``; docs/security.md, "The default set-up".

Three kinds of principal:

- ``User:admin``, the broker's own (PLAIN, from a static JAAS entry; ``super.users``): creates
  topics, users and ACLs, and nothing else uses it;
- ``User:cronlog``, the services' (SCRAM-SHA-512), with the three prefixed ACLs of the
  deployment (its topics, groups and transactional ids): only it may write
  ``cronlog.commands``;
- one user per tenant whose services drive cronlog through Kafka (SCRAM-SHA-512), which may
  write its own ingress topic only (``services/ingress``).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from pydantic import SecretStr

from cronlog.errors import CronlogError
from topology.kafka.config import KafkaSettings
from topology.kafka.topics import Topics, ingress_spec

ADMIN_USER = "admin"
"""The broker's own principal (``ops/kafka``'s and docker-compose's ``super.users``)."""
SERVICE_USER = "cronlog"
"""The principal cronlog's services authenticate as."""
SCRAM_ITERATIONS = 8192
TIMEOUT_S = 30.0
_PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
_SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


class AccessError(CronlogError):
    """The broker refused to create a user, an ACL or a topic (or could not be reached)."""


def new_password() -> str:
    """Return a fresh password: 43 URL-safe characters, 256 random bits."""
    return secrets.token_urlsafe(32)


def ensure_password(path: Path, owner: tuple[int, int] | None = None) -> str:
    """Return the password kept in ``path``, making a random one (mode 0600) when missing.

    Its directory is made mode 0700 when missing. The password is 43 URL-safe characters
    (256 random bits, ``secrets.token_urlsafe``).

    Args:
        path: the file (first line: the password).
        owner: ``(uid, gid)`` to give a new file to (docker-compose: the broker's user).
    """
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.exists() and path.read_text().strip():
        return path.read_text().splitlines()[0].strip()
    password = new_password()
    write_private(path, password + "\n", owner)
    return password


def write_private(path: Path, text: str, owner: tuple[int, int] | None = None) -> None:
    """Write ``text`` to ``path`` readable by its owner alone (0600), replacing it atomically."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    if owner is not None:
        os.chown(tmp, *owner)
    os.replace(tmp, path)


def admin_settings(base: KafkaSettings, password: str) -> KafkaSettings:
    """Return ``base`` (cluster, topic prefix, partitions) authenticated as ``User:admin``."""
    return base.model_copy(
        update={
            "kafka_security_protocol": "SASL_PLAINTEXT",
            "kafka_sasl_mechanism": "PLAIN",
            "kafka_sasl_username": ADMIN_USER,
            "kafka_sasl_password": SecretStr(password),
        }
    )


def service_env(password_file: Path, user: str = SERVICE_USER) -> dict[str, str]:
    """Return the environment that makes a service authenticate as ``user`` (SCRAM-SHA-512),
    its password read from ``password_file`` (never in the environment itself)."""
    return {
        "CRONLOG_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "CRONLOG_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
        "CRONLOG_KAFKA_SASL_USERNAME": user,
        "CRONLOG_KAFKA_SASL_PASSWORD_FILE": str(password_file),
    }


LOCAL_SERVICE_PASSWORD = (
    Path(__file__).resolve().parents[2] / "state" / "kafka" / "cronlog.password"
)
"""Where ``cronlog up`` keeps the services' password (the checkout's ``state/kafka/``)."""


def use_local_credentials() -> bool:
    """Let this CLI process reach ``cronlog up``'s secure broker as the services do.

    When neither ``KAFKA_BOOTSTRAP`` nor ``CRONLOG_KAFKA_SECURITY_PROTOCOL`` is set and
    ``LOCAL_SERVICE_PASSWORD`` exists, sets the services' variables (``service_env``) in this
    process's environment, like the CLI reads ``state/api-token`` by itself (``cronlog
    replay``, ``cronlog snapshot``). Returns whether it did.
    """
    if os.environ.get("KAFKA_BOOTSTRAP") or os.environ.get("CRONLOG_KAFKA_SECURITY_PROTOCOL"):
        return False
    if not LOCAL_SERVICE_PASSWORD.exists():
        return False
    os.environ.update(service_env(LOCAL_SERVICE_PASSWORD))
    return True


def _acl(
    kind: ResourceType, name: str, pattern: ResourcePatternType, user: str, op: AclOperation
) -> AclBinding:
    """An ALLOW of ``op`` on ``kind`` ``name`` for ``User:<user>`` from any host."""
    return AclBinding(kind, name, pattern, f"User:{user}", "*", op, AclPermissionType.ALLOW)


def _admin(conf: KafkaSettings) -> AdminClient:
    # librdkafka's own lines at warning and worse: ``up``'s terminal is for people
    return AdminClient({**conf.admin_config(), "log_level": 4})


def _upsert_user(admin: AdminClient, user: str, password: str) -> None:
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS)
    upsert = UserScramCredentialUpsertion(user, info, password.encode())
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(TIMEOUT_S)


def _create_acls(admin: AdminClient, acls: list[AclBinding]) -> None:
    for future in admin.create_acls(acls).values():
        future.result(TIMEOUT_S)


def grant_service(admin_conf: KafkaSettings, password: str, user: str = SERVICE_USER) -> None:
    """Make (or re-key) the services' SCRAM user and give it the deployment's prefixed ACLs.

    ``ALL`` on the topics, consumer groups and transactional ids starting with the topic
    prefix, or with ``cronlog`` when there is none (docs/security.md, "The ACLs cronlog
    needs"): nothing outside the deployment.

    Args:
        admin_conf: settings authenticated as the administrator (``admin_settings``).
        password: the user's password.
        user: its name.

    Raises:
        AccessError: the broker refused or did not answer.

    Idempotency: re-running it changes nothing but the password's salt.
    """
    # Kafka refuses an empty PREFIXED name; without a topic prefix every name cronlog uses
    # starts with "cronlog" (cronlog.commands, cronlog-scheduler, cronlog-workers, ...)
    prefix = admin_conf.topic_prefix or "cronlog"
    kinds = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID)
    acls = [_acl(k, prefix, ResourcePatternType.PREFIXED, user, AclOperation.ALL) for k in kinds]
    admin = _admin(admin_conf)
    try:
        _upsert_user(admin, user, password)
        _create_acls(admin, acls)
    except KafkaException as exc:
        raise AccessError(
            f"cannot grant {user!r} its ACLs on {admin_conf.bootstrap}: {exc}"
        ) from exc


def grant_tenant(admin_conf: KafkaSettings, tenant: str, user: str, password: str) -> str:
    """Make ``tenant``'s ingress topic and a SCRAM user that may write it, and nothing else.

    ``WRITE`` and ``DESCRIBE`` on the ingress topic, a LITERAL pattern: a PREFIXED one on
    ``…ingress.team-a`` would also match ``…ingress.team-ab``. ``DESCRIBE`` on the run-events
    topic, so that ``CommandProducer.trigger`` can note where to follow the run from; reading
    the run-events (every tenant's) is not granted.

    Returns:
        The ingress topic's name.

    Raises:
        AccessError: the broker refused or did not answer.
        ValueError: ``tenant`` is not a tenant name.

    Idempotency: re-running it re-keys the user and creates nothing twice.
    """
    spec = ingress_spec(admin_conf, tenant)
    lit = ResourcePatternType.LITERAL
    acls = [
        _acl(ResourceType.TOPIC, spec.name, lit, user, AclOperation.WRITE),
        _acl(ResourceType.TOPIC, spec.name, lit, user, AclOperation.DESCRIBE),
        _acl(
            ResourceType.TOPIC, Topics.of(admin_conf).run_events, lit, user, AclOperation.DESCRIBE
        ),
    ]
    create_ingress_topic(admin_conf, tenant)
    admin = _admin(admin_conf)
    try:
        _upsert_user(admin, user, password)
        _create_acls(admin, acls)
    except KafkaException as exc:
        raise AccessError(f"cannot grant {user!r} its ingress topic {spec.name}: {exc}") from exc
    return spec.name


def create_ingress_topic(admin_conf: KafkaSettings, tenant: str) -> str:
    """Create ``tenant``'s ingress topic unless it exists (``topology.kafka.topics.ingress_spec``).

    Returns:
        Its name.

    Raises:
        AccessError: the broker refused or did not answer.
        ValueError: ``tenant`` is not a tenant name.
    """
    spec = ingress_spec(admin_conf, tenant)
    admin = _admin(admin_conf)
    topic = NewTopic(spec.name, spec.partitions, config=spec.config)
    for future in admin.create_topics([topic]).values():
        try:
            future.result(TIMEOUT_S)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise AccessError(f"cannot create {spec.name}: {exc}") from exc
    return spec.name


def broker_secret_properties(admin_password: str, listener: str) -> str:
    """Return the broker settings that hold the admin password (docker-compose's broker reads
    them from a mounted ``server.properties``; ``ops/kafka`` renders its own).

    Args:
        admin_password: ``User:admin``'s password.
        listener: the name of the clients' SASL listener (lower case), e.g. ``broker``.
    """
    entry = (
        f'username="{ADMIN_USER}" password="{admin_password}" user_{ADMIN_USER}="{admin_password}"'
    )
    return "\n".join(
        [
            "# cronlog secure init: the broker's SASL entries (the admin password is here).",
            f"listener.name.{listener}.plain.sasl.jaas.config={_PLAIN} required {entry};",
            f"listener.name.{listener}.scram-sha-256.sasl.jaas.config={_SCRAM} required;",
            f"listener.name.{listener}.scram-sha-512.sasl.jaas.config={_SCRAM} required;",
            f"listener.name.controller.plain.sasl.jaas.config={_PLAIN} required {entry};",
            "",
        ]
    )


def admin_client_properties(admin_password: str) -> str:
    """Return the client settings Kafka's own tools use as ``User:admin`` (``--command-config``)."""
    return "\n".join(
        [
            "security.protocol=SASL_PLAINTEXT",
            "sasl.mechanism=PLAIN",
            f'sasl.jaas.config={_PLAIN} required username="{ADMIN_USER}" '
            f'password="{admin_password}";',
            "",
        ]
    )
