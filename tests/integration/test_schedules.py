"""Issue 3 against a real broker: overlap policies with a long-running task, catch-up after a
kill -9 of the scheduler, pause/resume with and without catch-up, max_runs/end_at/exclusions,
and every TickSkipped reason on the run-events topic."""

from __future__ import annotations

import itertools
import time
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.model import (
    CatchupPolicy,
    Exclusion,
    JobSpec,
    OverlapPolicy,
    Schedule,
    ScheduleKind,
    main_task,
)
from cronlog.vocabulary import RunTrigger, SkipReason
from tests.integration.harness import Cluster, EventLog

pytestmark = pytest.mark.broker
START_TIMEOUT = 90.0


def every_job(seconds: int, command: tuple[str, ...] = ("true",), **schedule: object) -> JobSpec:
    return JobSpec(
        name=f"every {seconds}s",
        schedule=Schedule(ScheduleKind.EVERY, interval=timedelta(seconds=seconds), **schedule),  # type: ignore[arg-type]
        task_specs=main_task(command),
        max_active_runs=256,
    )


def register(cluster: Cluster, events: EventLog, job_id: str, spec: JobSpec) -> None:
    idem = cluster.send(job_id, cmd.RegisterJob(spec=spec))
    assert events.wait_until(
        lambda log: any(e.idem_key == idem for e in log.events(job_id)), START_TIMEOUT
    ), "scheduler never answered the registration"
    answer = next(e for e in events.events(job_id) if e.idem_key == idem).event
    assert isinstance(answer, ev.JobRegistered), answer


def of(events: EventLog, job_id: str, kind: type) -> list:
    return [e.event for e in events.of_type(kind, job_id)]


def decided(events: EventLog, job_id: str) -> list[datetime]:
    """Every tick decided (a run started or buffered, or a skip), in order of decision."""
    return [
        e.event.scheduled_for
        for e in events.events(job_id)
        if isinstance(e.event, ev.RunScheduled | ev.RunBuffered | ev.TickSkipped)
        and not (isinstance(e.event, ev.RunScheduled) and e.event.trigger is RunTrigger.MANUAL)
    ]


def assert_each_tick_decided_once(events: EventLog, job_id: str, step: int) -> None:
    ticks = decided(events, job_id)
    # a buffered tick is decided twice: RunBuffered, then its RunScheduled
    buffered = {b.scheduled_for for b in of(events, job_id, ev.RunBuffered)}
    once = [t for t in ticks if t not in buffered] + sorted(buffered)
    assert [t for t, n in Counter(once).items() if n > 1] == [], "a tick was decided twice"
    ordered = sorted(set(ticks))
    gaps = [(a, b) for a, b in itertools.pairwise(ordered) if b - a != timedelta(seconds=step)]
    assert gaps == [], f"ticks lost between {gaps}"


# --- overlap -----------------------------------------------------------------------------------


def test_overlap_policies_with_a_long_running_task(cluster: Cluster, events: EventLog) -> None:
    """One job per overlap policy, side by side in one cluster: a 5 s task every 2 s."""
    cluster.scheduler()
    cluster.worker(CRONLOG_SLOTS="12")
    jobs = {policy: f"overlap-{policy.value}" for policy in OverlapPolicy}
    for policy, job in jobs.items():
        spec = JobSpec(
            name=job,
            schedule=Schedule(ScheduleKind.EVERY, interval=timedelta(seconds=2)),
            task_specs=main_task(("sleep", "5")),
            overlap=policy,
            lease_ttl=timedelta(seconds=6),
        )
        register(cluster, events, job, spec)
    assert events.wait_until(
        lambda log: all(len(decided(log, job)) >= 8 for job in jobs.values()), 60
    )
    for job in jobs.values():
        cluster.send(job, cmd.PauseJob())
    assert events.wait_until(
        lambda log: all(log.of_type(ev.JobPaused, job) for job in jobs.values()), 20
    )
    events.poll(8)  # let the last runs end (and a buffered one start)
    for policy, job in jobs.items():
        _check_overlap(events, job, policy)


