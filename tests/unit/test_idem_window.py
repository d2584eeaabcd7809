"""The dedupe horizon (issue 25 item 1), given/when through ``handle`` with a marker book.

Found by the adversarial run (exp8): a command re-delivered after its key left the job
record's window of ``MAX_APPLIED_MARKERS`` user commands was applied again. With the marker
book (``cronlog.idem``) a re-send within the horizon is a no-op whatever came between; one
issued longer ago than the horizon is refused ``idem_key_expired``, never applied.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.decide import handle
from cronlog.dedupe import event_key
from cronlog.idem import DEFAULT_HORIZON, DictMarkers, IdemRules
from cronlog.ids import command_digest, conflict_key, run_id_for_trigger
from cronlog.job import MAX_APPLIED_MARKERS, JobState
from cronlog.vocabulary import RejectReason
from tests.builders import JOB, SPEC, T0, at, claim, complete, given, registered


class Sender:
    """One job's commands through ``handle`` with one marker book, the fold's clock moving."""

    def __init__(self, rules: IdemRules | None = None) -> None:
        self.book = DictMarkers(rules or IdemRules())
        self.state: JobState | None = given(registered(SPEC), clock=T0)

    def send(
        self,
        key: str,
        command: cmd.Command,
        now: datetime,
        issued_at: datetime | None = None,
    ) -> list[ev.Event]:
        env = cmd.Envelope(idem_key=key, job_id=JOB, command=command, issued_at=issued_at)
        self.state, events = handle(self.state, env, now, self.book)
        return events

    def trigger_and_finish(self, key: str, now: datetime) -> str:
        """A TriggerJob, its task claimed and completed: the run leaves the record."""
        events = self.send(key, cmd.TriggerJob(), now, issued_at=now)
        assert any(isinstance(e, ev.RunScheduled) for e in events)
        run_id = run_id_for_trigger(JOB, key)
        self.send(f"claim-{key}", claim(run_id=run_id), now)
        self.send(f"done-{key}", replace(complete(), run_id=run_id), now)
        assert self.state is not None and self.state.run(run_id) is None
        return run_id

    def churn(self, n: int, now: datetime) -> None:
        """``n`` further user commands of the job (pause, resume, …)."""
        for i in range(n):
            self.send(f"op-{i}", cmd.PauseJob() if i % 2 == 0 else cmd.ResumeJob(), now)


def test_a_trigger_re_delivered_after_the_marker_window_is_a_no_op() -> None:
    s = Sender()
    s.trigger_and_finish("trigger-first", at(minutes=1))
    s.churn(MAX_APPLIED_MARKERS + 2, at(minutes=2))
    assert s.send("trigger-first", cmd.TriggerJob(), at(minutes=3), issued_at=at(minutes=1)) == []


def test_a_re_send_just_inside_the_horizon_is_a_no_op() -> None:
    s = Sender()
    s.trigger_and_finish("t", at(minutes=1))
    s.churn(300, at(minutes=2))
    late = at(minutes=1) + DEFAULT_HORIZON
    assert s.send("t", cmd.TriggerJob(), late, issued_at=at(minutes=1)) == []


def test_a_re_send_past_the_horizon_is_refused_idem_key_expired() -> None:
    s = Sender()
    s.trigger_and_finish("t", at(minutes=1))
    late = at(minutes=1) + DEFAULT_HORIZON + timedelta(milliseconds=1)
    events = s.send("t", cmd.TriggerJob(), late, issued_at=at(minutes=1))
    assert len(events) == 1 and isinstance(events[0], ev.CommandRejected)
    assert events[0].reason is RejectReason.IDEM_KEY_EXPIRED
    assert "horizon" in events[0].detail
    assert s.state is not None and s.state.runs == ()  # nothing started


def test_a_new_command_issued_before_the_horizon_is_refused_too() -> None:
    s = Sender()
    late = at(days=2)
    events = s.send("never-seen", cmd.TriggerJob(), late, issued_at=at(minutes=1))
    assert [e.reason for e in events if isinstance(e, ev.CommandRejected)] == [
        RejectReason.IDEM_KEY_EXPIRED
    ]
    assert s.state is not None and s.state.runs == ()


def test_an_issued_at_far_in_the_future_is_refused() -> None:
    s = Sender()
    events = s.send("t", cmd.TriggerJob(), at(minutes=1), issued_at=at(hours=2))
    assert [e.reason for e in events if isinstance(e, ev.CommandRejected)] == [
        RejectReason.ISSUED_AT_IN_FUTURE
    ]


def test_a_fast_sender_clock_keeps_its_marker_past_the_horizon_of_the_log_time() -> None:
    # issued 30 min ahead of the log: the marker lives until issued_at + horizon
    s = Sender()
    issued = at(minutes=31)
    assert s.send("t", cmd.TriggerJob(), at(minutes=1), issued_at=issued) != []
    s.churn(200, at(minutes=2))
    assert s.send("t", cmd.TriggerJob(), issued + DEFAULT_HORIZON, issued_at=issued) == []


def test_each_refusal_by_age_has_its_own_event_ids() -> None:
    s = Sender()
    issued = at(minutes=1)
    env = cmd.Envelope(idem_key="t", job_id=JOB, command=cmd.TriggerJob(), issued_at=issued)
    one, two = at(days=2), at(days=3)
    keys = [
        event_key(env, s.send("t", cmd.TriggerJob(), when, issued)[0], when) for when in (one, two)
    ]
    assert len(set(keys)) == 2 and "t" not in keys  # the first command's ids stay its own
    again = Sender()  # the same record folded again (after an abort): the same id
    again.send("t", cmd.TriggerJob(), one, issued)
    assert s.state is not None and again.state is not None
    assert keys[0] == event_key(env, again.send("t", cmd.TriggerJob(), one, issued)[0], one)


def test_the_same_key_with_another_command_is_a_conflict_after_the_window_too() -> None:
    s = Sender()
    s.trigger_and_finish("k", at(minutes=1))
    s.churn(MAX_APPLIED_MARKERS + 2, at(minutes=2))
    events = s.send("k", cmd.PauseJob(), at(minutes=3), issued_at=at(minutes=3))
    assert [e.reason for e in events if isinstance(e, ev.CommandRejected)] == [
        RejectReason.IDEMPOTENCY_CONFLICT
    ]
    s.churn(MAX_APPLIED_MARKERS + 2, at(minutes=4))  # the refusal's re-delivery: a no-op
    assert s.send("k", cmd.PauseJob(), at(minutes=5), issued_at=at(minutes=3)) == []
    assert (JOB, conflict_key("k", command_digest(cmd.PauseJob()))) in s.book.markers


def test_a_command_without_issued_at_is_deduped_for_the_horizon_from_its_log_time() -> None:
    s = Sender()
    assert s.send("old-client", cmd.TriggerJob(), at(minutes=1)) != []
    s.churn(MAX_APPLIED_MARKERS + 2, at(minutes=2))
    assert s.send("old-client", cmd.TriggerJob(), at(hours=23)) == []


def test_worker_commands_leave_no_marker_in_the_book() -> None:
    s = Sender()
    s.trigger_and_finish("t", at(minutes=1))
    assert set(s.book.markers) == {(JOB, "t")}


def test_a_shorter_horizon_is_honoured() -> None:
    s = Sender(IdemRules(horizon=timedelta(minutes=10)))
    s.trigger_and_finish("t", at(minutes=1))
    events = s.send("t", cmd.TriggerJob(), at(minutes=12), issued_at=at(minutes=1))
    assert [e.reason for e in events if isinstance(e, ev.CommandRejected)] == [
        RejectReason.IDEM_KEY_EXPIRED
    ]
