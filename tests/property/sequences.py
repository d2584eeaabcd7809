"""Random command sequences for the property tests: the specs they run, the ``Driver`` that
draws and folds one sequence through ``handle`` (the next command may depend on the state), and
the trace it leaves (one ``Step`` per command).

``CRONLOG_PROPERTY_EXAMPLES`` raises the number of examples (default 100) for a thorough run.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.decide import handle
from cronlog.idem import DictMarkers
from cronlog.job import MAX_APPLIED_MARKERS, JobState
from cronlog.model import (
    CatchupPolicy,
    JobSpec,
    OverlapPolicy,
    RetryPolicy,
    Schedule,
    ScheduleKind,
    TaskSpec,
)
from cronlog.schedule import next_tick
from cronlog.tenants import PLATFORM_COMMANDS
from cronlog.vocabulary import FailureKind, Reprocess, TaskState

JOB = "job-p"
T0 = datetime(2024, 6, 10, 12, 0, tzinfo=UTC)  # June: no DST transition within reach
WORKERS = ("w1", "w2", "w3")
EXAMPLES = int(os.environ.get("CRONLOG_PROPERTY_EXAMPLES", "100"))
MAX_STEPS = 70  # stays below MAX_APPLIED_MARKERS (128) non-Tick commands: see test_decide.py

COMMON = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)


# --- specs ------------------------------------------------------------------------------------

retry_policies = st.builds(
    RetryPolicy,
    max_attempts=st.integers(1, 3),
    backoff=st.sampled_from([timedelta(0), timedelta(seconds=5), timedelta(seconds=30)]),
)


@st.composite
def cron_specs(draw: st.DrawFn) -> JobSpec:
    schedule = Schedule(
        ScheduleKind.CRON,
        expression=draw(
            st.sampled_from(
                ["* * * * *", "*/2 * * * *", "*/20 * * * * *", "*/30 * * * * *", "0 * * * *"]
            )
        ),
        timezone=draw(st.sampled_from(["UTC", "Europe/Berlin", "America/New_York"])),
        catchup=draw(st.sampled_from(CatchupPolicy)),
        catchup_window=draw(
            st.sampled_from([timedelta(minutes=2), timedelta(minutes=10), timedelta(days=1)])
        ),
        max_runs=draw(st.sampled_from([None, None, 2, 5])),
    )
    return _spec(draw, schedule)


@st.composite
def once_specs(draw: st.DrawFn) -> JobSpec:
    schedule = Schedule(
        ScheduleKind.ONCE,
        run_at=T0 + timedelta(seconds=draw(st.integers(-600, 600))),
        catchup=draw(st.sampled_from(CatchupPolicy)),
    )
    return _spec(draw, schedule)


def _spec(draw: st.DrawFn, schedule: Schedule) -> JobSpec:
    return JobSpec(
        "prop",
        schedule,
        tuple(TaskSpec(t, ("true",)) for t in draw(st.sampled_from([("main",), ("a", "b")]))),
        retry_policy=draw(retry_policies),
        lease_ttl=draw(
            st.sampled_from([timedelta(seconds=10), timedelta(seconds=60), timedelta(seconds=600)])
        ),
        overlap=draw(st.sampled_from(OverlapPolicy)),
        jitter=draw(st.sampled_from([timedelta(0), timedelta(seconds=20)])),
    )


# --- the trace --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One command folded: what came in, the state around it, what came out."""

    envelope: cmd.Envelope
    record_time: datetime
    before: JobState | None
    after: JobState | None
    events: tuple[ev.Event, ...]


def fold_log(
    log: Sequence[tuple[cmd.Envelope, datetime]], state: JobState | None = None
) -> list[Step]:
    steps = []
    for envelope, record_time in log:
        after, events = handle(state, envelope, record_time)
        steps.append(Step(envelope, record_time, state, after, tuple(events)))
        state = after
    return steps


