"""What a tenant's ingress topic may carry: the relay's check, pure (no I/O).

A record on ``<prefix>cronlog.ingress.<tenant>`` was written by a principal with WRITE on that
topic alone, so the topic, not the envelope, says which tenant sent it. The envelope's tenant
must be that one, and only user commands pass: the platform's own (Ticks, worker commands,
``UpstreamRunEnded``, the tenant ledger's, ``SetTenantLimits``) carry an authority no tenant
has. Whether the job belongs to the tenant is the fold's check (``cronlog.tenants``), made in
log order against the job's record. docs/security.md, "Who may send as which tenant".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from cronlog import commands as cmd
from cronlog.tenants import PLATFORM_COMMANDS

Reason = Literal["wrong_tenant", "platform_command"]
"""Why the relay dead-letters a command instead of forwarding it."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """An ingress record the relay does not forward.

    Attributes:
        reason: the dead letter's reason code.
        detail: the human explanation (never names another tenant's job or owner).
    """

    reason: Reason
    detail: str


def refusal(tenant: str, envelope: cmd.Envelope) -> Refusal | None:
    """Return why ``envelope``, read from ``tenant``'s ingress topic, may not be forwarded.

    Args:
        tenant: the tenant whose ingress topic the record was on.
        envelope: the decoded command.

    Returns:
        None when it may go on to the commands topic (the fold then checks that the job is
        the tenant's); else the refusal.

    Determinism: a function of its arguments only.
    """
    command = envelope.command
    if isinstance(command, PLATFORM_COMMANDS):
        return Refusal(
            "platform_command",
            f"{type(command).__name__} is the platform's own command: a tenant's ingress "
            "topic takes user commands only",
        )
    if envelope.tenant != tenant:
        return Refusal(
            "wrong_tenant",
            f"the command is sent for tenant {envelope.tenant[:80]!r} on the ingress topic of "
            f"tenant {tenant!r}",
        )
    if isinstance(command, cmd.RegisterJob | cmd.UpdateJob) and command.spec.tenant != tenant:
        return Refusal(
            "wrong_tenant",
            f"the definition names tenant {command.spec.tenant[:80]!r} on the ingress topic of "
            f"tenant {tenant!r}",
        )
    return None
