"""The API and the fold's ``idempotency_conflict`` (issue 11): the refusal is projected, and
answered 422 to the request whose command it refused, never to the key's first command.

The refusal carries the re-used idem_key and index 0, like the first command's first event, and
an event_id of its own (``cronlog.decide.event_key``): the projection dedupes by event_id, so it
is kept, not dropped as a re-delivery.
"""

from __future__ import annotations

from datetime import timedelta

from fastapi.testclient import TestClient

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.ids import event_id
from cronlog.vocabulary import RejectReason
from services.api.readmodel.projection import apply, is_conflict
from services.api.readmodel.reader import ReadModel
from services.api.readmodel.store import Batch
from tests.unit.projected_fold import JOB, T0, Fold

KEY = "shared-key"


def _fold_with_a_conflict(rm: ReadModel) -> tuple[Fold, str]:
    """A run cancelled under KEY, then a TriggerJob that re-used KEY (refused)."""
    fold = Fold(rm)
    run_id = next(e.run_id for e in fold.tick(0) if isinstance(e, ev.RunScheduled))
    fold.send(KEY, cmd.CancelRun(run_id=run_id), T0 + timedelta(seconds=10))
    [refusal] = fold.send(KEY, cmd.TriggerJob(), T0 + timedelta(seconds=20))
    assert isinstance(refusal, ev.CommandRejected)
    assert refusal.reason is RejectReason.IDEMPOTENCY_CONFLICT
    return fold, run_id


def test_a_refused_reuse_of_a_key_is_projected_beside_the_first_commands_events(
    rm: ReadModel,
) -> None:
    _fold_with_a_conflict(rm)  # Fold asserts every event applied: none dropped as a duplicate
    events = rm.events_for(KEY, JOB)
    assert [(type(e.event), e.index) for e in events] == [
        (ev.RunCancelled, 0),
        (ev.CommandRejected, 0),
    ]
    first, refusal = events
    assert not is_conflict(first) and is_conflict(refusal)
    assert refusal.event_id != first.event_id == event_id(KEY, JOB, 0)
    batch = Batch(rm.store)
    assert not apply(batch, refusal) and not apply(batch, first)  # re-deliveries: skipped
    batch.commit()
    assert rm.events_for(KEY, JOB) == events


def test_the_request_whose_command_was_refused_gets_422_in_the_guards_shape(
    rm: ReadModel, offline: TestClient
) -> None:
    _fold_with_a_conflict(rm)
    answer = offline.post(f"/api/v1/jobs/{JOB}/trigger", headers={"Idempotency-Key": KEY})
    assert answer.status_code == 422, answer.text
    [error] = answer.json()["detail"]
    assert (error["type"], error["loc"]) == ("idempotency_conflict", ["header", "Idempotency-Key"])
    assert KEY in error["msg"] and "TriggerJob" in error["msg"]


def test_a_retry_of_the_first_command_is_answered_as_the_first_time(
    rm: ReadModel, offline: TestClient
) -> None:
    _, run_id = _fold_with_a_conflict(rm)
    answer = offline.post(
        f"/api/v1/runs/{run_id}/cancel", json={}, headers={"Idempotency-Key": KEY}
    )
    assert answer.status_code == 200, answer.text
    assert (answer.json()["state"], answer.json()["cancel_reason"]) == ("cancelled", "user")


def test_a_re_send_refused_past_the_horizon_is_kept_beside_the_first_commands_events(
    rm: ReadModel, offline: TestClient
) -> None:
    """A refusal by age carries the key and index 0 too: projected beside, never over, the
    first command's events, and not the answer of a retry of that command."""
    fold = Fold(rm)
    run_id = next(e.run_id for e in fold.tick(0) if isinstance(e, ev.RunScheduled))
    issued = T0 + timedelta(seconds=10)
    fold.send(KEY, cmd.CancelRun(run_id=run_id), issued, issued_at=issued)
    late = issued + timedelta(days=2)
    [refusal] = fold.send(KEY, cmd.CancelRun(run_id=run_id), late, issued_at=issued)
    assert isinstance(refusal, ev.CommandRejected)
    assert refusal.reason is RejectReason.IDEM_KEY_EXPIRED
    events = rm.events_for(KEY, JOB)
    assert [(type(e.event), e.index) for e in events] == [
        (ev.RunCancelled, 0),
        (ev.CommandRejected, 0),
    ]
    answer = offline.post(
        f"/api/v1/runs/{run_id}/cancel", json={}, headers={"Idempotency-Key": KEY}
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["state"] == "cancelled"