def _check_overlap(events: EventLog, job: str, policy: OverlapPolicy) -> None:
    started = of(events, job, ev.RunScheduled)
    skipped = Counter(s.reason for s in of(events, job, ev.TickSkipped))
    claims = {c.run_id for c in of(events, job, ev.TaskClaimed)}
    assert_each_tick_decided_once(events, job, 2)
    if policy is OverlapPolicy.ALLOW:
        assert skipped == Counter()
        assert len(claims) >= 3  # runs overlapped: a 5 s task every 2 s
    elif policy is OverlapPolicy.SKIP:
        assert skipped[SkipReason.OVERLAP] >= 3
        assert not of(events, job, ev.RunBuffered) and not of(events, job, ev.RunCancelled)
    elif policy is OverlapPolicy.BUFFER_ONE:
        buffered = of(events, job, ev.RunBuffered)
        assert buffered and skipped[SkipReason.OVERLAP] >= 1
        released = {r.run_id for r in started}
        assert {b.run_id for b in buffered[:-1]} <= released  # each started after its turn
        for b in buffered[:-1]:  # ... with its nominal tick
            assert next(r for r in started if r.run_id == b.run_id).scheduled_for == b.scheduled_for
    else:
        cancelled = of(events, job, ev.RunCancelled)
        assert cancelled and skipped == Counter()
        succeeded = {s.run_id for s in of(events, job, ev.TaskSucceeded)}
        assert succeeded.isdisjoint({c.run_id for c in cancelled}), "a cancelled run finished"
        fenced = [
            r
            for r in of(events, job, ev.CommandRejected)
            if r.run_id in {c.run_id for c in cancelled}
        ]
        assert fenced, "the worker of a cancelled run was never refused"
    if policy is not OverlapPolicy.ALLOW:
        assert len(claims) >= 2, policy
        assert max_concurrent(events, job) == 1, f"{policy}: two runs were active at once"


def max_concurrent(events: EventLog, job_id: str) -> int:
    """Most runs of the job active at once, replaying its run-events in order."""
    active: set[str] = set()
    most = 0
    for e in events.events(job_id):
        match e.event:
            case ev.RunScheduled(run_id=run_id):
                active.add(run_id)
                most = max(most, len(active))
            case (
                ev.RunSucceeded(run_id=run_id)
                | ev.RunFailed(run_id=run_id)
                | ev.RunCancelled(run_id=run_id)
            ):
                active.discard(run_id)
    return most


# --- catch-up across a scheduler kill -9 ----------------------------------------------------------


def test_catchup_policies_after_the_scheduler_was_down(cluster: Cluster, events: EventLog) -> None:
    """One job per catch-up policy in one cluster; its only scheduler is down for 8 s."""
    proc = cluster.scheduler()
    jobs = {policy: f"catchup-{policy.value}" for policy in CatchupPolicy}
    for policy, job in jobs.items():
        spec = every_job(
            1,
            catchup=policy,
            misfire_grace=timedelta(seconds=2),
            catchup_window=timedelta(minutes=10),
        )
        register(cluster, events, job, spec)
    assert events.wait_until(
        lambda log: all(len(of(log, job, ev.RunScheduled)) >= 2 for job in jobs.values()), 40
    )
    proc.kill9()
    down_at = datetime.now(UTC)
    time.sleep(8)
    cluster.scheduler()
    assert events.wait_until(
        lambda log: all(
            any(t > down_at + timedelta(seconds=20) for t in decided(log, job))
            for job in jobs.values()
        ),
        120,
    )
    for policy, job in jobs.items():
        runs = of(events, job, ev.RunScheduled)
        caught_up = [r for r in runs if r.trigger is RunTrigger.CATCHUP]
        skipped = Counter(s.reason for s in of(events, job, ev.TickSkipped))
        assert_each_tick_decided_once(events, job, 1)
        missed = len(caught_up) + skipped[SkipReason.CATCHUP_POLICY]
        assert missed >= 5, f"{policy}: the downtime did not make ticks late"
        if policy is CatchupPolicy.ALL:
            assert len(caught_up) >= 5 and skipped == Counter(), policy
        elif policy is CatchupPolicy.LATEST:
            assert len(caught_up) <= 1 and skipped[SkipReason.CATCHUP_POLICY] >= 4, policy
        else:
            assert caught_up == [] and skipped[SkipReason.CATCHUP_POLICY] >= 5, policy


