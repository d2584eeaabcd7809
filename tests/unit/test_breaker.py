"""Circuit breaking of a job (cronlog.breaker), decided by the core from the log alone: a job
failing 100 % trips within its window, queues its ticks (never drops them), half-opens after
the cool-down with one probe run, and closes on the probe's success or an operator's resume."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.decide import handle
from cronlog.job import JobState
from cronlog.model import JobSpec, OverlapPolicy, Schedule, ScheduleKind, main_task
from cronlog.vocabulary import FailureKind, QueueReason, SuspendReason, UnsuspendReason
from tests.builders import completed

JOB = "flaky"
T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
SPEC = replace(
    JobSpec("flaky", Schedule(ScheduleKind.CRON, expression="* * * * *"), main_task(("false",))),
    breaker_failures=3,
    breaker_window=timedelta(minutes=10),
    breaker_cooldown=timedelta(minutes=5),
)


class Job:
    """One job driven command by command, its events kept."""

    def __init__(self, spec: JobSpec = SPEC) -> None:
        self.state: JobState | None = None
        self.events: list[ev.Event] = []
        self.n = 0
        self.send(cmd.RegisterJob(spec=spec), T0)

    def send(self, command: cmd.Command, at: datetime) -> list[ev.Event]:
        self.n += 1
        env = cmd.Envelope(idem_key=f"k{self.n}", job_id=JOB, command=command)
        self.state, out = handle(self.state, env, at)
        self.events += out
        return out

    def run_once(self, minute: int, ok: bool) -> list[ev.Event]:
        """Tick at minute ``minute`` (+1 s), claim the run that started, complete it."""
        at = T0 + timedelta(minutes=minute, seconds=1)
        out = self.send(cmd.Tick(), at)
        started = [e for e in out if isinstance(e, ev.RunScheduled)]
        if not started:
            return out
        return out + self.finish(started[-1].run_id, at, ok)

    def finish(self, run_id: str, at: datetime, ok: bool) -> list[ev.Event]:
        claim = self.send(cmd.ClaimTask(run_id=run_id, task="main", attempt=1, worker_id="w"), at)
        (claimed,) = [e for e in claim if isinstance(e, ev.TaskClaimed)]
        done = cmd.CompleteTask(
            run_id=run_id,
            task="main",
            attempt=1,
            epoch=claimed.epoch,
            worker_id="w",
            succeeded=ok,
            exit_code=0 if ok else 1,
            failure_kind=None if ok else FailureKind.NONZERO_EXIT,
            output_tail="",
            started_at=at,
            finished_at=at + timedelta(seconds=2),
        )
        return claim + self.send(done, at + timedelta(seconds=3))


def kinds(events: list[ev.Event]) -> list[str]:
    return [type(e).__name__ for e in events]


def test_a_job_failing_every_attempt_trips_within_its_window() -> None:
    job = Job()
    job.run_once(1, ok=False)
    job.run_once(2, ok=False)
    out = job.run_once(3, ok=False)
    (suspended,) = [e for e in out if isinstance(e, ev.JobSuspended)]
    assert suspended.reason is SuspendReason.CIRCUIT_OPEN
    assert suspended.failed_attempts == 3
    assert suspended.window == timedelta(minutes=10)
    assert suspended.resume_at == T0 + timedelta(minutes=3, seconds=4) + timedelta(minutes=5)
    assert kinds(out)[-1] == "JobSuspended"  # after the failure that tripped it


def test_a_success_between_failures_keeps_the_circuit_closed() -> None:
    job = Job()
    for minute, ok in ((1, False), (2, False), (3, True), (4, False), (5, False)):
        job.run_once(minute, ok)
    assert not [e for e in job.events if isinstance(e, ev.JobSuspended)]
    assert job.state is not None and len(job.state.failures) == 2


def test_failures_older_than_the_window_do_not_count() -> None:
    job = Job(replace(SPEC, breaker_window=timedelta(minutes=2)))
    for minute in (1, 4, 7, 10):  # 3 minutes apart: never 3 within 2 minutes
        job.run_once(minute, ok=False)
    assert not [e for e in job.events if isinstance(e, ev.JobSuspended)]


def test_an_open_circuit_queues_ticks_then_half_opens_with_one_probe_that_closes_it() -> None:
    job = Job()
    for minute in (1, 2, 3):
        job.run_once(minute, ok=False)
    queued = []
    for minute in (4, 5, 6):  # ticks while open: queued, never dropped, nothing starts
        out = job.send(cmd.Tick(), T0 + timedelta(minutes=minute, seconds=1))
        assert "RunScheduled" not in kinds(out)
        queued += [e for e in out if isinstance(e, ev.RunQueued)]
    assert [q.reason for q in queued] == [QueueReason.SUSPENDED] * 3
    assert job.state is not None
    assert job.state.next_deadline() <= T0 + timedelta(minutes=8, seconds=4)  # the half-open
    out = job.send(cmd.Tick(), T0 + timedelta(minutes=8, seconds=5))  # cool-down over
    probing = [e for e in out if isinstance(e, ev.JobProbing)]
    assert [p.run_id for p in probing] == [queued[0].run_id]
    started = [e.run_id for e in out if isinstance(e, ev.RunScheduled)]
    assert started == [queued[0].run_id]  # only the probe, the rest still wait
    assert job.state is not None
    waiting = [q.run_id for q in job.state.queue]  # minutes 5 and 6, and 8 (queued just now)
    assert waiting[:2] == [q.run_id for q in queued[1:]] and len(waiting) == 3
    done = job.finish(queued[0].run_id, T0 + timedelta(minutes=8, seconds=6), ok=True)
    assert ev.JobUnsuspended(reason=UnsuspendReason.PROBE_SUCCEEDED) in done
    after = [e.run_id for e in done if isinstance(e, ev.RunScheduled)]
    assert after == waiting  # the queue drains once closed
    assert job.state is not None and job.state.suspended_until is None


def test_a_failed_probe_opens_the_circuit_again() -> None:
    job = Job()
    for minute in (1, 2, 3):
        job.run_once(minute, ok=False)
    job.send(cmd.Tick(), T0 + timedelta(minutes=4, seconds=1))
    out = job.send(cmd.Tick(), T0 + timedelta(minutes=8, seconds=5))
    (probe,) = [e.run_id for e in out if isinstance(e, ev.JobProbing)]
    at = T0 + timedelta(minutes=8, seconds=6)
    done = job.finish(probe, at, ok=False)
    (again,) = [e for e in done if isinstance(e, ev.JobSuspended)]
    assert again.reason is SuspendReason.PROBE_FAILED
    assert again.resume_at == at + timedelta(seconds=3) + SPEC.breaker_cooldown


def test_an_operator_resume_closes_the_circuit_and_starts_the_queue() -> None:
    job = Job()
    for minute in (1, 2, 3):
        job.run_once(minute, ok=False)
    out = job.send(cmd.Tick(), T0 + timedelta(minutes=4, seconds=1))
    (queued,) = [e for e in out if isinstance(e, ev.RunQueued)]
    out = job.send(cmd.ResumeJob(), T0 + timedelta(minutes=4, seconds=30))
    assert kinds(out)[:2] == ["JobUnsuspended", "RunScheduled"]
    assert out[0] == ev.JobUnsuspended(reason=UnsuspendReason.OPERATOR)
    assert [e.run_id for e in out if isinstance(e, ev.RunScheduled)] == [queued.run_id]
    again = job.send(cmd.ResumeJob(), T0 + timedelta(minutes=4, seconds=31))
    assert kinds(again) == ["CommandRejected"]  # closed and not paused: nothing to resume


def test_the_breaker_is_off_by_default() -> None:
    job = Job(replace(SPEC, breaker_failures=0))
    for minute in range(1, 8):
        job.run_once(minute, ok=False)
    assert not [e for e in job.events if isinstance(e, ev.JobSuspended)]
    assert job.state is not None and job.state.failures == ()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=12))
def test_the_circuit_opens_exactly_at_the_third_failure_in_a_row(outcomes: list[bool]) -> None:
    # window and cool-down far longer than the run: only the streak decides
    job = Job(replace(SPEC, breaker_window=timedelta(days=1), breaker_cooldown=timedelta(days=1)))
    opened_at = None
    for i, ok in enumerate(outcomes):
        out = job.run_once(i + 1, ok)
        if any(isinstance(e, ev.JobSuspended) for e in out):
            assert opened_at is None  # opens once; then runs queue and nothing ends
            opened_at = i
    streak, expected = 0, None
    for i, ok in enumerate(outcomes):
        streak = 0 if ok else streak + 1
        if streak == 3:
            expected = i
            break
    assert opened_at == expected


def test_turning_the_breaker_off_closes_an_open_circuit() -> None:
    job = Job()
    for minute in (1, 2, 3):
        job.run_once(minute, ok=False)
    job.send(cmd.Tick(), T0 + timedelta(minutes=4, seconds=1))  # one run queued
    off = replace(SPEC, breaker_failures=0)
    out = job.send(cmd.UpdateJob(spec=off), T0 + timedelta(minutes=4, seconds=10))
    assert ev.JobUnsuspended(reason=UnsuspendReason.BREAKER_OFF) in out
    assert "RunScheduled" in kinds(out)  # the queue starts
    assert job.state is not None and job.state.suspended_until is None


def test_with_nothing_queued_the_first_run_after_the_cooldown_is_the_probe() -> None:
    job = Job(replace(SPEC, max_queued_runs=0))
    for minute in (1, 2, 3):
        job.run_once(minute, ok=False)
    out = job.send(cmd.Tick(), T0 + timedelta(minutes=4, seconds=1))
    assert [e.reason for e in out if isinstance(e, ev.TickSkipped)] == ["queue_full"]
    out = job.send(cmd.Tick(), T0 + timedelta(minutes=9, seconds=1))  # cool-down over
    started = [e.run_id for e in out if isinstance(e, ev.RunScheduled)]
    assert len(started) == 1
    assert ev.JobProbing(run_id=started[0]) in out
    done = job.finish(started[0], T0 + timedelta(minutes=9, seconds=2), ok=True)
    assert ev.JobUnsuspended(reason=UnsuspendReason.PROBE_SUCCEEDED) in done


def test_a_half_open_probe_waits_for_a_free_slot_under_max_active_runs() -> None:
    # found by review: the probe started beside a run still active under max_active_runs 1
    job = Job(replace(SPEC, max_active_runs=1, breaker_failures=1, lease_ttl=timedelta(hours=2)))
    at = T0 + timedelta(minutes=1, seconds=1)
    out = job.send(cmd.Tick(), at)
    (first,) = [e.run_id for e in out if isinstance(e, ev.RunScheduled)]
    claim = job.send(cmd.ClaimTask(run_id=first, task="main", attempt=1, worker_id="w"), at)
    (claimed,) = [e for e in claim if isinstance(e, ev.TaskClaimed)]
    job.state = replace(job.state, failures=(at,))  # type: ignore[arg-type]
    out = job.send(cmd.Tick(), T0 + timedelta(minutes=2, seconds=1))  # trips; the tick queues
    assert "JobSuspended" in kinds(out) or "RunQueued" in kinds(out)
    out = job.send(cmd.Tick(), T0 + timedelta(minutes=9))  # cool-down over, the run still on
    assert "JobProbing" not in kinds(out)
    assert job.state is not None and len(job.state.runs) == 1
    done = completed(first, epoch=claimed.epoch, worker="w", at=at)
    out = job.send(done, T0 + timedelta(minutes=9, seconds=1))
    assert "JobProbing" in kinds(out)  # the slot freed: now the probe starts


def test_an_open_circuit_does_not_let_cancel_previous_cancel_the_probe() -> None:
    # found by review: two ticks in one half-open Tick started the probe and cancelled it at
    # once (the circuit then stayed open for good), and a later tick cancelled a running
    # probe, counted as a failed probe
    job = Job(replace(SPEC, overlap=OverlapPolicy.CANCEL_PREVIOUS, max_queued_runs=0))
    for minute in (1, 2, 3):
        job.run_once(minute, ok=False)
    out = job.send(cmd.Tick(), T0 + timedelta(minutes=9, seconds=1))  # ticks 8 and 9 due
    probes = [e.run_id for e in out if isinstance(e, ev.JobProbing)]
    assert len(probes) == 1 and "RunCancelled" not in kinds(out)
    assert job.state is not None and job.state.run(probes[0]) is not None  # a live run
    out = job.send(cmd.Tick(), T0 + timedelta(minutes=10, seconds=1))
    assert "RunCancelled" not in kinds(out) and "JobSuspended" not in kinds(out)
    assert [e.reason for e in out if isinstance(e, ev.TickSkipped)] == ["queue_full"]
