"""One job folded by the pure core, every command's events applied to a read model with the
ids the fold adapter gives them: what the fold would publish, without Kafka (the queued-runs
and idempotency tests of the API)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.decide import handle
from cronlog.dedupe import event_key
from cronlog.idem import DictMarkers
from cronlog.ids import event_id
from cronlog.job import JobState
from cronlog.model import JobSpec, Schedule, ScheduleKind, main_task
from services.api.readmodel.projection import apply
from services.api.readmodel.reader import ReadModel
from services.api.readmodel.store import Batch

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
JOB = "busy"
SPEC = replace(
    JobSpec("busy", Schedule(ScheduleKind.CRON, "* * * * *"), main_task(("sleep", "600"))),
    max_active_runs=1,
    max_queued_runs=2,
)


class Fold:
    """One job folded by the pure core; every command's events are applied to ``rm``."""

    def __init__(self, rm: ReadModel, spec: JobSpec = SPEC, job_id: str = JOB) -> None:
        self.rm, self.job_id = rm, job_id
        self.state: JobState | None = None
        self.book = DictMarkers()
        self.send("reg", cmd.RegisterJob(spec=spec), T0 - timedelta(seconds=30))

    def send(
        self, idem_key: str, command: cmd.Command, at: datetime, issued_at: datetime | None = None
    ) -> list[ev.Event]:
        env = cmd.Envelope(
            idem_key=idem_key, job_id=self.job_id, command=command, issued_at=issued_at
        )
        self.state, events = handle(self.state, env, at, self.book)
        now = self.state.clock if self.state is not None else at
        batch = Batch(self.rm.store)
        for i, event in enumerate(events):
            record = ev.RunEvent(
                event_id=event_id(event_key(env, event, now), self.job_id, i),
                job_id=self.job_id,
                at=at,
                idem_key=idem_key,
                index=i,
                event=event,
            )
            assert apply(batch, record)
        batch.commit()
        return events

    def tick(self, minutes: int) -> list[ev.Event]:
        at = T0 + timedelta(minutes=minutes, seconds=1)
        return self.send(f"tick-{minutes}", cmd.Tick(), at)
