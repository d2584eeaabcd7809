"""The chaos run's verdict (``tests/chaos/audit.py``) tells "late" from "lost".

Under an overloaded box a partition's fold can be behind for a minute or more: its ticks are
decided late (the catch-up policy skips the ones past the misfire grace) and the leases
granted just before the schedulers stop lapse with no scheduler left to expire them. Those are
figures; a tick never decided, a catch-up skip of a tick that was not late, and a lease the
fold's clock passed without expiring it are failures.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cronlog import events as ev
from cronlog.ids import run_id_for_tick
from cronlog.vocabulary import RunTrigger, SkipReason
from tests.chaos.audit import JobPlan, Rec, audit_run
from topology.wire.codec import Codec

CODEC = Codec()
JOB = "c0000"
T0 = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
WINDOW = (T0, T0 + timedelta(seconds=10))  # (T0, T0+10]: ticks at 2, 4, 6, 8, 10 s
PLAN = [JobPlan(JOB, 2)]


def _s(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


class Log:
    """Run-events as the audit reads them: one record each, on a given partition."""

    def __init__(self) -> None:
        self.recs: list[Rec] = []

    def add(self, body: ev.Event, at: datetime, partition: int = 0) -> None:
        n = len(self.recs)
        event = ev.RunEvent(
            event_id=f"e{n}", job_id=JOB, at=at, idem_key=f"k{n}", index=0, event=body
        )
        self.recs.append(Rec(partition, n, 0, CODEC.encode_event(event)))

    def run(self, tick: float, at: float) -> None:
        self.add(
            ev.RunScheduled(
                run_id=run_id_for_tick(JOB, _s(tick)),
                scheduled_for=_s(tick),
                trigger=RunTrigger.SCHEDULE if at - tick < 60 else RunTrigger.CATCHUP,
                tasks=("main",),
                next_fire_at=_s(tick + 2),
                ready=("main",),
            ),
            _s(at),
        )

    def skip(self, tick: float, at: float, reason: SkipReason) -> None:
        self.add(ev.TickSkipped(scheduled_for=_s(tick), reason=reason, next_fire_at=None), _s(at))

    def claim(self, tick: float, expires: float, partition: int = 0) -> None:
        self.add(
            ev.TaskClaimed(
                run_id=run_id_for_tick(JOB, _s(tick)),
                task="main",
                attempt=1,
                epoch=1,
                worker_id="w1",
                lease_expires_at=_s(expires),
                lease_ttl=timedelta(seconds=6),
                scheduled_for=_s(tick),
                command=("true",),
                timeout=timedelta(seconds=30),
                grace=timedelta(seconds=2),
                deadline_at=_s(expires + 32),
            ),
            _s(expires - 6),
            partition,
        )

    def audit(self, end: float = 200, clocks: dict[int, datetime] | None = None):  # type: ignore[no-untyped-def]
        return audit_run(self.recs, [], PLAN, WINDOW, _s(end), [], CODEC, fold_clocks=clocks)


def test_a_tick_with_no_decision_is_lost() -> None:
    log = Log()
    for t in (2, 4, 8, 10):
        log.run(t, t + 0.1)
    a = log.audit()
    assert (a.ticks_expected, a.ticks_run, a.lost_ticks, a.late_ticks) == (5, 4, 1, 0)


def test_ticks_decided_late_are_late_not_lost() -> None:
    """A stalled fold: ticks 2-8 decided 70 s on, the catch-up policy keeps the latest."""
    log = Log()
    for t in (2, 4, 6):
        log.skip(t, 78, SkipReason.CATCHUP_POLICY)
    log.run(8, 78)
    log.run(10, 10.2)
    a = log.audit()
    assert (a.lost_ticks, a.missed_ticks, a.ticks_run, a.late_ticks) == (0, 3, 2, 4)
    assert a.max_tick_lag_s == 76.0


def test_a_catch_up_skip_of_a_tick_that_was_not_late_is_lost() -> None:
    log = Log()
    for t in (2, 4, 8, 10):
        log.run(t, t)
    log.skip(6, 30, SkipReason.CATCHUP_POLICY)  # 24 s late: inside the 60 s misfire grace
    a = log.audit()
    assert (a.lost_ticks, a.missed_ticks) == (1, 0)
    assert a.examples["lost_ticks"] == [
        f"{JOB}@{int(_s(6).timestamp() * 1000)} skips=['catchup_policy']"
    ]


def test_a_lease_lapsed_after_the_folds_last_tick_is_a_teardown_artefact() -> None:
    log = Log()
    log.run(2, 2)
    log.claim(2, expires=100, partition=0)
    log.claim(4, expires=100, partition=1)
    clocks = {0: _s(99), 1: _s(100)}  # partition 1's fold passed the expiry on a Tick
    a = log.audit(end=150, clocks=clocks)
    assert (a.lapsed_at_teardown, a.stuck_attempts, a.leased_attempts) == (1, 1, 0)
    assert a.examples["stuck_attempts"][0].startswith(f"('{run_id_for_tick(JOB, _s(4))}'")


def test_without_fold_clocks_every_lapsed_lease_is_stuck() -> None:
    log = Log()
    log.claim(2, expires=100)
    log.claim(4, expires=300)
    a = log.audit(end=150)
    assert (a.stuck_attempts, a.leased_attempts, a.lapsed_at_teardown) == (1, 1, 0)