class Driver:
    """Draws and folds one random command sequence; the next command may depend on the state.

    With a ``book`` (``cronlog.idem``) the fold dedupes by the horizon, as the scheduler does,
    and each user command carries ``issued_at`` (its first send's record time).
    """

    def __init__(
        self,
        data: st.DataObject,
        spec: JobSpec,
        kinds: Sequence[str],
        book: DictMarkers | None = None,
    ) -> None:
        self.data, self.spec, self.kinds = data, spec, kinds
        self.book = book
        self.t = T0
        self.state: JobState | None = None
        self.log: list[tuple[cmd.Envelope, datetime]] = []
        self.steps: list[Step] = []
        self.instances: list[tuple[str, str]] = []  # every (run_id, task) ever made
        self.tick_runs: dict[datetime, list[str]] = {}  # the API's view: runs per tick
        self.outcome: dict[str, str] = {}  # run_id -> succeeded / failed / cancelled
        self.n = 0

    def draw(self, strategy: st.SearchStrategy[object]) -> object:
        return self.data.draw(strategy)

    def send(
        self, command: cmd.Command, at: datetime | None = None, key: str | None = None
    ) -> None:
        self.n += 1
        at = self.t if at is None else at
        platform = isinstance(command, PLATFORM_COMMANDS) or self.book is None
        envelope = cmd.Envelope(
            idem_key=key or f"c{self.n}",
            job_id=JOB,
            command=command,
            issued_at=None if platform else at,
        )
        self.deliver(envelope, at)

    def deliver(self, envelope: cmd.Envelope, at: datetime) -> None:
        after, events = handle(self.state, envelope, at, self.book)
        self.steps.append(Step(envelope, at, self.state, after, tuple(events)))
        self.log.append((envelope, at))
        self.state = after
        for e in events:
            if isinstance(e, ev.RunScheduled):
                self.instances += [(e.run_id, task) for task in e.tasks]
            if isinstance(e, ev.RunScheduled | ev.RunBuffered):
                runs = self.tick_runs.setdefault(e.scheduled_for, [])
                runs += [] if e.run_id in runs else [e.run_id]
            elif isinstance(e, ev.RunSucceeded | ev.RunFailed | ev.RunCancelled):
                self.outcome[e.run_id] = type(e).__name__[3:].lower()

    def run(self, n_steps: int) -> None:
        self.send(cmd.RegisterJob(spec=self.spec))
        for _ in range(n_steps):
            kind = self.draw(st.sampled_from(self.kinds))
            getattr(self, f"do_{kind}")()

    # -- step kinds --

    def do_tick(self) -> None:
        self.t += timedelta(
            seconds=self.draw(  # type: ignore[arg-type]
                st.sampled_from([0, 1, 5, 10, 20, 30, 30, 45, 61, 90, 150, 400, 900])
            )
        )
        self.send(cmd.Tick(), key=f"tick@{self.t.isoformat()}")

    def do_tick_back(self) -> None:
        back = timedelta(seconds=self.draw(st.integers(1, 300)))  # type: ignore[arg-type]
        self.send(cmd.Tick(), at=self.t - back, key=f"tick-late-{self.n}")

    def do_tick_twice(self) -> None:
        self.send(cmd.Tick(), key=f"tick@{self.t.isoformat()}")
        self.send(cmd.Tick(), key=f"tick@{self.t.isoformat()}")

    def do_register(self) -> None:
        self.send(cmd.RegisterJob(spec=self.spec))

    def do_pause(self) -> None:
        self.send(cmd.PauseJob(), at=self._maybe_late())

    def do_resume(self) -> None:
        self.send(cmd.ResumeJob(catchup=bool(self.draw(st.booleans()))), at=self._maybe_late())

    def do_trigger(self) -> None:
        self.send(cmd.TriggerJob())

    def do_backfill(self) -> None:
        """A BackfillJob with the ticks the API would send
        (services/api/routes/backfill_plan.py): past
        ticks of the schedule, filtered by the runs each tick ever had."""
        reprocess = self.draw(st.sampled_from(Reprocess))
        start = self.t - timedelta(
            seconds=self.draw(  # type: ignore[operator]
                st.sampled_from([60, 300, 1200, 3600])
            )
        )
        ticks, tick = [], next_tick(self.spec.schedule, start, hash_id=JOB)
        while tick is not None and tick <= self.t and len(ticks) < 20:
            runs = self.tick_runs.get(tick, [])
            if (
                reprocess is Reprocess.ALL
                or not runs
                or (
                    reprocess is Reprocess.FAILED
                    and all(self.outcome.get(r) in ("failed", "cancelled") for r in runs)
                )
            ):
                ticks.append(tick)
            tick = next_tick(self.spec.schedule, tick, hash_id=JOB)
        if ticks:
            self.send(cmd.BackfillJob(ticks=tuple(ticks), reprocess=reprocess))  # type: ignore[arg-type]

    def do_delete(self) -> None:
        self.send(cmd.DeleteJob())

    def do_update(self) -> None:
        schedule = replace(self.spec.schedule, catchup=self.draw(st.sampled_from(CatchupPolicy)))  # type: ignore[arg-type]
        self.send(cmd.UpdateJob(spec=replace(self.spec, schedule=schedule)))

    def do_claim(self) -> None:
        target = self._target(TaskState.READY)
        if target is None:
            return
        run_id, task, attempt, _, _ = target
        attempt = self.draw(st.sampled_from([attempt, attempt, attempt + 1, 1]))  # type: ignore[assignment]
        worker = self.draw(st.sampled_from(WORKERS))
        self.send(
            cmd.ClaimTask(run_id=run_id, task=task, attempt=attempt, worker_id=worker),
            at=self._maybe_late(),
        )  # type: ignore[arg-type]

    def do_renew(self) -> None:
        target = self._target(TaskState.CLAIMED)
        if target is None:
            return
        run_id, task, attempt, epoch, worker = self._lease_args(target)
        self.send(
            cmd.RenewLease(
                run_id=run_id, task=task, attempt=attempt, epoch=epoch, worker_id=worker
            ),
            at=self._maybe_late(),
        )

    def do_complete(self) -> None:
        target = self._target(TaskState.CLAIMED)
        if target is None:
            return
        run_id, task, attempt, epoch, worker = self._lease_args(target)
        ok = bool(self.draw(st.booleans()))
        # What a worker can report (lease_expired is the fold's own verdict).
        kind = (
            None
            if ok
            else self.draw(
                st.sampled_from(
                    [None, FailureKind.NONZERO_EXIT, FailureKind.TIMEOUT, FailureKind.SPAWN_ERROR]
                )
            )
        )
        self.send(
            cmd.CompleteTask(
                run_id=run_id,
                task=task,
                attempt=attempt,
                epoch=epoch,
                worker_id=worker,
                succeeded=ok,
                exit_code=0 if ok else 1,
                failure_kind=kind,
                output_tail="tail",
                started_at=self.t,
                finished_at=self.t,
            ),  # type: ignore[arg-type]
            at=self._maybe_late(),
        )

    def do_cancel(self) -> None:
        """A CancelRun of a whole run or one task instance (live or long ended)."""
        target = self._target(TaskState.CLAIMED)
        if target is None:
            return
        task = self.draw(st.sampled_from([None, target[1]]))
        self.send(cmd.CancelRun(run_id=target[0], task=task), at=self._maybe_late())  # type: ignore[arg-type]

    def do_replay(self) -> None:
        """A ReplayTask of some task instance, as the API sends it for a dead letter."""
        if not self.instances:
            return
        run_id, task = self.draw(st.sampled_from(self.instances))  # type: ignore[misc]
        self.send(cmd.ReplayTask(run_id=run_id, task=task, scheduled_for=self.t))  # type: ignore[arg-type]

    def do_reuse(self) -> None:
        """Another command under the idem_key of an earlier one (a sender's bug)."""
        earlier = [e for e, _ in self.log if not isinstance(e.command, cmd.Tick)]
        original: cmd.Envelope = self.draw(st.sampled_from(earlier))  # type: ignore[assignment]
        command = self.draw(
            st.sampled_from(
                [cmd.PauseJob(), cmd.ResumeJob(), cmd.ResumeJob(catchup=True), cmd.TriggerJob()]
            )
        )
        self.deliver(replace(original, command=command), self._maybe_late())  # type: ignore[arg-type]

    def do_churn(self) -> None:
        """More user commands of the job than its record's window holds (pause, resume …)."""
        for i in range(MAX_APPLIED_MARKERS + 2):
            self.send(cmd.PauseJob() if i % 2 == 0 else cmd.ResumeJob())

    def do_duplicate(self) -> None:
        earlier = [(e, t) for e, t in self.log if not isinstance(e.command, cmd.Tick)]
        envelope, original_time = self.draw(st.sampled_from(earlier))  # type: ignore[misc]
        self.deliver(envelope, self.draw(st.sampled_from([original_time, self.t])))  # type: ignore[arg-type]

    # -- helpers --

    def _maybe_late(self) -> datetime:
        back = self.draw(st.sampled_from([0, 0, 0, 0, 5, 120]))
        return self.t - timedelta(seconds=back)  # type: ignore[arg-type]

    def _target(self, prefer: TaskState) -> tuple[str, str, int, int, str | None] | None:
        """A task instance: mostly a live one in state ``prefer`` (with its attempt, epoch and
        holder), sometimes any live one, else one that may have ended long ago."""
        live = [
            (r.run_id, ti.task, ti.attempt, ti.epoch, ti.worker_id, ti.state)
            for r in (self.state.runs if self.state else ())
            for ti in r.tasks
        ]
        preferred = [t[:5] for t in live if t[5] is prefer]
        pick = self.draw(st.integers(0, 9))
        if preferred and pick < 7:
            return self.draw(st.sampled_from(preferred))  # type: ignore[return-value]
        if live and pick < 9:
            return self.draw(st.sampled_from([t[:5] for t in live]))  # type: ignore[return-value]
        if self.instances:
            run_id, task = self.draw(st.sampled_from(self.instances))  # type: ignore[misc]
            return run_id, task, 1, 1, None
        return None

    def _lease_args(
        self, target: tuple[str, str, int, int, str | None]
    ) -> tuple[str, str, int, int, str]:
        run_id, task, attempt, epoch, holder = target
        epoch = self.draw(st.sampled_from([epoch, epoch, epoch, epoch - 1, epoch + 1]))  # type: ignore[assignment]
        worker = self.draw(st.sampled_from([holder or "w1", holder or "w1", *WORKERS]))
        return run_id, task, attempt, epoch, worker  # type: ignore[return-value]


# --- the mix of commands ----------------------------------------------------------------------

KINDS = (
    ["tick"] * 6
    + [
        "tick_back",
        "tick_twice",
        "register",
        "pause",
        "resume",
        "trigger",
        "backfill",
        "update",
        "duplicate",
        "duplicate",
        "reuse",
    ]
    + ["claim"] * 5
    + ["renew"] * 3
    + ["complete"] * 5
    + ["cancel", "replay"]
)
"""The kinds of command a ``Driver`` draws from, each as often as it is listed."""
