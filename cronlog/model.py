"""The job definition: schedule, tasks, policies. Frozen dataclasses; validated by the core.

``JobSpec`` and its one-task helper are here; the schedule's types are in
``cronlog.schedule_spec`` and the tasks' in ``cronlog.task_spec``, both re-exported, so every
type of a definition is importable from ``cronlog.model``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import timedelta

from cronlog.schedule_spec import (
    AfterOn,
    CatchupPolicy,
    DstGapPolicy,
    DstOverlapPolicy,
    Exclusion,
    OverlapPolicy,
    Schedule,
    ScheduleKind,
)
from cronlog.task_spec import (
    BackoffKind,
    HttpHeader,
    HttpTask,
    Isolation,
    RetryPolicy,
    TaskAction,
    TaskKind,
    TaskSpec,
    TriggerRule,
)

__all__ = [
    "MAIN_TASK",
    "AfterOn",
    "BackoffKind",
    "CatchupPolicy",
    "DstGapPolicy",
    "DstOverlapPolicy",
    "Exclusion",
    "HttpHeader",
    "HttpTask",
    "Isolation",
    "JobSpec",
    "OverlapPolicy",
    "RetryPolicy",
    "Schedule",
    "ScheduleKind",
    "TaskAction",
    "TaskKind",
    "TaskSpec",
    "TriggerRule",
    "main_task",
]

MAIN_TASK = "main"
"""The name of a one-task job's task (the API's and YAML's job-level ``command`` form)."""


def main_task(
    command: tuple[str, ...] = (),
    *,
    kind: TaskKind = TaskKind.EXEC,
    shell: str | None = None,
    callable: str | None = None,
    http: HttpTask | None = None,
    isolation: Isolation = Isolation.PROCESS,
) -> tuple[TaskSpec, ...]:
    """Return the ``task_specs`` of a one-task job: one TaskSpec named ``main``.

    Args:
        command: its argv (``kind=exec``); empty for the other kinds.
        kind: what it runs (TaskKind). Default ``exec``.
        shell: the command string of a ``shell`` task.
        callable: ``module:function`` of a ``python`` task.
        http: the request of an ``http`` task.
        isolation: where a ``python`` call runs. Default ``process``.

    Returns:
        A 1-tuple, for ``JobSpec(task_specs=...)``; the rest of the task's settings
        inherit the job's.
    """
    return (TaskSpec(MAIN_TASK, command, kind, shell, callable, http, isolation=isolation),)


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A job's definition as registered: a schedule, a DAG of one or more tasks, policies.

    Every job has its tasks in ``task_specs``; a one-task job has one, named ``main``
    (``main_task``). Definitions written before this one shape (job-level ``command``,
    ``kind``, ... and no ``task_specs``) are turned into it where they are read
    (``cronlog.job_level``).

    Attributes:
        name: human name; free text, 1..200 characters.
        schedule: when it fires.
        task_specs: the job's tasks, in definition order (``tasks`` lists their names); at
            least one.
        timeout: the worker sends SIGTERM to the task's process group after this long; a
            task's own ``timeout`` overrides it. Default 1 hour.
        grace: then SIGKILL after this much longer. Default 10 s (Kubernetes'
            terminationGracePeriodSeconds is 30 s; tasks here are expected to stop faster).
        retry_policy: retries of failed attempts; a task's own overrides it.
        lease_ttl: how long a claim holds without renewal; a task's own overrides it.
            Default 60 s.
        max_active_runs: most runs active at once; a tick that would exceed it is queued
            (RunQueued) and started, in tick order, when a run ends (Airflow queues a DAG
            run at ``max_active_runs``). Default 16, as Airflow's ``max_active_runs_per_dag``.
            It also bounds the job's table record.
        overlap: what a tick does while an earlier run is active. Default ``allow``.
        jitter: each scheduled run's release (TaskReady) is delayed by a deterministic offset
            in [0, jitter) hashed from (job_id, scheduled_for); ``scheduled_for`` stays the
            nominal tick. Default 0 (no delay).
        max_active_tasks: most task instances of one run ready or running at once; others
            wait (pending) though their trigger rule is met. Default 16, as Airflow's.
        run_timeout: a run still going this long after it was scheduled is stopped: every
            task not ended is cancelled (RunTimedOut) and the run fails (Airflow's
            ``dagrun_timeout``). None (default): no limit.
        max_lease_expiries: how often a task instance's lease may lapse (its worker crashed
            or hung) and the attempt be given back before the task is dead-lettered as
            ``lease_expired``; lapses never spend the retry budget. Default 3.
        max_queued_runs: most runs kept queued while ``max_active_runs`` are active; a tick
            past it is skipped (TickSkipped ``queue_full``). Default 100.
        tenant: the team that owns the job (``cronlog.tenants``); fixed at registration.
            Default ``"default"``, the tenant of single-team use.
        priority: the priority class of its tasks, -9..9, higher starts first under backlog
            (``cronlog.priority``); a task's own overrides it. Default 0.
        priority_aging: a waiting task counts as one class higher per this much waiting, so
            nothing starves (``cronlog.priority``). Default 5 minutes.
        breaker_failures: the job's circuit opens (``cronlog.breaker``) when this many
            attempts failed within ``breaker_window`` with no success between; 0 (default)
            turns the breaker off.
        breaker_window: see ``breaker_failures``. Default 10 minutes.
        breaker_cooldown: an open circuit half-opens (one probe run) this long after it
            opened. Default 5 minutes.
        tags: short labels for people and alerts (``critical`` marks a job whose missed
            tick pages: docs/metrics.md); each ``TAG_PATTERN`` of ``cronlog.validation``, at
            most 16, no duplicates, order kept. Default none.
    """

    name: str
    schedule: Schedule
    task_specs: tuple[TaskSpec, ...]
    timeout: timedelta = timedelta(hours=1)
    grace: timedelta = timedelta(seconds=10)
    retry_policy: RetryPolicy = field(default_factory=RetryPolicy)
    lease_ttl: timedelta = timedelta(seconds=60)
    max_active_runs: int = 16
    overlap: OverlapPolicy = OverlapPolicy.ALLOW
    jitter: timedelta = timedelta(0)
    max_active_tasks: int = 16
    run_timeout: timedelta | None = None
    max_lease_expiries: int = 3
    max_queued_runs: int = 100
    tenant: str = "default"
    priority: int = 0
    priority_aging: timedelta = timedelta(minutes=5)
    breaker_failures: int = 0
    breaker_window: timedelta = timedelta(minutes=10)
    breaker_cooldown: timedelta = timedelta(minutes=5)
    tags: tuple[str, ...] = ()

    @property
    def tasks(self) -> tuple[str, ...]:
        """The task names, in definition order (``("main",)`` for a one-task job)."""
        return tuple(t.name for t in self.task_specs)

    def task_spec(self, name: str) -> TaskSpec:
        """Return task ``name`` with every inherited setting filled in from the job.

        An unknown name (a run started before a redefinition dropped the task; decide never
        asks for one of a live task instance) gets an empty exec task with no command.
        """
        found = next((t for t in self.task_specs if t.name == name), None)
        if found is None:
            found = TaskSpec(name)
        return replace(
            found,
            retry_policy=found.retry_policy or self.retry_policy,
            timeout=found.timeout if found.timeout is not None else self.timeout,
            lease_ttl=(found.lease_ttl if found.lease_ttl is not None else self.lease_ttl),
        )
