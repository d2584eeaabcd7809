"""``cronlog secure``: the secure broker's passwords and grants (docker-compose's set-up steps;
``cronlog up`` calls the same functions), and ``cronlog tenants kafka-access``.

docs/security.md, "The default set-up".
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

# broker_access (confluent-kafka) and the settings (pydantic) are imported by the commands
# that use them: ``cronlog --help`` stays light (tests/unit/test_cli_client.py).

console = Console(stderr=True)
secure = typer.Typer(
    no_args_is_help=True, help="The secure broker's passwords, users and ACLs (set-up steps)."
)
BROKER_LISTENER = "broker"
"""docker-compose's name for the clients' SASL listener (``KAFKA_LISTENERS``)."""


def _owner(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    uid, _, gid = text.partition(":")
    if not (uid.isdigit() and gid.isdigit()):
        raise typer.BadParameter(f"{text!r} is not UID:GID")
    return int(uid), int(gid)


@secure.command("init")
def init(
    broker_dir: Annotated[
        Path, typer.Option(help="the broker's config dir: admin password, its SASL settings")
    ],
    service_dir: Annotated[Path, typer.Option(help="the services' password file goes here")],
    broker_owner: Annotated[
        str | None, typer.Option(help="UID:GID the broker's files belong to (its user)")
    ] = None,
) -> None:
    """Make the passwords once (0600), and the broker's settings that hold its own.

    ``BROKER_DIR``: ``admin.password``, ``server.properties`` (the SASL entries the broker
    appends its other settings to) and ``admin.properties`` (Kafka's tools as admin).
    ``SERVICE_DIR``: ``cronlog.password``. Nothing is replaced once made, but the two
    settings files (rendered again from the password).
    """
    from services.cli import broker_access as access

    owner = _owner(broker_owner)
    for directory, own in ((broker_dir, owner), (service_dir, None)):
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        directory.chmod(0o700)  # a volume's root comes 0755
        if own is not None:
            os.chown(directory, *own)
    admin = access.ensure_password(broker_dir / "admin.password", owner)
    access.write_private(
        broker_dir / "server.properties",
        access.broker_secret_properties(admin, BROKER_LISTENER),
        owner,
    )
    access.write_private(
        broker_dir / "admin.properties", access.admin_client_properties(admin), owner
    )
    access.ensure_password(service_dir / "cronlog.password")
    console.print(f"passwords in {broker_dir} and {service_dir} (0600)", highlight=False)


@secure.command("grant")
def grant(
    admin_password_file: Annotated[Path, typer.Option(exists=True, dir_okay=False)],
    service_password_file: Annotated[Path, typer.Option(exists=True, dir_okay=False)],
    user: Annotated[str, typer.Option(help="the services' user")] = "cronlog",
) -> None:
    """As the broker's admin: create cronlog's topics, then the services' SCRAM user with the
    deployment's prefixed ACLs (cluster and prefix from ``KAFKA_BOOTSTRAP`` and
    ``CRONLOG_TOPIC_PREFIX``)."""
    from services.cli import broker_access as access
    from topology.kafka.bootstrap import ensure_topics_retrying
    from topology.kafka.config import KafkaSettings

    admin = access.admin_settings(KafkaSettings(), _first_line(admin_password_file))
    ensure_topics_retrying(admin, deadline_s=120.0)
    access.grant_service(admin, _first_line(service_password_file), user)
    console.print(f"user {user!r} may use {admin.topic_prefix or 'every'} cronlog topic")


def _first_line(path: Path) -> str:
    return path.read_text().splitlines()[0].strip()


def kafka_access(
    tenant: Annotated[str, typer.Argument(help="the tenant whose services produce commands")],
    user: Annotated[str | None, typer.Option(help="its Kafka user; default tenant-TENANT")] = None,
    admin_password_file: Annotated[
        Path, typer.Option(help="User:admin's password (./ops/up keeps it here)")
    ] = Path("state/kafka/admin.password"),
) -> None:
    """Give a tenant's services a Kafka user that may write its ingress topic only.

    Makes ``<prefix>cronlog.ingress.TENANT`` and the user, and prints its password once (the
    broker keeps only a salted SCRAM hash). Its commands reach cronlog through the ingress
    relay, which refuses any that is not the tenant's: ``CommandProducer(tenant=TENANT,
    ingress=True)`` (docs/client.md). Again for the same user: a new password.
    """
    from services.cli import broker_access as access
    from topology.kafka.config import KafkaSettings

    name = user or f"tenant-{tenant}"
    password = access.new_password()
    try:
        admin = access.admin_settings(KafkaSettings(), _first_line(admin_password_file))
        topic = access.grant_tenant(admin, tenant, name, password)
    except (OSError, ValueError, access.AccessError) as exc:
        raise typer.BadParameter(str(exc)) from None
    console.print(
        f"user {name!r} may write {topic}; CRONLOG_KAFKA_SASL_USERNAME={name}, "
        "CRONLOG_KAFKA_SECURITY_PROTOCOL=SASL_PLAINTEXT, SCRAM-SHA-512; its password, shown "
        "once:",
        highlight=False,
    )
    print(password)
