"""Lease tokens (cronlog.leases.lease_digest): a grant keeps the digest of the worker's secret,
and a renewal, completion or release must present the secret; the public epoch and worker id
are not enough to forge one."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.decide import handle
from cronlog.dedupe import event_key
from cronlog.job import JobState
from cronlog.leases import lease_digest
from cronlog.model import JobSpec, Schedule, ScheduleKind, main_task
from cronlog.vocabulary import RejectReason

JOB = "j"
T0 = datetime(2026, 3, 2, 12, tzinfo=UTC)
SECRET = "worker-secret-" + "x" * 30


def _triggered() -> tuple[JobState, str]:
    state, _ = handle(
        None,
        cmd.Envelope(
            idem_key="r",
            job_id=JOB,
            command=cmd.RegisterJob(
                spec=JobSpec("j", Schedule(ScheduleKind.MANUAL), main_task(("true",)))
            ),
        ),
        T0,
    )
    state, out = handle(state, cmd.Envelope(idem_key="t", job_id=JOB, command=cmd.TriggerJob()), T0)
    assert state is not None
    (run,) = [e.run_id for e in out if isinstance(e, ev.RunScheduled)]
    return state, run


def _claimed(token: str) -> tuple[JobState, str, ev.TaskClaimed]:
    state, run = _triggered()
    claim = cmd.ClaimTask(run_id=run, task="main", attempt=1, worker_id="w1", lease_token=token)
    new, out = handle(state, cmd.Envelope(idem_key="c", job_id=JOB, command=claim), T0)
    assert new is not None
    (claimed,) = [e for e in out if isinstance(e, ev.TaskClaimed)]
    return new, run, claimed


def _complete(run: str, epoch: int, token: str) -> cmd.CompleteTask:
    return cmd.CompleteTask(
        run_id=run,
        task="main",
        attempt=1,
        epoch=epoch,
        worker_id="w1",
        succeeded=True,
        exit_code=0,
        failure_kind=None,
        output_tail="FORGED",
        started_at=T0,
        finished_at=T0,
        lease_token=token,
    )


def test_a_grant_keeps_only_the_digest_of_the_secret() -> None:
    state, _, claimed = _claimed(SECRET)
    assert claimed.lease_token_digest == lease_digest(SECRET)
    assert len(claimed.lease_token_digest) == 32 and SECRET not in repr(claimed)
    assert state.runs[0].tasks[0].lease_token_digest == lease_digest(SECRET)


@pytest.mark.parametrize("forged", ["", "guess", SECRET + "x"])
def test_a_completion_without_the_grants_secret_is_refused(forged: str) -> None:
    state, run, claimed = _claimed(SECRET)
    env = cmd.Envelope(idem_key="f", job_id=JOB, command=_complete(run, claimed.epoch, forged))
    after, out = handle(state, env, T0 + timedelta(seconds=1))
    assert [type(e) for e in out] == [ev.CommandRejected]
    assert out[0].reason is RejectReason.NOT_HOLDER  # type: ignore[union-attr]
    assert out[0].detail == (  # type: ignore[union-attr]
        "the lease token is not the grant's (a command not from the holding worker)"
    )
    assert after is not None and after.runs == state.runs  # still running under its lease


def test_the_holder_renews_and_completes_with_its_secret() -> None:
    state, run, claimed = _claimed(SECRET)
    renew = cmd.RenewLease(
        run_id=run, task="main", attempt=1, epoch=claimed.epoch, worker_id="w1", lease_token=SECRET
    )
    state2, out = handle(state, cmd.Envelope(idem_key="n", job_id=JOB, command=renew), T0)
    assert [type(e) for e in out] == [ev.LeaseRenewed]
    env = cmd.Envelope(idem_key="d", job_id=JOB, command=_complete(run, claimed.epoch, SECRET))
    _, out = handle(state2, env, T0 + timedelta(seconds=2))
    assert ev.TaskSucceeded in [type(e) for e in out]


def test_a_grant_without_a_secret_is_not_checked() -> None:
    # a worker from before lease tokens: its commands carry none, and are not refused for it
    state, run, claimed = _claimed("")
    assert claimed.lease_token_digest == ""
    env = cmd.Envelope(idem_key="d", job_id=JOB, command=_complete(run, claimed.epoch, ""))
    _, out = handle(state, env, T0 + timedelta(seconds=1))
    assert ev.TaskSucceeded in [type(e) for e in out]


def test_a_forged_command_sent_first_under_the_holders_key_does_not_take_it() -> None:
    # found by review: worker keys are predictable (complete:<run>:<task>:<epoch>); a forged
    # completion refused under that key used to make the holder's own one a "re-delivery"
    state, run, claimed = _claimed(SECRET)
    key = f"complete:{run}:main:{claimed.epoch}"
    forged = cmd.Envelope(idem_key=key, job_id=JOB, command=_complete(run, claimed.epoch, ""))
    state, out = handle(state, forged, T0 + timedelta(seconds=1))
    assert [type(e) for e in out] == [ev.CommandRejected]
    real = cmd.Envelope(idem_key=key, job_id=JOB, command=_complete(run, claimed.epoch, SECRET))
    _, out = handle(state, real, T0 + timedelta(seconds=2))
    assert ev.TaskSucceeded in [type(e) for e in out]  # applied, not dropped
    assert event_key(real, out[0]) == f"{key}#{lease_digest(SECRET)}"  # its own event ids
    assert event_key(forged, out[0]) == key


def test_a_completion_differing_only_in_worker_id_from_a_refused_one_is_refused_too() -> None:
    # issue 25: the second completion under the same key and token was taken for a
    # re-delivery of the first, refused one, and got no event at all
    state, run, claimed = _claimed(SECRET)
    key = f"complete:{run}:main:{claimed.epoch}"
    wrong = replace(_complete(run, claimed.epoch, SECRET), worker_id="w2")
    first = cmd.Envelope(idem_key=key, job_id=JOB, command=wrong)
    state, out = handle(state, first, T0 + timedelta(seconds=1))
    assert [(type(e), e.reason) for e in out] == [  # type: ignore[union-attr]
        (ev.CommandRejected, RejectReason.NOT_HOLDER)
    ]
    assert state is not None
    second = cmd.Envelope(idem_key=key, job_id=JOB, command=_complete(run, claimed.epoch, SECRET))
    after, out = handle(state, second, T0 + timedelta(seconds=2))
    assert [type(e) for e in out] == [ev.CommandRejected]
    refusal = out[0]
    assert isinstance(refusal, ev.CommandRejected)
    assert refusal.reason is RejectReason.IDEMPOTENCY_CONFLICT
    assert f"idem_key {key!r} was already used" in refusal.detail
    assert refusal.worker_id == "w1"  # copied to the sender's replies
    assert event_key(second, refusal) != event_key(first, refusal)  # its own event ids
    assert after is not None
    for again in (first, second):  # re-deliveries of either stay no-ops
        assert handle(after, again, T0 + timedelta(seconds=3))[1] == []


def test_a_re_delivered_completion_with_a_token_is_still_a_no_op() -> None:
    state, run, claimed = _claimed(SECRET)
    key = f"complete:{run}:main:{claimed.epoch}"
    env = cmd.Envelope(idem_key=key, job_id=JOB, command=_complete(run, claimed.epoch, SECRET))
    state, out = handle(state, env, T0 + timedelta(seconds=1))
    assert ev.TaskSucceeded in [type(e) for e in out]
    assert state is not None
    assert handle(state, env, T0 + timedelta(seconds=2)) == (state, [])
