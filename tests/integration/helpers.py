"""Small builders shared by the integration tests."""

from __future__ import annotations

from datetime import datetime, timedelta

from cronlog.model import CatchupPolicy, JobSpec, RetryPolicy, Schedule, ScheduleKind


def cron_job(expr: str, command: tuple[str, ...] = ("true",), *, tz: str = "UTC",
             catchup: CatchupPolicy = CatchupPolicy.LATEST, max_attempts: int = 1,
             max_active_runs: int = 256) -> JobSpec:
    """A cron job spec. Fold-only tests run no worker, so runs stay active: the cap is high."""
    return JobSpec(name=f"cron {expr}", schedule=Schedule(ScheduleKind.CRON, expr, tz,
                                                          catchup=catchup),
                   command=command, retry_policy=RetryPolicy(max_attempts=max_attempts,
                                                             backoff=timedelta(seconds=1)),
                   max_active_runs=max_active_runs)


def once_job(run_at: datetime, command: tuple[str, ...] = ("true",)) -> JobSpec:
    """A one-off job spec."""
    return JobSpec(name="once", schedule=Schedule(ScheduleKind.ONCE, run_at=run_at),
                   command=command)


def whole_seconds(start: datetime, end: datetime, step: int = 1) -> list[datetime]:
    """Every instant in [start, end] on a multiple of ``step`` seconds of the minute."""
    t = start.replace(microsecond=0)
    if t < start:
        t += timedelta(seconds=1)
    out = []
    while t <= end:
        if t.second % step == 0:
            out.append(t)
        t += timedelta(seconds=1)
    return out
