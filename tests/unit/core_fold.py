"""One job folded through the pure core's ``handle`` (as the adapter runs it), keeping every
event: the schedule-bounds and overlap tests' world. ``every`` and ``spec`` build an interval
schedule and a one-task job; ``fired`` and ``skipped`` read ticks out of events."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.decide import handle
from cronlog.job import JobState
from cronlog.model import JobSpec, Schedule, ScheduleKind, main_task
from cronlog.vocabulary import SkipReason, TaskState
from tests.builders import completed

JOB = "job-b"
T0 = datetime(2024, 6, 10, 12, 0, tzinfo=UTC)  # a Monday


def at(**delta: float) -> datetime:
    return T0 + timedelta(**delta)


def every(seconds: float, **kw: object) -> Schedule:
    return Schedule(ScheduleKind.EVERY, interval=timedelta(seconds=seconds), **kw)  # type: ignore[arg-type]


def spec(schedule: Schedule, **kw: object) -> JobSpec:
    return JobSpec("b", schedule, main_task(("true",)), **kw)  # type: ignore[arg-type]


class Fold:
    """Folds commands through ``handle``; keeps every event with the command that caused it."""

    def __init__(self) -> None:
        self.state: JobState | None = None
        self.events: list[ev.Event] = []
        self.n = 0

    def send(self, command: cmd.Command, now: datetime) -> list[ev.Event]:
        self.n += 1
        self.state, events = handle(
            self.state, cmd.Envelope(idem_key=f"c{self.n}", job_id=JOB, command=command), now
        )
        self.events += events
        return events

    def live(self) -> JobState:
        assert self.state is not None
        return self.state

    def of(self, kind: type) -> list:
        return [e for e in self.events if isinstance(e, kind)]

    def finish_all(self, now: datetime) -> None:
        """Claim and complete every ready task (a worker that is always quick)."""
        for run in self.live().runs:
            for ti in run.tasks:
                if ti.state is TaskState.READY:
                    self.send(
                        cmd.ClaimTask(
                            run_id=run.run_id, task=ti.task, attempt=ti.attempt, worker_id="w"
                        ),
                        now,
                    )
                    epoch = self.live().run(run.run_id).task(ti.task).epoch  # type: ignore[union-attr]
                    self.send(
                        completed(
                            run.run_id,
                            task=ti.task,
                            attempt=ti.attempt,
                            epoch=epoch,
                            worker="w",
                            at=now,
                        ),
                        now,
                    )


def fired(events: list[ev.Event]) -> list[datetime]:
    return [e.scheduled_for for e in events if isinstance(e, ev.RunScheduled)]


def skipped(events: list[ev.Event]) -> list[tuple[datetime, SkipReason]]:
    return [(e.scheduled_for, e.reason) for e in events if isinstance(e, ev.TickSkipped)]
