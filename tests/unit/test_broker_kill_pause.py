"""The pause figures of a broker kill (tests/chaos/broker_kill.py), from run-event records."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cronlog import events as ev
from cronlog.vocabulary import SkipReason
from tests.chaos.audit import Rec
from tests.chaos.broker_kill import BrokerKill, measure_pause
from topology.wire.codec import Codec

KILL_S = 1_800_000_000.0
CODEC = Codec()


def _skip(job: str, due_s: float, seen_s: float, offset: int) -> Rec:
    due = datetime.fromtimestamp(due_s, UTC)
    body = ev.TickSkipped(
        scheduled_for=due, reason=SkipReason.MAX_ACTIVE_RUNS, next_fire_at=due + timedelta(1)
    )
    event = ev.RunEvent(
        event_id=f"e{offset}", job_id=job, at=due, idem_key=f"i{offset}", index=0, event=body
    )
    return Rec(0, offset, int(seen_s * 1000), CODEC.encode_event(event))


def test_the_longest_gap_and_lag_after_a_kill_and_before_it() -> None:
    # one tick a second, each decided 0.2 s after it is due, but those due from the kill to
    # 6 s after it: all decided 6.5 s after the kill
    recs = []
    for i, due in enumerate(range(-30, 30)):
        t = KILL_S + due
        seen = KILL_S + 6.5 if 0 <= due <= 6 else t + 0.2
        recs.append(_skip("j", t, seen, i))
    kill = BrokerKill(at=KILL_S, node=1)
    measure_pause(kill, recs, CODEC)
    assert kill.gap_s == 7.3  # the last event before the kill at -0.8 s, the next at +6.5 s
    assert kill.lag_s == 6.5  # the tick due at the kill
    assert kill.baseline_gap_s == 1.0
    assert kill.baseline_lag_s == 0.2


def test_a_tick_counts_once_at_its_first_event() -> None:
    recs = [_skip("j", KILL_S + 1, KILL_S + 1.5, 0), _skip("j", KILL_S + 1, KILL_S + 9, 1)]
    kill = BrokerKill(at=KILL_S, node=2)
    measure_pause(kill, recs, CODEC)
    assert kill.lag_s == 0.5
