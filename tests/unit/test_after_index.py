"""The after relay's pure index: who is after whom, and what a run's end sends."""

from __future__ import annotations

from datetime import UTC, datetime

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.model import AfterOn, JobSpec, Schedule, ScheduleKind
from topology.after_index import AfterIndex

T = datetime(2024, 6, 10, 12, 0, tzinfo=UTC)
AFTER_X = JobSpec(
    "d", Schedule(ScheduleKind.AFTER, after_job_id="x", after_on=AfterOn.DONE), ("true",)
)
MANUAL = JobSpec("m", Schedule(ScheduleKind.MANUAL), ("true",))


def rec(job_id: str, event: ev.Event) -> ev.RunEvent:
    return ev.RunEvent("e", job_id, T, "k", 0, event)


def test_a_run_end_of_an_upstream_sends_one_command_per_downstream_job() -> None:
    index = AfterIndex()
    for job in ("d1", "d2"):
        assert index.apply(rec(job, ev.JobRegistered(AFTER_X, None))) == []
    assert (
        index.apply(rec("x", ev.RunScheduled("r1", T, ev.RunTrigger.MANUAL, ("main",), None))) == []
    )
    assert index.state()[1] == {}  # no run is remembered: memory is one entry per after job
    sent = index.apply(rec("x", ev.RunFailed("r1", T)))  # the end carries the run's tick
    ended = cmd.UpstreamRunEnded("x", "r1", T, cmd.UpstreamOutcome.FAILED, "e")
    assert sent == [
        cmd.Envelope("after:d1:r1:e", "d1", ended),
        cmd.Envelope("after:d2:r1:e", "d2", ended),
    ]


def test_redefined_or_deleted_jobs_leave_the_index_and_unknown_ticks_are_none() -> None:
    index = AfterIndex()
    index.apply(rec("d1", ev.JobRegistered(AFTER_X, None)))
    index.apply(rec("d2", ev.JobRegistered(AFTER_X, None)))
    index.apply(rec("d1", ev.JobRedefined(MANUAL, None)))
    index.apply(rec("d2", ev.JobDeleted()))
    assert index.downstream("x") == frozenset()
    index.apply(rec("d3", ev.JobRegistered(AFTER_X, None)))
    assert index.apply(rec("x", ev.RunCancelled("r9", ev.CancelReason.USER))) == [
        cmd.Envelope(
            "after:d3:r9:e",
            "d3",
            cmd.UpstreamRunEnded("x", "r9", None, cmd.UpstreamOutcome.CANCELLED, "e"),
        )
    ]
