"""Priorities with aging: which ready task instance a poll is granted first.

Every ready task instance has a *rank*, an instant: when its run began waiting (its
``scheduled_for``; a backfill or replay run's creation, ``Run.waiting_since``, so an old
backfill does not outrank everything) minus its priority class times the job's
``priority_aging``. A poll grants the smallest rank first
(the partition's ready index is ordered by the job's smallest rank, ``JobState.ready_rank``;
``leases.grant_ready`` orders a job's own instances the same way).

So under backlog a higher class starts first (class 2 with 5-minute aging is served as if it
had waited 10 minutes longer), and a lower-class task that has waited ``priority_aging``
longer than a higher one counts as its class: nothing starves. Class 0 (the default) ranks
at ``scheduled_for`` itself, the order before priorities existed. With a very long aging the
classes are strict. The rule is Kubernetes' PriorityClass order with the aging of Slurm's
multifactor priority (age factor), computed so that the rank is fixed when the task becomes
ready: no clock is read, the same log grants the same tasks.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from cronlog.model import JobSpec

MIN_PRIORITY, MAX_PRIORITY = -9, 9
"""The priority classes."""
MAX_PRIORITY_AGING = timedelta(days=7)
"""The longest ``priority_aging`` (ranks stay within ~9 weeks of their ``scheduled_for``)."""


def task_priority(spec: JobSpec, task: str) -> int:
    """Return the priority class of ``task`` in ``spec``: the task's own, else the job's."""
    for t in spec.task_specs:
        if t.name == task:
            return t.priority if t.priority is not None else spec.priority
    return spec.priority


def rank(spec: JobSpec, scheduled_for: datetime, task: str) -> datetime:
    """Return the rank of a ready instance of ``task``; smaller is granted first.

    Args:
        spec: the job's definition.
        scheduled_for: the run's tick (aware UTC).
        task: the task's name.

    Returns:
        ``scheduled_for - priority_aging * class`` (aware UTC).
    """
    p = task_priority(spec, task)
    return scheduled_for - spec.priority_aging * p if p else scheduled_for
