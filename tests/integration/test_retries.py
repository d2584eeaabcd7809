"""Retries against a real broker, scheduler and worker: a task failing twice then succeeding
ends succeeded after 3 attempts with gaps that follow its backoff policy (within one tick);
a non-retryable exit code is dead-lettered on its first attempt though attempts remain."""

from __future__ import annotations

from datetime import timedelta

import pytest

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.model import BackoffKind, JobSpec, RetryPolicy, Schedule, ScheduleKind, main_task
from cronlog.vocabulary import FailureKind
from tests.integration.harness import Cluster, EventLog

pytestmark = pytest.mark.broker

TICK_INTERVAL = timedelta(seconds=1)
"""The scheduler ticks every second: a retry is released by the first tick at/after retry_at."""
CLAIM_MARGIN = timedelta(seconds=1)
"""TaskReady → ready topic → worker → ClaimTask → fold: well under this on an idle box."""


def manual(command: tuple[str, ...], policy: RetryPolicy) -> JobSpec:
    return JobSpec(
        name="retries",
        schedule=Schedule(ScheduleKind.MANUAL),
        task_specs=main_task(command),
        retry_policy=policy,
    )


def test_failing_twice_then_succeeding_follows_the_linear_backoff(
    cluster: Cluster, events: EventLog
) -> None:
    policy = RetryPolicy(
        max_attempts=5, backoff=timedelta(seconds=2), kind=BackoffKind.LINEAR, jitter=0.0
    )
    cluster.scheduler()
    cluster.worker()
    cluster.send(
        "flaky",
        cmd.RegisterJob(
            spec=manual(
                ("sh", "-c", 'echo "attempt $CRONLOG_ATTEMPT"; [ "$CRONLOG_ATTEMPT" -ge 3 ]'),
                policy,
            )
        ),
    )
    cluster.send("flaky", cmd.TriggerJob())
    assert events.wait_until(lambda log: log.of_type(ev.RunSucceeded, "flaky"), 90)

    failed = events.of_type(ev.TaskFailed, "flaky")
    retries = events.of_type(ev.RetryScheduled, "flaky")
    claims = events.of_type(ev.TaskClaimed, "flaky")
    [succeeded] = events.of_type(ev.TaskSucceeded, "flaky")
    assert [e.event.attempt for e in failed] == [1, 2]
    assert all(
        e.event.failure_kind is FailureKind.NONZERO_EXIT and e.event.exit_code == 1 for e in failed
    )
    assert [(e.event.attempt, e.event.epoch) for e in claims] == [(1, 1), (2, 2), (3, 3)]
    assert succeeded.event.attempt == 3 and "attempt 3" in succeeded.event.output_tail
    # linear: the retry after attempt n waits n x 2 s, exactly (no jitter) from the failure
    expected = [timedelta(seconds=2), timedelta(seconds=4)]
    assert [r.event.retry_at - f.at for r, f in zip(retries, failed, strict=True)] == expected
    gaps = [c.at - f.at for f, c in zip(failed, claims[1:], strict=True)]
    print(
        f"\nbackoff {[d.total_seconds() for d in expected]} s; measured failure → next claim "
        f"{[round(g.total_seconds(), 3) for g in gaps]} s"
    )
    for gap, want in zip(gaps, expected, strict=True):
        assert want <= gap <= want + TICK_INTERVAL + CLAIM_MARGIN


def test_a_non_retryable_exit_code_is_dead_lettered_at_once(
    cluster: Cluster, events: EventLog
) -> None:
    policy = RetryPolicy(
        max_attempts=5, backoff=timedelta(seconds=1), non_retryable_exit_codes=(64,)
    )
    cluster.scheduler()
    cluster.worker()
    cluster.send(
        "usage", cmd.RegisterJob(spec=manual(("sh", "-c", "echo bad flag >&2; exit 64"), policy))
    )
    cluster.send("usage", cmd.TriggerJob())
    assert events.wait_until(lambda log: log.of_type(ev.RunFailed, "usage"), 60)
    [letter] = [e.event for e in events.of_type(ev.TaskDeadLettered, "usage")]
    assert (letter.attempt, letter.exit_code, letter.failure_kind) == (
        1,
        64,
        FailureKind.NONZERO_EXIT,
    )
    assert "bad flag" in letter.output_tail
    assert events.of_type(ev.RetryScheduled, "usage") == []
    assert len(events.of_type(ev.TaskClaimed, "usage")) == 1
