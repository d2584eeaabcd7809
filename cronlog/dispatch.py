"""Dispatch: granting a job's ready task instances to workers (a claim, a poll, eager dispatch).

Every grant is one ``grant``: a TaskClaimed with epoch + 1, a lease and what to run. A poll
of the job (``PollJob``, the fold's share of a worker's PollTasks) grants its ready instances
best rank first (``grant_ready``). A completion's ``claim_next`` first takes the tasks the
completion readied in its own run, in the same decision (``take_next``: Temporal's eager
dispatch); the adapter grants the rest from the partition's ready index as a poll, and keeps
what a decision ``granted`` off the ready topic (``topology/fold/folder.py``). A job of a
ledger tenant is granted only under its tenant slots (``cronlog.slots``).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import NamedTuple

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.decision import Decision
from cronlog.errors import InvariantViolation
from cronlog.job import Run, TaskInstance
from cronlog.model import JobSpec, RetryPolicy, TaskSpec
from cronlog.priority import rank
from cronlog.slots import free_slots
from cronlog.vocabulary import TaskState


class Terms(NamedTuple):
    """A task's settings as its leases use them: ``JobSpec.task_spec``, nothing left to inherit.

    Attributes:
        task: the task, its inherited settings filled in.
        lease_ttl: how long a claim holds without renewal.
        timeout: the worker stops the attempt after this long.
        retry_policy: how a failed attempt is retried.
    """

    task: TaskSpec
    lease_ttl: timedelta
    timeout: timedelta
    retry_policy: RetryPolicy


def terms(spec: JobSpec, name: str) -> Terms:
    """Return task ``name``'s ``Terms`` (``JobSpec.task_spec`` fills every inherited setting).

    Raises:
        InvariantViolation: ``task_spec`` left a setting to inherit (a bug in the model).
    """
    task = spec.task_spec(name)
    if task.lease_ttl is None or task.timeout is None or task.retry_policy is None:
        raise InvariantViolation(f"JobSpec.task_spec({name!r}) left a setting to inherit")
    return Terms(task, task.lease_ttl, task.timeout, task.retry_policy)


def grant(
    d: Decision, run: Run, ti: TaskInstance, worker_id: str, now: datetime, token_digest: str = ""
) -> None:
    """Grant the lease on ``ti``'s current attempt to ``worker_id``.

    Args:
        d: the decision.
        run: the task instance's run.
        ti: the ready task instance.
        worker_id: the worker granted the lease.
        now: the fold's now, aware UTC.
        token_digest: the worker's ``lease_digest`` ("" for a worker without a lease token).

    Emits:
        TaskClaimed: epoch + 1, lease until now + lease ttl, what to run and its limits, and
        the hard deadline (claim + timeout + grace + lease ttl).
    """
    spec = d.live().spec
    task, lease_ttl, timeout, _ = terms(spec, ti.task)
    d.emit(
        ev.TaskClaimed(
            run_id=run.run_id,
            task=ti.task,
            attempt=ti.attempt,
            epoch=ti.epoch + 1,
            worker_id=worker_id,
            lease_expires_at=now + lease_ttl,
            lease_ttl=lease_ttl,
            scheduled_for=run.scheduled_for,
            command=task.command,
            timeout=timeout,
            action=task.action(),
            grace=spec.grace,
            deadline_at=now + timeout + spec.grace + lease_ttl,
            lease_token_digest=token_digest,
        )
    )


def grant_ready(d: Decision, poll: cmd.PollJob, now: datetime, token_digest: str) -> None:
    """Grant the polling worker up to ``poll.slots`` of the job's ready task instances.

    Smallest rank first (``cronlog.priority.rank``: the run's ``scheduled_for`` less the
    task's priority class times the job's aging), then run_id, then definition order within a
    run: the order the partition's ready index serves jobs in (docs/dispatch.md). A job of a
    ledger tenant grants at most its free tenant slots.

    Emits:
        TaskClaimed (``grant``) for each.
    Refusals: none (a job with nothing ready grants nothing).
    """
    state = d.live()
    ready = sorted(
        (
            (rank(state.spec, run.waiting_since, ti.task), run.run_id, i, run, ti)
            for run in state.runs
            for i, ti in enumerate(run.tasks)
            if ti.state is TaskState.READY
        ),
        key=lambda item: item[:3],
    )
    free = free_slots(state)
    most = poll.slots if free is None else min(poll.slots, free)
    for _, _, _, run, ti in ready[:most]:
        grant(d, run, ti, poll.worker_id, now, token_digest)


def take_next(
    d: Decision, completion: cmd.CompleteTask, mark: int, now: datetime, token_digest: str
) -> None:
    """Eager dispatch: grant the completing worker the tasks its completion readied.

    Up to ``completion.claim_next`` task instances of the completion's run, in the order the
    events after ``mark`` readied them, in the same decision; the adapter grants the rest of
    ``claim_next`` from the partition (``topology/fold/folder.py``). None for a job of a
    ledger tenant: the ended lease's tenant slot goes back (``cronlog.slots``).

    Emits:
        TaskClaimed (``grant``) for each, after the completion's own events.
    """
    if completion.claim_next <= 0 or free_slots(d.live()) is not None:
        return
    run_id = completion.run_id
    readied = [e for e in d.events[mark:] if isinstance(e, ev.TaskReady) and e.run_id == run_id]
    for ready in readied[: completion.claim_next]:
        run = d.live().run(run_id)
        ti = run.task(ready.task) if run is not None else None
        if run is not None and ti is not None and ti.state is TaskState.READY:
            grant(d, run, ti, completion.worker_id, now, token_digest)


def granted(events: Iterable[ev.Event]) -> set[tuple[str, str]]:
    """Return the task instances (run_id, task) that ``events``, one decision's, granted."""
    return {(e.run_id, e.task) for e in events if isinstance(e, ev.TaskClaimed)}
