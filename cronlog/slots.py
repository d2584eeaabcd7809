"""A job's side of the tenant ledger: which ready task instances hold a tenant slot.

A job of any tenant but ``default`` starts a task instance only under a *tenant slot* the
tenant ledger (``cronlog.ledger``) gave it, so a tenant's cap and its weighted share hold
across partitions and scheduler processes (docs/tenants.md, "The tenant ledger"). The job's
record counts its slots (``JobState.slots_held``, ``slots_asked``); after every decision
``settle_slots`` squares them with its task instances:

- a lease that ended (completed, failed, lapsed, released, cancelled) gives its slot back,
  always, so a job with a backlog cannot keep its slots from the other tenants;
- slots beyond the ready instances are given back;
- ready instances without a slot are asked for (once each: ``slots_asked``).

A poll grants a gated job at most its free slots (``free_slots``). Every change is an event
(``TenantSlotsAsked``, ``TenantSlotsReturned``, ``TenantSlotsReceived``), so a replay
decides the same, and the fold appends the matching command to the ledger in the same
transaction.
"""

from __future__ import annotations

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.decision import Decision
from cronlog.job import JobState
from cronlog.priority import rank
from cronlog.tenants import DEFAULT_TENANT
from cronlog.time import to_ms
from cronlog.vocabulary import TaskState


def gated(state: JobState) -> bool:
    """Return whether the job's task instances need tenant slots (its tenant is not default)."""
    return state.spec.tenant != DEFAULT_TENANT


def _count(state: JobState | None, wanted: TaskState) -> int:
    if state is None:
        return 0
    return sum(ti.state is wanted for run in state.runs for ti in run.tasks)


def free_slots(state: JobState) -> int | None:
    """Return how many ready task instances a poll may grant now, or None for no limit.

    A gated job: its slots not held by a claimed instance. Others: None.
    """
    if not gated(state):
        return None
    return max(0, state.slots_held - _count(state, TaskState.CLAIMED))


def settle_slots(d: Decision, before: JobState | None) -> None:
    """Square the job's tenant slots with its task instances after a decision.

    Args:
        d: the decision, its events so far applied to ``d.state``.
        before: the job's state before the decision.

    Emits:
        TenantSlotsReturned for ended leases and slots beyond the ready instances, then
        TenantSlotsAsked for ready instances that have no slot and were not asked for.
    """
    state = d.state
    if state is None or not gated(state):
        return
    claimed = _count(state, TaskState.CLAIMED)
    claims = sum(isinstance(e, ev.TaskClaimed) for e in d.events)
    ended = max(0, _count(before, TaskState.CLAIMED) + claims - claimed)
    ready = _count(state, TaskState.READY) if state.runs else 0
    give = min(ended, state.slots_held)
    spare = state.slots_held - give - claimed
    if spare > ready:
        give += spare - ready
    if give > 0:
        d.emit(ev.TenantSlotsReturned(tenant=state.spec.tenant, count=give))
    state = d.live()
    spare = max(0, state.slots_held - claimed)
    want = ready - spare - state.slots_asked
    refused = any(isinstance(e, ev.TenantSlotsReceived) and e.refused for e in d.events)
    if want > 0 and not refused:  # after a refusal, a later decision (a poll) asks again
        d.emit(ev.TenantSlotsAsked(tenant=state.spec.tenant, count=want, waiting=ready - spare))


def waiting_rank_ms(state: JobState) -> int | None:
    """Return the best rank of the job's ready task instances that hold no slot, epoch ms.

    Polls grant a job's ready instances best rank first, so its free slots go to its best
    ones and the rest wait: this is where the job's place in the ledger's queue starts.
    None when every ready instance has a slot.
    """
    ranks = sorted(
        rank(state.spec, run.waiting_since, ti.task)
        for run in state.runs
        for ti in run.tasks
        if ti.state is TaskState.READY
    )
    spare = free_slots(state) or 0
    return to_ms(ranks[spare]) if spare < len(ranks) else None


def receive(d: Decision, command: cmd.GrantSlots) -> None:
    """Decide a GrantSlots: the job holds ``count`` more slots.

    ``settle_slots`` returns any it cannot use. A job with no record, or of the default
    tenant, returns them all.

    Emits:
        TenantSlotsReceived; or TenantSlotsReturned when the job cannot hold slots.
    """
    state = d.state
    if state is None or not gated(state) or state.spec.tenant != command.tenant:
        d.emit(  # and its ask is withdrawn: the ledger must not grant it again
            ev.TenantSlotsReturned(tenant=command.tenant, count=command.count, withdraw=True)
        )
        return
    d.emit(
        ev.TenantSlotsReceived(tenant=command.tenant, count=command.count, refused=command.refused)
    )
