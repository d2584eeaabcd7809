"""Events: every state change of a job, its runs, task instances and leases.

The event classes live in ``cronlog.job_events`` (jobs and runs) and ``cronlog.task_events``
(task instances and leases); this module holds them all, with the ``Event`` union and the
``RunEvent`` envelope, so ``from cronlog import events as ev`` reaches every one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from cronlog.job_events import (
    CommandRejected,
    JobDeleted,
    JobPaused,
    JobProbing,
    JobRedefined,
    JobRegistered,
    JobResumed,
    JobSuspended,
    JobUnsuspended,
    RunBuffered,
    RunCancelled,
    RunFailed,
    RunQueued,
    RunReopened,
    RunScheduled,
    RunSucceeded,
    RunTimedOut,
    TenantSlotsAsked,
    TenantSlotsReceived,
    TenantSlotsReturned,
    TickSkipped,
)
from cronlog.task_events import (
    LeaseExpired,
    LeaseRenewed,
    PollAnswered,
    RetryScheduled,
    TaskCancelled,
    TaskClaimed,
    TaskDeadLettered,
    TaskFailed,
    TaskReady,
    TaskReleased,
    TaskReset,
    TaskSkipped,
    TaskSucceeded,
    TaskUpstreamFailed,
)

__all__ = [
    "CommandRejected",
    "Event",
    "JobDeleted",
    "JobPaused",
    "JobProbing",
    "JobRedefined",
    "JobRegistered",
    "JobResumed",
    "JobSuspended",
    "JobUnsuspended",
    "LeaseExpired",
    "LeaseRenewed",
    "PollAnswered",
    "RetryScheduled",
    "RunBuffered",
    "RunCancelled",
    "RunEvent",
    "RunFailed",
    "RunQueued",
    "RunReopened",
    "RunScheduled",
    "RunSucceeded",
    "RunTimedOut",
    "TaskCancelled",
    "TaskClaimed",
    "TaskDeadLettered",
    "TaskFailed",
    "TaskReady",
    "TaskReleased",
    "TaskReset",
    "TaskSkipped",
    "TaskSucceeded",
    "TaskUpstreamFailed",
    "TenantSlotsAsked",
    "TenantSlotsReceived",
    "TenantSlotsReturned",
    "TickSkipped",
]

Event = (
    JobRegistered
    | JobRedefined
    | JobPaused
    | JobResumed
    | JobDeleted
    | RunScheduled
    | TickSkipped
    | TaskReady
    | TaskClaimed
    | LeaseRenewed
    | LeaseExpired
    | TaskSucceeded
    | TaskFailed
    | RetryScheduled
    | RunSucceeded
    | RunFailed
    | CommandRejected
    | RunBuffered
    | RunCancelled
    | TaskCancelled
    | TaskDeadLettered
    | TaskReleased
    | TaskSkipped
    | TaskUpstreamFailed
    | RunTimedOut
    | RunReopened
    | TaskReset
    | RunQueued
    | PollAnswered
    | JobSuspended
    | JobProbing
    | JobUnsuspended
    | TenantSlotsAsked
    | TenantSlotsReturned
    | TenantSlotsReceived
)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunEvent:
    """An event as published on ``cronlog.run-events``.

    Attributes:
        event_id: deterministic id from (causing idem_key, job_id, index); consumers dedupe by it.
        job_id: the job (also the record key).
        at: the fold's now when the event was decided, aware UTC.
        idem_key: idem_key of the command that caused it.
        index: position among the events that command produced for this job, from 0.
        event: the event itself.
    """

    event_id: str
    job_id: str
    at: datetime
    idem_key: str
    index: int
    event: Event
