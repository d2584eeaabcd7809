"""The job aggregate's state: its runs, task instances, queue and dedupe markers.

``cronlog.evolve`` applies events to it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from cronlog.ids import idem_marker
from cronlog.model import JobSpec
from cronlog.priority import rank
from cronlog.tenants import DEFAULT_TENANT
from cronlog.vocabulary import (
    OFF_SCHEDULE_TRIGGERS,
    WAITING_TASK_STATES,
    JobStatus,
    RunTrigger,
    TaskState,
)

MAX_APPLIED_MARKERS = 128
"""How many recent idem_keys of user commands (not Ticks, not worker commands) a job record
remembers (as ``idem_marker`` digests), each with its command's digest."""
MAX_RENEWAL_MARKERS = 64
"""How many recent idem_keys of worker commands (claim, renew, complete) a job record
remembers (as ``idem_marker`` digests; kept apart: they are frequent and would push out the
user commands' markers)."""


@dataclass(frozen=True, slots=True)
class TaskInstance:
    """One task of one active run.

    Attributes:
        task: task name.
        state: see TaskState.
        attempt: current attempt number, 1-based.
        epoch: fencing token; bumps on every (re)assignment; 0 before the first claim.
        worker_id: the lease holder while CLAIMED.
        lease_expires_at: aware UTC instant the lease lapses, while CLAIMED.
        retry_at: aware UTC instant the next attempt is released, while RETRY_WAIT or DELAYED.
        deadline_at: the hard deadline of the current claim (TaskClaimed.deadline_at), while
            CLAIMED; None for claims decided before deadlines existed.
        first_attempt: see below.
    """

    task: str
    state: TaskState
    attempt: int = 1
    epoch: int = 0
    worker_id: str | None = None
    lease_expires_at: datetime | None = None
    retry_at: datetime | None = None
    deadline_at: datetime | None = None
    first_attempt: int = 1
    """The first attempt of the current series (a RerunTask starts a new one); retries count
    from it toward max_attempts."""
    lease_expiries: int = 0
    """Attempts of the current series whose lease lapsed (a worker that crashed or hung): they
    were given back, not failed, and do not count toward max_attempts; past the job's
    ``max_lease_expiries`` the task is dead-lettered (kind ``lease_expired``)."""
    lease_token_digest: str = ""
    """The current lease's ``TaskClaimed.lease_token_digest`` ("" when none)."""


@dataclass(frozen=True, slots=True)
class Run:
    """An active (not yet terminal) run; terminal runs leave the record."""

    run_id: str
    scheduled_for: datetime
    trigger: RunTrigger
    tasks: tuple[TaskInstance, ...]
    timeout_at: datetime | None = None
    """The run timeout as an instant (RunScheduled.timeout_at), or None."""
    created_at: datetime | None = None
    """A backfill or replay run's creation (RunScheduled.created_at), or None."""

    @property
    def waiting_since(self) -> datetime:
        """Return where the run's priority rank starts (``cronlog.priority``).

        A backfill or replay run's creation, else its tick.
        """
        return self.created_at if self.created_at is not None else self.scheduled_for

    def task(self, name: str) -> TaskInstance | None:
        """Return the task instance named ``name``, or None."""
        return next((t for t in self.tasks if t.task == name), None)


@dataclass(frozen=True, slots=True)
class Buffered:
    """The one tick a ``buffer_one`` job keeps while a run is active (from RunBuffered)."""

    run_id: str
    scheduled_for: datetime
    trigger: RunTrigger


@dataclass(frozen=True, slots=True)
class Queued:
    """A run waiting for a free slot under ``max_active_runs`` (from RunQueued).

    Compact: it becomes a Run when it starts.
    """

    run_id: str
    scheduled_for: datetime
    trigger: RunTrigger
    upstream_job_id: str | None = None
    upstream_run_id: str | None = None


