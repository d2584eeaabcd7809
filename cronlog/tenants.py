"""Tenants: which team owns a job, and which commands must come from that team.

A tenant is a name (``TENANT_PATTERN``). Every job has one (``JobSpec.tenant``), fixed at
registration; every command says which tenant sent it (``Envelope.tenant``). The fold checks
the two agree for *user* commands (register, change, trigger, operate); Ticks, worker commands
(claim, renew, complete, release, poll) and the after relay's ``UpstreamRunEnded`` are the
platform's own and carry no tenant's authority (an ``UpstreamRunEnded`` names the upstream's
tenant instead, which must be the job's own: ``cronlog.after.foreign_upstream``). Who may
send as which tenant is the API's business (bearer tokens) and the broker's (ACLs on the
commands topic): docs/tenants.md.
"""

from __future__ import annotations

import re

from cronlog import commands as cmd

DEFAULT_TENANT = "default"
"""The tenant of jobs registered without one: single-team use."""

TENANT_PATTERN = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
"""A tenant name: 1..63 of ``a-z 0-9 _ -``, starting with a letter or digit (a DNS-label-like
name, so it can prefix Kafka principals, metric labels and paths unchanged)."""

PLATFORM_COMMANDS = (
    cmd.Tick,
    cmd.ClaimTask,
    cmd.RenewLease,
    cmd.CompleteTask,
    cmd.ReleaseTask,
    cmd.PollTasks,
    cmd.PollJob,
    cmd.UpstreamRunEnded,
    cmd.GrantSlots,
    cmd.AskSlots,
    cmd.ReturnSlots,
    cmd.SetTenantLimits,
)
"""Commands the platform sends (scheduler, workers, after relay) or the fold makes (PollJob):
no tenant check."""


def is_tenant_name(name: str) -> bool:
    """Return whether ``name`` is a valid tenant name (``TENANT_PATTERN``)."""
    return TENANT_PATTERN.fullmatch(name) is not None


def tenant_mismatch(owner: str | None, envelope: cmd.Addressed) -> str | None:
    """Return why ``envelope`` may not act on a job owned by ``owner``, or None if it may.

    Args:
        owner: the job's tenant (``JobSpec.tenant`` of its record), None when the job has no
            record yet.
        envelope: the command.

    Returns:
        A human explanation (for ``CommandRejected.detail``) when the command is a user
        command and its tenant is not the owner, or a RegisterJob/UpdateJob whose definition
        names another tenant than the envelope; None otherwise. The explanation never names
        the owner: a tenant learns nothing about another tenant's jobs.
    """
    command = envelope.command
    if isinstance(command, PLATFORM_COMMANDS):
        return None
    if not is_tenant_name(envelope.tenant):
        return f"tenant {envelope.tenant[:80]!r} is not a tenant name ({TENANT_PATTERN.pattern})"
    if isinstance(command, (cmd.RegisterJob, cmd.UpdateJob)) and (
        command.spec.tenant != envelope.tenant
    ):
        return (
            f"the definition names tenant {command.spec.tenant[:80]!r} but the command was "
            f"sent for tenant {envelope.tenant!r}"
        )
    if owner is not None and owner != envelope.tenant:
        return f"job {envelope.job_id!r} does not belong to tenant {envelope.tenant!r}"
    return None
