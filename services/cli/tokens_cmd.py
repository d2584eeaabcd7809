"""``cronlog tokens create``: static API tokens, and the local admin token of ``cronlog up``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from cronlog.errors import CronlogError
from services.cli.client import TOKEN_FILE

if TYPE_CHECKING:
    from services.api.access.auth import Role

# The API's token store (PyJWT, cryptography) and settings are imported by the commands that
# use them, not at start: ``cronlog --help`` and ``cronlog jobs list`` stay light.

console = Console()
tokens = typer.Typer(no_args_is_help=True, help="Static API tokens (hashed at rest).")


@tokens.command("create")
def create(
    name: Annotated[str, typer.Argument(help="who or what the token is for (shown in logs)")],
    tenant: Annotated[str, typer.Option(help="the tenant it acts for; '*' for the platform")] = (
        "default"
    ),
    role: Annotated[str, typer.Option(help="viewer, operator or admin")] = "viewer",
    tokens_file: Annotated[
        Path | None, typer.Option(help="default: CRONLOG_API_TOKENS_FILE or state/api-tokens.json")
    ] = None,
) -> None:
    """Create a static API token and print it once; the API keeps only its SHA-256 digest.

    The API re-reads the tokens file when it changes: no restart needed.
    """
    from cronlog.tenants import is_tenant_name
    from services.api.access.auth import PLATFORM, Role, add_token
    from services.api.settings import ApiSettings

    if tenant != PLATFORM and not is_tenant_name(tenant):
        raise typer.BadParameter(f"{tenant!r} is not a tenant name (a-z 0-9 _ -, or '*')")
    try:
        parsed = Role.parse(role)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    path = tokens_file or ApiSettings().api_tokens_file
    try:
        token = add_token(path, name, tenant, parsed)
    except CronlogError as exc:
        raise typer.BadParameter(str(exc)) from None
    console.print(f"token for {name} (tenant {tenant}, {role}); shown once:", highlight=False)
    print(token)


def local_admin_token(state_dir: Path) -> str:
    """Return the admin token of tenant ``default`` that ``cronlog up`` prints and the CLI reads.

    Kept (mode 0600) in ``<state_dir>/api-token`` for the CLI, like a kubeconfig's credential;
    the API's ``<state_dir>/api-tokens.json`` holds only its digest. Made once; re-used while
    its digest is in the tokens file.
    """
    from services.api.access.auth import Role

    return _local_token(state_dir, TOKEN_FILE.name, "local-admin", "default", Role.ADMIN)


METRICS_TOKEN_FILE = "metrics-token"  # noqa: S105 (a file name, not a secret)
"""The file in ``state/`` of ``cronlog up``'s token for Prometheus (``local_metrics_token``)."""


def local_metrics_token(state_dir: Path) -> str:
    """Return the platform viewer token that ``cronlog up`` prints for Prometheus.

    ``/metrics`` answers a token of the platform tenant ``*`` only (its ``job`` labels name
    every tenant's jobs; docs/metrics.md): a viewer's is enough and can write nothing. Kept
    (0600) in ``<state_dir>/metrics-token``, made once and re-used like ``local_admin_token``.
    """
    from services.api.access.auth import PLATFORM, Role

    return _local_token(state_dir, METRICS_TOKEN_FILE, "local-prometheus", PLATFORM, Role.VIEWER)


def _local_token(state_dir: Path, file_name: str, base: str, tenant: str, role: Role) -> str:
    """Return the token kept in ``<state_dir>/<file_name>`` if the API still knows it, else
    make one (named ``base``, or ``base-N`` when taken) for ``tenant`` with ``role``."""
    from services.api.access.auth import add_token, digest, load_tokens

    token_file, tokens_file = state_dir / file_name, state_dir / "api-tokens.json"
    if token_file.exists() and tokens_file.exists():
        token = token_file.read_text().strip()
        if digest(token) in load_tokens(tokens_file):
            return token
    taken = (
        {p.subject for p in load_tokens(tokens_file).values()} if tokens_file.exists() else set()
    )
    name = next(
        f"{base}-{i}" if i else base
        for i in range(len(taken) + 1)
        if (f"{base}-{i}" if i else base) not in taken
    )
    token = add_token(tokens_file, name, tenant, role)
    fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(token + "\n")
    return token
