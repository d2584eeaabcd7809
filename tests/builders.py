"""Pure builders of the job aggregate's tests: a spec, the events that fold into a state, the
commands sent to it, and ``given`` / ``when`` to fold and decide.

``given`` folds events with ``evolve`` (what replay does); ``when`` runs one command through
``handle`` (dedupe + decide + evolve + clock), exactly as the adapter does. Every id is derived
from ``JOB`` and ``TICK``; instants are offsets of ``T0`` (``at(minutes=5)``).

Test modules share helpers through this module (or a fixture, or a helper module), never by
importing another test module (``tests/unit/test_rings.py``).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.dag import initially_ready
from cronlog.decide import handle
from cronlog.evolve import evolve
from cronlog.ids import run_id_for_tick
from cronlog.job import JobState
from cronlog.model import JobSpec, RetryPolicy, Schedule, ScheduleKind, TaskSpec, main_task
from cronlog.vocabulary import CommandKind, FailureKind, RejectReason, RunTrigger

JOB = "job-1"
T0 = datetime(2024, 6, 10, 12, 0, tzinfo=UTC)  # a Monday, no DST anywhere near


def at(**delta: float) -> datetime:
    return T0 + timedelta(**delta)


def cron(expression: str, **kw: object) -> Schedule:
    return Schedule(ScheduleKind.CRON, expression=expression, **kw)  # type: ignore[arg-type]


SPEC = JobSpec("report", cron("*/5 * * * *"), main_task(("echo", "hi")))
RETRYING = replace(SPEC, retry_policy=RetryPolicy(max_attempts=3, backoff=timedelta(seconds=10)))
DAG = replace(SPEC, task_specs=tuple(TaskSpec(t, ("echo", "hi")) for t in ("extract", "load")))
TICK = at(minutes=5)
RUN = run_id_for_tick(JOB, TICK)
STARTED, FINISHED = at(minutes=5, seconds=2), at(minutes=5, seconds=40)


# --- given / when ----------------------------------------------------------------------------


def given(*events: ev.Event, clock: datetime = T0, job_id: str = JOB) -> JobState:
    """The state replay builds from ``events`` of ``job_id``, with the fold's clock at
    ``clock``."""
    state: JobState | None = None
    for event in events:
        state = evolve(state, job_id, event)
    assert state is not None
    return replace(state, clock=clock)


def when(
    state: JobState | None, command: cmd.Command, now: datetime, key: str = "cmd-1"
) -> tuple[JobState | None, list[ev.Event]]:
    return handle(state, cmd.Envelope(idem_key=key, job_id=JOB, command=command), now)


def registered(spec: JobSpec = SPEC, next_fire_at: datetime | None = TICK) -> ev.JobRegistered:
    return ev.JobRegistered(spec=spec, next_fire_at=next_fire_at)


def scheduled(
    tick: datetime = TICK,
    next_fire_at: datetime | None = None,
    *,
    trigger: RunTrigger = RunTrigger.SCHEDULE,
    spec: JobSpec = SPEC,
) -> ev.RunScheduled:
    nxt = next_fire_at if next_fire_at is not None else tick + timedelta(minutes=5)
    return ev.RunScheduled(
        run_id=run_id_for_tick(JOB, tick),
        scheduled_for=tick,
        trigger=trigger,
        tasks=spec.tasks,
        next_fire_at=nxt,
        ready=initially_ready(spec, spec.tasks),
    )


def ready(tick: datetime = TICK, task: str = "main", attempt: int = 1) -> ev.TaskReady:
    return ev.TaskReady(
        run_id=run_id_for_tick(JOB, tick), task=task, attempt=attempt, scheduled_for=tick
    )


def claimed(
    *,
    now: datetime = TICK,
    epoch: int = 1,
    worker: str = "w1",
    task: str = "main",
    attempt: int = 1,
    spec: JobSpec = SPEC,
    tick: datetime = TICK,
) -> ev.TaskClaimed:
    return ev.TaskClaimed(
        run_id=run_id_for_tick(JOB, tick),
        task=task,
        attempt=attempt,
        epoch=epoch,
        worker_id=worker,
        lease_expires_at=now + spec.lease_ttl,
        lease_ttl=spec.lease_ttl,
        scheduled_for=tick,
        command=spec.task_spec(task).command,
        timeout=spec.timeout,
        action=spec.task_spec(task).action(),
        grace=spec.grace,
        deadline_at=now + spec.timeout + spec.grace + spec.lease_ttl,
    )


def claim(
    worker: str = "w1", attempt: int = 1, task: str = "main", run_id: str = RUN
) -> cmd.ClaimTask:
    return cmd.ClaimTask(run_id=run_id, task=task, attempt=attempt, worker_id=worker)


def renew(epoch: int = 1, worker: str = "w1", attempt: int = 1) -> cmd.RenewLease:
    return cmd.RenewLease(run_id=RUN, task="main", attempt=attempt, epoch=epoch, worker_id=worker)


def complete(
    *,
    epoch: int = 1,
    worker: str = "w1",
    ok: bool = True,
    exit_code: int | None = 0,
    kind: FailureKind | None = None,
    task: str = "main",
    attempt: int = 1,
) -> cmd.CompleteTask:
    """``RUN``'s completion, output ``tail``, from ``STARTED`` to ``FINISHED``; ``ok=False``
    with ``exit_code`` and ``kind`` reports a failure."""
    return completed(
        RUN,
        task=task,
        attempt=attempt,
        epoch=epoch,
        worker=worker,
        at=FINISHED,
        started_at=STARTED,
        succeeded=ok,
        exit_code=exit_code,
        failure_kind=kind,
        output_tail="tail",
    )


def succeeded(
    task: str = "main", worker: str = "w1", attempt: int = 1, epoch: int = 1
) -> ev.TaskSucceeded:
    """The TaskSucceeded that ``complete(task=, worker=, attempt=, epoch=)`` decides (``RUN``)."""
    return ev.TaskSucceeded(
        run_id=RUN,
        task=task,
        attempt=attempt,
        epoch=epoch,
        worker_id=worker,
        exit_code=0,
        output_tail="tail",
        started_at=STARTED,
        finished_at=FINISHED,
    )


def completed(
    run_id: str = RUN,
    *,
    task: str = "main",
    attempt: int = 1,
    epoch: int = 1,
    worker: str = "w1",
    at: datetime = FINISHED,
    started_at: datetime | None = None,
    **fields: Any,
) -> cmd.CompleteTask:
    """The lease holder's report of a successful attempt of any run: exit 0, no output.

    Args:
        run_id, task, attempt, epoch, worker: the attempt and the lease it was granted.
        at: when it finished (aware UTC); ``started_at`` defaults to the same instant.
        fields: other ``CompleteTask`` fields (``claim_next``, ``lease_token``, ``output_tail``).
    """
    report: dict[str, Any] = {
        "succeeded": True,
        "exit_code": 0,
        "failure_kind": None,
        "output_tail": "",
        "started_at": at if started_at is None else started_at,
        "finished_at": at,
    }
    return cmd.CompleteTask(
        run_id=run_id,
        task=task,
        attempt=attempt,
        epoch=epoch,
        worker_id=worker,
        **(report | fields),
    )


def rejected(command: cmd.Command, reason: RejectReason, detail: str) -> ev.CommandRejected:
    return ev.CommandRejected(
        command=CommandKind(type(command).__name__),
        reason=reason,
        detail=detail,
        run_id=getattr(command, "run_id", None),
        task=getattr(command, "task", None),
        worker_id=getattr(command, "worker_id", None),
        epoch=getattr(command, "epoch", None),
    )


def fold(state: JobState | None, *steps: tuple[cmd.Command, datetime]) -> JobState | None:
    for i, (command, now) in enumerate(steps):
        state, _ = when(state, command, now, key=f"step-{i}")
    return state


READY = given(registered(), scheduled(), ready(), clock=TICK)
CLAIMED = given(registered(), scheduled(), ready(), claimed(), clock=TICK)
CLAIMED_RETRYING = given(
    registered(RETRYING), scheduled(spec=RETRYING), ready(), claimed(spec=RETRYING), clock=TICK
)
LEASE_END = TICK + SPEC.lease_ttl


def only_task(state: JobState | None) -> object:
    assert state is not None and len(state.runs) == 1
    return state.runs[0].tasks[0]
