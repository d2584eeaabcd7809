"""The worker commands: a claim, a renewal, a completion, a release, and a poll.

Each acts on one attempt's lease (``cronlog.leases``) or asks for grants
(``cronlog.dispatch``); re-exported by ``cronlog.commands``, where the ``Command`` union and
the ``Envelope`` they travel in live.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from cronlog.vocabulary import FailureKind


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimTask:
    """A worker asks for the lease on one attempt of a ready task instance.

    Attributes:
        run_id, task: the task instance.
        attempt: the attempt number the worker saw in TaskReady (1-based).
        worker_id: the claiming worker.
        lease_token: the worker's lease secret (``cronlog.leases.lease_digest``): a grant
            stores its digest, and a renewal, completion or release must present the same
            secret. "" from workers before lease tokens (then not checked).
    """

    run_id: str
    task: str
    attempt: int
    worker_id: str
    lease_token: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class RenewLease:
    """The lease holder extends its lease to the fold's now + the task's lease_ttl.

    Attributes:
        run_id, task, attempt, epoch, worker_id: the lease being renewed.
        lease_token: the worker's lease secret (``cronlog.leases.lease_digest``): a grant
            stores its digest, and a renewal, completion or release must present the same
            secret. "" from workers before lease tokens (then not checked).
    """

    run_id: str
    task: str
    attempt: int
    epoch: int
    worker_id: str
    lease_token: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class CompleteTask:
    """The lease holder reports an attempt's end.

    Attributes:
        succeeded: True when the command exited 0.
        exit_code: the process exit code; None if it never ran or was killed by a signal.
        failure_kind: why it failed (None when ``succeeded``).
        output_tail: the last few KiB of combined stdout/stderr.
        started_at, finished_at: aware UTC instants measured by the worker.
        claim_next: how many task instances this worker takes with the completion (the slot
            it frees): first those the completion readies in the same run (a DAG's next tasks),
            granted in the same decision (Temporal's eager dispatch), then the partition's
            best-ranked ready ones (docs/dispatch.md); the fold answers with PollAnswered
            (``poll_id`` = this command's idem_key). 0 (default): none, and no answer.
        lease_token: the worker's lease secret (``cronlog.leases.lease_digest``): a grant
            stores its digest, and a renewal, completion or release must present the same
            secret. "" from workers before lease tokens (then not checked).
    """

    run_id: str
    task: str
    attempt: int
    epoch: int
    worker_id: str
    succeeded: bool
    exit_code: int | None
    failure_kind: FailureKind | None
    output_tail: str
    started_at: datetime
    finished_at: datetime
    claim_next: int = 0
    lease_token: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class PollTasks:
    """A worker with free slots asks one commands partition for ready task instances.

    The poll is the claim (Temporal's "sync match"): the fold grants up to ``slots`` of the
    partition's ready task instances, best rank first (``cronlog.priority``), each as a
    TaskClaimed (a fenced lease, epoch + 1) copied to the worker's replies, then answers
    PollAnswered with how many it granted. Sent like a Tick: job_id "", no record key, an
    explicit partition (docs/dispatch.md). The fold decides it job by job, as a ``PollJob``
    for each job it looks at; a PollTasks itself never reaches ``decide``.

    Attributes:
        worker_id: the polling worker.
        slots: most task instances it takes (its free slots, 1..256).
        poll_id: names the answer; chosen by the worker, unique among its polls.
        lease_token: the worker's lease secret (``cronlog.leases.lease_digest``): a grant
            stores its digest, and a renewal, completion or release must present the same
            secret. "" from workers before lease tokens (then not checked).
    """

    worker_id: str
    slots: int
    poll_id: str
    lease_token: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class PollJob:
    """One job's share of a worker's poll: grant up to ``slots`` of its ready task instances.

    Made by the fold, never sent: answering a PollTasks (or the rest of a completion's
    ``claim_next``), the adapter decides one PollJob for each job it takes from the
    partition's ready index (``topology/fold/folder.py``), under the idem_key
    ``grant_idem_key`` of the poll's record; ``cronlog.dispatch.grant_ready`` decides it. It
    has no Avro record: an ``Addressed`` command, not an ``Envelope``'s. Its refusals and
    spans name it ``PollTasks`` (``command_kind``), the poll it serves.

    Attributes:
        worker_id: the polling worker.
        slots: most task instances this job may grant (what the poll has not been granted yet).
        lease_token: the poll's lease secret (see PollTasks).
    """

    worker_id: str
    slots: int
    lease_token: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleaseTask:
    """The lease holder gives an attempt back unfinished (a worker draining on SIGTERM).

    The fold answers TaskReleased then TaskReady for the same attempt number: the attempt is
    ready again at once, the next claim gets a new epoch, and nothing counts as a failure.
    Fenced like RenewLease: a stale epoch or a non-holder is refused.

    Attributes:
        run_id, task, attempt, epoch, worker_id: the lease being given back.
        reason: free text for the history, e.g. ``"worker draining"``.
        lease_token: the worker's lease secret (``cronlog.leases.lease_digest``): a grant
            stores its digest, and a renewal, completion or release must present the same
            secret. "" from workers before lease tokens (then not checked).
    """

    run_id: str
    task: str
    attempt: int
    epoch: int
    worker_id: str
    reason: str
    lease_token: str = ""
