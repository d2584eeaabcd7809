"""Retry policy kinds and non-retryable failures, ReleaseTask (drain), the fold's hard deadline."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.model import BackoffKind, RetryPolicy
from cronlog.retry import backoff_delay
from cronlog.vocabulary import FailureKind, RejectReason, TaskState
from tests.builders import (
    CLAIMED,
    FINISHED,
    JOB,
    RUN,
    SPEC,
    STARTED,
    TICK,
    claim,
    claimed,
    complete,
    given,
    only_task,
    ready,
    registered,
    rejected,
    renew,
    scheduled,
    when,
)

S = timedelta(seconds=1)

# --- backoff kinds ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "delays_s"),
    [
        (BackoffKind.CONSTANT, [5, 5, 5, 5, 5]),
        (BackoffKind.LINEAR, [5, 10, 15, 20, 25]),
        (BackoffKind.EXPONENTIAL, [5, 10, 20, 40, 60]),  # capped at max_backoff 60 s
    ],
)
def test_each_backoff_kind_gives_its_delays_capped(kind: BackoffKind, delays_s: list[int]) -> None:
    policy = RetryPolicy(max_attempts=10, backoff=5 * S, max_backoff=60 * S, kind=kind, jitter=0)
    assert [backoff_delay(policy, n) for n in range(1, 6)] == [d * S for d in delays_s]


def test_jitter_shortens_by_at_most_its_fraction() -> None:
    policy = RetryPolicy(max_attempts=10, backoff=10 * S, kind=BackoffKind.CONSTANT, jitter=0.5)
    assert backoff_delay(policy, 1, jitter=0.0) == 10 * S
    assert backoff_delay(policy, 1, jitter=0.999) == timedelta(seconds=10 * (1 - 0.5 * 0.999))
    assert backoff_delay(replace(policy, jitter=0.0), 1, jitter=0.999) == 10 * S


def _claimed_with(policy: RetryPolicy) -> object:
    spec = replace(SPEC, retry_policy=policy)
    return given(registered(spec), scheduled(spec=spec), ready(), claimed(spec=spec), clock=TICK)


@pytest.mark.parametrize(
    ("policy", "exit_code", "kind", "retried"),
    [
        (RetryPolicy(max_attempts=3), 1, FailureKind.NONZERO_EXIT, True),
        (
            RetryPolicy(max_attempts=3, non_retryable_exit_codes=(2, 64)),
            2,
            FailureKind.NONZERO_EXIT,
            False,
        ),
        (
            RetryPolicy(max_attempts=3, non_retryable_exit_codes=(2, 64)),
            3,
            FailureKind.NONZERO_EXIT,
            True,
        ),
        (
            RetryPolicy(max_attempts=3, retry_on=(FailureKind.TIMEOUT,)),
            1,
            FailureKind.NONZERO_EXIT,
            False,
        ),
        (
            RetryPolicy(max_attempts=3, retry_on=(FailureKind.TIMEOUT,)),
            None,
            FailureKind.TIMEOUT,
            True,
        ),
        # a non-retryable exit code only concerns nonzero_exit failures
        (
            RetryPolicy(max_attempts=3, non_retryable_exit_codes=(2,)),
            2,
            FailureKind.SPAWN_ERROR,
            True,
        ),
    ],
)
def test_only_retryable_failures_are_retried(
    policy: RetryPolicy, exit_code: int | None, kind: FailureKind, retried: bool
) -> None:
    state = _claimed_with(policy)
    after, events = when(state, complete(ok=False, exit_code=exit_code, kind=kind), FINISHED)  # type: ignore[arg-type]
    failed = ev.TaskFailed(
        run_id=RUN,
        task="main",
        attempt=1,
        epoch=1,
        worker_id="w1",
        failure_kind=kind,
        exit_code=exit_code,
        output_tail="tail",
        started_at=STARTED,
        finished_at=FINISHED,
    )
    assert events[0] == failed
    if retried:
        assert [type(e) for e in events] == [ev.TaskFailed, ev.RetryScheduled]
        assert only_task(after).state is TaskState.RETRY_WAIT  # type: ignore[attr-defined]
    else:  # dead-lettered on the first attempt though attempts remain
        assert events[1:] == [
            ev.TaskDeadLettered(
                run_id=RUN,
                task="main",
                attempt=1,
                failure_kind=kind,
                exit_code=exit_code,
                output_tail="tail",
            ),
            ev.RunFailed(run_id=RUN, scheduled_for=TICK, tenant="default"),
        ]


# --- ReleaseTask ------------------------------------------------------------------------------


def release(epoch: int = 1, worker: str = "w1") -> cmd.ReleaseTask:
    return cmd.ReleaseTask(
        run_id=RUN, task="main", attempt=1, epoch=epoch, worker_id=worker, reason="worker draining"
    )


def test_release_makes_the_same_attempt_ready_again_and_the_next_claim_bumps_the_epoch() -> None:
    state, events = when(CLAIMED, release(), TICK + 5 * S)
    assert events == [
        ev.TaskReleased(
            run_id=RUN, task="main", attempt=1, epoch=1, worker_id="w1", reason="worker draining"
        ),
        ev.TaskReady(run_id=RUN, task="main", attempt=1, scheduled_for=TICK),
    ]
    ti = only_task(state)
    assert (ti.state, ti.attempt, ti.epoch, ti.worker_id) == (  # type: ignore[attr-defined]
        TaskState.READY,
        1,
        1,
        None,
    )
    state, events = when(state, claim("w2"), TICK + 6 * S, key="claim-again")
    assert [(e.attempt, e.epoch, e.worker_id) for e in events] == [(1, 2, "w2")]  # type: ignore[attr-defined]
    # the releasing worker's late completion is fenced by the new epoch
    late = complete(epoch=1)
    _, events = when(state, late, TICK + 7 * S, key="late")
    assert events == [
        rejected(
            late, RejectReason.STALE_EPOCH, "epoch 1 is not the current lease (epoch 2, claimed)"
        )
    ]


@pytest.mark.parametrize(
    ("command", "reason", "detail"),
    [
        (
            release(epoch=0),
            RejectReason.STALE_EPOCH,
            "epoch 0 is not the current lease (epoch 1, claimed)",
        ),
        (release(worker="w9"), RejectReason.NOT_HOLDER, "lease is held by w1"),
    ],
)
def test_release_by_a_stale_or_foreign_lease_is_refused(
    command: cmd.ReleaseTask, reason: RejectReason, detail: str
) -> None:
    state, events = when(CLAIMED, command, TICK + 5 * S)
    assert events == [rejected(command, reason, detail)]
    assert only_task(state) == only_task(CLAIMED)


def test_release_is_applied_once_per_idem_key() -> None:
    state, _ = when(CLAIMED, release(), TICK + 5 * S, key="rel")
    again, events = when(state, release(), TICK + 6 * S, key="rel")
    assert (again, events) == (state, [])


# --- the fold's hard deadline -----------------------------------------------------------------


def test_claim_carries_grace_and_the_hard_deadline() -> None:
    [grant] = when(given(registered(), scheduled(), ready(), clock=TICK), claim(), TICK)[1]
    assert isinstance(grant, ev.TaskClaimed)
    assert grant.grace == SPEC.grace
    assert grant.deadline_at == TICK + SPEC.timeout + SPEC.grace + SPEC.lease_ttl


def test_a_holder_that_renews_past_the_hard_deadline_loses_the_attempt_as_timeout() -> None:
    spec = replace(SPEC, timeout=30 * S, grace=5 * S, lease_ttl=10 * S)
    state = given(registered(spec), scheduled(spec=spec), ready(), claimed(spec=spec), clock=TICK)
    deadline = TICK + 45 * S
    assert state.next_deadline() == TICK + 10 * S  # the lease comes first
    t = TICK
    while t + 5 * S < deadline:  # the holder keeps renewing every 5 s
        t += 5 * S
        state, events = when(state, renew(), t, key=f"renew-{t.timestamp()}")  # type: ignore[assignment]
        assert [type(e) for e in events] == [ev.LeaseRenewed]
        _, events = when(state, cmd.Tick(), t, key="tick")
        assert events == []
    state, events = when(state, renew(), deadline - S, key="renew-last")  # type: ignore[assignment]
    _, events = when(state, cmd.Tick(), deadline, key="tick-deadline")
    assert [type(e) for e in events] == [ev.TaskFailed, ev.TaskDeadLettered, ev.RunFailed]
    failed = events[0]
    assert isinstance(failed, ev.TaskFailed) and failed.failure_kind is FailureKind.TIMEOUT
    assert "hard deadline" in failed.output_tail and JOB not in failed.output_tail


def test_a_nan_backoff_coefficient_is_an_invalid_definition() -> None:
    from cronlog.errors import InvalidDefinition
    from cronlog.validation import validate_spec

    with pytest.raises(InvalidDefinition) as info:
        validate_spec(replace(SPEC, retry_policy=RetryPolicy(backoff_coefficient=float("nan"))))
    assert info.value.field == "retry_policy.backoff_coefficient"