@dataclass(frozen=True, slots=True)
class JobState:
    """Everything decisions about one job need; one table record keyed by job_id.

    Attributes:
        job_id: the job.
        spec: the current definition.
        status: active, paused or deleted.
        clock: the fold's now at the last command applied (aware UTC); never moves back.
        next_fire_at: the next tick to fire (aware UTC), None when the schedule has no more.
        runs: active runs, oldest first.
        applied: the markers (``cronlog.ids.idem_marker``: a fixed-size digest of the
            idem_key, so long keys cannot grow the record) of the most recent applied user
            commands (not Ticks, not worker commands), oldest first. Only ``with_applied``
            adds to it; ``has_applied`` and ``applied_digest`` take the idem_key itself.
        applied_digests: the ``command_digest`` of each of those commands (a re-use of the key
            by another command is refused), aligned with the *end* of ``applied``: shorter
            when the record was written before digests existed, whose older markers have
            none (no conflict check for them). Only ``with_applied`` adds to both.
        renewals: the markers of the most recent applied worker commands (ClaimTask,
            RenewLease, CompleteTask, ReleaseTask; ``with_renewal``), oldest first, without
            command digests (no
            conflict check): workers derive their keys from the lease they act on (run, task,
            epoch), and the epoch fences a stale command whatever its key.
        incarnation: registrations of this job_id after a delete (0 for the first); part of
            every schedule run_id so a re-registered job never reuses a deleted one's runs.
        runs_fired: runs the schedule fired (or buffered) since registration; manual runs
            do not count. ``max_runs`` bounds it.
        buffered: the tick a ``buffer_one`` job holds until its active runs end, or None.
        queue: runs waiting for a slot under ``max_active_runs``, in the order they were
            queued (tick order); at most ``max_queued_runs``.
        failures: when the attempts that failed since the last success ended (the last
            ``breaker_failures`` of them; empty while the breaker is off): ``cronlog.breaker``.
        suspended_until: None while the job's circuit is closed; else when it half-opens.
        probe_run: the probe run of a half-open circuit, or None.
        slots_held: tenant slots the ledger gave the job and it has not returned: one per
            claimed task instance, the rest for ready ones (``cronlog.slots``; always 0 for
            the default tenant).
        slots_asked: tenant slots asked for and not yet given.
    """

    job_id: str
    spec: JobSpec
    status: JobStatus
    clock: datetime
    next_fire_at: datetime | None = None
    runs: tuple[Run, ...] = ()
    applied: tuple[str, ...] = ()
    applied_digests: tuple[str, ...] = ()
    renewals: tuple[str, ...] = ()
    runs_fired: int = 0
    incarnation: int = 0
    buffered: Buffered | None = None
    queue: tuple[Queued, ...] = ()
    failures: tuple[datetime, ...] = ()
    suspended_until: datetime | None = None
    probe_run: str | None = None
    slots_held: int = 0
    slots_asked: int = 0

    def runs_remaining(self) -> int | None:
        """Return how many runs the schedule may still fire, or None when unbounded."""
        limit = self.spec.schedule.max_runs
        return None if limit is None else max(0, limit - self.runs_fired)

    def has_applied(self, idem_key: str) -> bool:
        """Return whether a command with ``idem_key`` was applied recently."""
        marker = idem_marker(idem_key)
        return marker in self.applied or marker in self.renewals

    def applied_digest(self, idem_key: str) -> str | None:
        """Return the digest of the user command applied with ``idem_key``.

        None when there is no such marker, or it has no digest (written before digests).
        """
        marker = idem_marker(idem_key)
        for i in range(len(self.applied) - 1, -1, -1):  # the newest marker of the key
            if self.applied[i] == marker:
                j = i - (len(self.applied) - len(self.applied_digests))
                return self.applied_digests[j] if j >= 0 else None
        return None

    def with_applied(self, idem_key: str, digest: str) -> JobState:
        """Return the state with a user command's marker added (the oldest drop out)."""
        return replace(
            self,
            applied=(*self.applied, idem_marker(idem_key))[-MAX_APPLIED_MARKERS:],
            applied_digests=(*self.applied_digests, digest)[-MAX_APPLIED_MARKERS:],
        )

    def with_renewal(self, idem_key: str) -> JobState:
        """Return the state with a worker command's marker added (the oldest drop out)."""
        return replace(
            self, renewals=(*self.renewals, idem_marker(idem_key))[-MAX_RENEWAL_MARKERS:]
        )

    def run(self, run_id: str) -> Run | None:
        """Return the active run ``run_id``, or None."""
        return next((r for r in self.runs if r.run_id == run_id), None)

    def is_queued(self, run_id: str) -> bool:
        """Return whether ``run_id`` waits in the queue."""
        return any(q.run_id == run_id for q in self.queue)

    def active_runs(self) -> int:
        """Return how many active runs count toward ``max_active_runs``.

        Backfill and replay runs do not (docs/schedules.md, "Backfill").
        """
        return sum(r.trigger not in OFF_SCHEDULE_TRIGGERS for r in self.runs)

    def ready_rank(self) -> datetime | None:
        """Return the smallest rank (``cronlog.priority.rank``) of a grantable task instance.

        That is the job's place in its partition's ready index (docs/dispatch.md): for class
        0 tasks, when the oldest run with one was scheduled. None when no task instance is
        ready.
        """
        ready, spec = TaskState.READY, self.spec
        if spec.tenant != DEFAULT_TENANT:  # a ledger tenant's job (cronlog.slots)
            states = [t.state for r in self.runs for t in r.tasks]
            claimed, waiting = states.count(TaskState.CLAIMED), states.count(ready)
            if self.slots_held <= claimed and waiting <= self.slots_asked:
                return None  # no free tenant slot, and every ready instance asked for one
            # (ready instances never asked for: a record from before the ledger; a poll's
            # decision asks for them)
        if spec.priority == 0 and not any(t.priority for t in spec.task_specs):
            return min(  # every task class 0: the rank is the run's own (no per-task look-up)
                (r.waiting_since for r in self.runs if any(t.state is ready for t in r.tasks)),
                default=None,
            )
        return min(
            (
                rank(spec, r.waiting_since, t.task)
                for r in self.runs
                for t in r.tasks
                if t.state is ready
            ),
            default=None,
        )

    def next_deadline(self) -> datetime | None:
        """Return the earliest instant a Tick has work for this job, or None.

        That is the next tick (while active), a retry or jitter release, or a lease expiry.
        """
        times: list[datetime] = []
        if self.status is JobStatus.ACTIVE and self.next_fire_at is not None:
            times.append(self.next_fire_at)
        if self.suspended_until is not None and self.probe_run is None and self.queue:
            times.append(self.suspended_until)  # the half-open: the probe starts
        for run in self.runs:
            if run.timeout_at is not None:
                times.append(run.timeout_at)
            for ti in run.tasks:
                if ti.state is TaskState.CLAIMED and ti.lease_expires_at is not None:
                    times.append(ti.lease_expires_at)
                    if ti.deadline_at is not None:
                        times.append(ti.deadline_at)
                elif ti.state in WAITING_TASK_STATES and ti.retry_at is not None:
                    times.append(ti.retry_at)
        return min(times, default=None)