# --- pause / resume -----------------------------------------------------------------------------


def test_resume_fires_paused_over_ticks_only_with_catchup(
    cluster: Cluster, events: EventLog
) -> None:
    """Two jobs paused together for 5 s; one resumed with catch-up, one without."""
    cluster.scheduler()
    jobs = {catchup: f"resume-{catchup}" for catchup in (False, True)}
    for job in jobs.values():
        spec = every_job(1, catchup=CatchupPolicy.ALL, misfire_grace=timedelta(seconds=1))
        register(cluster, events, job, spec)
    assert events.wait_until(
        lambda log: all(len(of(log, job, ev.RunScheduled)) >= 2 for job in jobs.values()), 40
    )
    for job in jobs.values():
        cluster.send(job, cmd.PauseJob())
    assert events.wait_until(
        lambda log: all(log.of_type(ev.JobPaused, job) for job in jobs.values()), 20
    )
    time.sleep(5)
    for catchup, job in jobs.items():
        cluster.send(job, cmd.ResumeJob(catchup=catchup))
    assert events.wait_until(
        lambda log: all(log.of_type(ev.JobResumed, job) for job in jobs.values()), 20
    )
    resumed = {job: events.of_type(ev.JobResumed, job)[0] for job in jobs.values()}
    assert events.wait_until(
        lambda log: all(
            sum(t > resumed[job].at for t in decided(log, job)) >= 2 for job in jobs.values()
        ),
        20,
    )
    for catchup, job in jobs.items():
        assert resumed[job].event.catchup is catchup
        paused_at = events.of_type(ev.JobPaused, job)[0].at
        paused_over = [t for t in decided(events, job) if paused_at < t <= resumed[job].at]
        if catchup:
            assert len(paused_over) >= 4
            assert_each_tick_decided_once(events, job, 1)
            late = [r for r in of(events, job, ev.RunScheduled) if r.trigger is RunTrigger.CATCHUP]
            assert len(late) >= 3  # catch-up all: fired late, marked as catch-up
        else:
            assert paused_over == []


# --- bounds and exclusions: TickSkipped reasons on the topic -----------------------------


def test_max_runs_end_at_and_exclusions_skip_with_their_reasons(
    cluster: Cluster, events: EventLog
) -> None:
    cluster.scheduler()
    now = datetime.now(UTC).replace(microsecond=0)
    window = Exclusion(
        start_time=(now + timedelta(seconds=12)).time().isoformat(),
        end_time=(now + timedelta(seconds=15)).time().isoformat(),
    )
    register(cluster, events, "limited", every_job(1, max_runs=3))
    register(cluster, events, "ending", every_job(1, end_at=now + timedelta(seconds=14)))
    register(cluster, events, "holiday", every_job(1, exclusions=(window,)))
    assert events.wait_until(
        lambda log: any(t > now + timedelta(seconds=18) for t in decided(log, "holiday")), 90
    )
    events.poll(2)
    limited = of(events, "limited", ev.RunScheduled)
    assert [r.runs_remaining for r in limited] == [2, 1, 0]
    assert [s.reason for s in of(events, "limited", ev.TickSkipped)] == [SkipReason.MAX_RUNS]
    ending = of(events, "ending", ev.TickSkipped)
    assert [(s.scheduled_for, s.reason, s.next_fire_at) for s in ending] == [
        (now + timedelta(seconds=15), SkipReason.END_AT, None)
    ]
    assert max(r.scheduled_for for r in of(events, "ending", ev.RunScheduled)) == (
        now + timedelta(seconds=14)
    )
    excluded = [s.scheduled_for for s in of(events, "holiday", ev.TickSkipped)]
    assert excluded == [now + timedelta(seconds=s) for s in (12, 13, 14)]
    assert {s.reason for s in of(events, "holiday", ev.TickSkipped)} == {SkipReason.EXCLUDED}
    assert_each_tick_decided_once(events, "holiday", 1)
