"""Run-events of one-task runs as the fold writes them, built by hand (no Kafka), for the read
model's and the archive's tests and benches.

``record`` wraps one event in its ``RunEvent`` (the deterministic ``event_id`` of the command
and position that caused it); ``records`` wraps the events of one command, indexed from 0. The
event builders speak of task ``main`` at attempt 1, the one task of the runs these worlds feed.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from cronlog import events as ev
from cronlog.ids import event_id
from cronlog.vocabulary import FailureKind, RunTrigger


def record(idem_key: str, index: int, event: ev.Event, *, at: datetime, job_id: str) -> ev.RunEvent:
    """The ``RunEvent`` the fold writes for ``event``, the ``index``-th of command ``idem_key``.

    Args:
        idem_key: the idem_key of the command that caused it.
        index: its position among that command's events of ``job_id``, from 0.
        event: the event.
        at: the fold's now when it was decided (aware UTC).
        job_id: the job (the record's key).
    """
    return ev.RunEvent(
        event_id=event_id(idem_key, job_id, index),
        job_id=job_id,
        at=at,
        idem_key=idem_key,
        index=index,
        event=event,
    )


def records(idem_key: str, *events: ev.Event, at: datetime, job_id: str) -> list[ev.RunEvent]:
    """The records of one command's ``events``, in order (indexes 0, 1, ...); see ``record``."""
    return [record(idem_key, i, e, at=at, job_id=job_id) for i, e in enumerate(events)]


def scheduled(
    run_id: str,
    tick: datetime,
    *,
    trigger: RunTrigger = RunTrigger.SCHEDULE,
    next_fire_at: datetime | None = None,
    ready: tuple[str, ...] = (),
    **fields: Any,
) -> ev.RunScheduled:
    """A run of the one task ``main`` for ``tick`` (aware UTC); ``next_fire_at`` is the job's
    next tick after it (None: none, or not told); ``fields``: other RunScheduled fields
    (``runs_remaining``, ``release_at``)."""
    return ev.RunScheduled(
        run_id=run_id,
        scheduled_for=tick,
        trigger=trigger,
        tasks=("main",),
        next_fire_at=next_fire_at,
        ready=ready,
        **fields,
    )


def claimed(
    run_id: str,
    tick: datetime,
    *,
    expires_at: datetime,
    worker: str = "w1",
    lease_ttl: timedelta = timedelta(seconds=60),
    command: tuple[str, ...] = ("true",),
    timeout: timedelta = timedelta(minutes=5),
) -> ev.TaskClaimed:
    """The grant of ``main``'s first attempt (epoch 1) to ``worker``, its lease ending at
    ``expires_at``; ``tick`` is the run's ``scheduled_for``."""
    return ev.TaskClaimed(
        run_id=run_id,
        task="main",
        attempt=1,
        epoch=1,
        worker_id=worker,
        lease_expires_at=expires_at,
        lease_ttl=lease_ttl,
        scheduled_for=tick,
        command=command,
        timeout=timeout,
    )


def succeeded(
    run_id: str,
    *,
    started_at: datetime,
    finished_at: datetime,
    worker: str = "w1",
    output_tail: str = "",
) -> ev.TaskSucceeded:
    """``main``'s first attempt (epoch 1) exited 0 on ``worker``."""
    return ev.TaskSucceeded(
        run_id=run_id,
        task="main",
        attempt=1,
        epoch=1,
        worker_id=worker,
        exit_code=0,
        output_tail=output_tail,
        started_at=started_at,
        finished_at=finished_at,
    )


def failed(
    run_id: str,
    *,
    started_at: datetime,
    finished_at: datetime,
    exit_code: int = 1,
    worker: str = "w1",
    output_tail: str = "",
    task: str = "main",
) -> ev.TaskFailed:
    """``task``'s first attempt (epoch 1) exited ``exit_code`` (not 0) on ``worker``."""
    return ev.TaskFailed(
        run_id=run_id,
        task=task,
        attempt=1,
        epoch=1,
        worker_id=worker,
        failure_kind=FailureKind.NONZERO_EXIT,
        exit_code=exit_code,
        output_tail=output_tail,
        started_at=started_at,
        finished_at=finished_at,
    )
