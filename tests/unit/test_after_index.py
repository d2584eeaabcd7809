"""The after relay's pure index: who is after whom, and what a run's end sends."""

from __future__ import annotations

from datetime import UTC, datetime

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.after_index import AfterIndex
from cronlog.model import AfterOn, JobSpec, Schedule, ScheduleKind, main_task
from cronlog.vocabulary import CancelReason, RunTrigger, UpstreamOutcome

T = datetime(2024, 6, 10, 12, 0, tzinfo=UTC)
AFTER_X = JobSpec(
    "d", Schedule(ScheduleKind.AFTER, after_job_id="x", after_on=AfterOn.DONE), main_task(("true",))
)
MANUAL = JobSpec("m", Schedule(ScheduleKind.MANUAL), main_task(("true",)))


def rec(job_id: str, event: ev.Event) -> ev.RunEvent:
    return ev.RunEvent(event_id="e", job_id=job_id, at=T, idem_key="k", index=0, event=event)


def test_a_run_end_of_an_upstream_sends_one_command_per_downstream_job() -> None:
    index = AfterIndex()
    for job in ("d1", "d2"):
        assert index.apply(rec(job, ev.JobRegistered(spec=AFTER_X, next_fire_at=None))) == []
    assert (
        index.apply(
            rec(
                "x",
                ev.RunScheduled(
                    run_id="r1",
                    scheduled_for=T,
                    trigger=RunTrigger.MANUAL,
                    tasks=("main",),
                    next_fire_at=None,
                ),
            )
        )
        == []
    )
    assert index.state()[1] == {}  # no run is remembered: memory is one entry per after job
    sent = index.apply(
        rec("x", ev.RunFailed(run_id="r1", scheduled_for=T))
    )  # the end carries the run's tick
    ended = cmd.UpstreamRunEnded(
        upstream_job_id="x",
        upstream_run_id="r1",
        upstream_scheduled_for=T,
        outcome=UpstreamOutcome.FAILED,
        upstream_event_id="e",
    )
    assert sent == [
        cmd.Envelope(idem_key="after:d1:r1:e", job_id="d1", command=ended),
        cmd.Envelope(idem_key="after:d2:r1:e", job_id="d2", command=ended),
    ]


def test_redefined_or_deleted_jobs_leave_the_index_and_unknown_ticks_are_none() -> None:
    index = AfterIndex()
    index.apply(rec("d1", ev.JobRegistered(spec=AFTER_X, next_fire_at=None)))
    index.apply(rec("d2", ev.JobRegistered(spec=AFTER_X, next_fire_at=None)))
    index.apply(rec("d1", ev.JobRedefined(spec=MANUAL, next_fire_at=None)))
    index.apply(rec("d2", ev.JobDeleted()))
    assert index.downstream("x") == frozenset()
    index.apply(rec("d3", ev.JobRegistered(spec=AFTER_X, next_fire_at=None)))
    assert index.apply(rec("x", ev.RunCancelled(run_id="r9", reason=CancelReason.USER))) == [
        cmd.Envelope(
            idem_key="after:d3:r9:e",
            job_id="d3",
            command=cmd.UpstreamRunEnded(
                upstream_job_id="x",
                upstream_run_id="r9",
                upstream_scheduled_for=None,
                outcome=UpstreamOutcome.CANCELLED,
                upstream_event_id="e",
            ),
        )
    ]


def test_a_run_end_is_wanted_only_from_an_upstream_or_while_old_ticks_are_remembered() -> None:
    index = AfterIndex()
    assert not index.wants_end("x")
    index.apply(rec("d", ev.JobRegistered(spec=AFTER_X, next_fire_at=None)))
    assert index.wants_end("x")
    assert not index.wants_end("d")
    restored = AfterIndex.restored({}, {"x:run": T})
    assert restored.wants_end("anything")
