"""Invariant 5 with the dedupe horizon (issue 25 item 1), on random command sequences.

The ``Driver`` folds with a marker book (``cronlog.idem.DictMarkers``), so user commands carry
``issued_at`` and the fold dedupes them by the horizon; ``churn`` steps send more user
commands than the job record's window holds. Then: every re-delivery of an applied command
within the horizon is a no-op, wherever it falls and whatever came between; every re-send
past the horizon is refused ``idem_key_expired`` and changes nothing; folding the same log
again with a fresh book decides the same.
"""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.decide import handle
from cronlog.idem import DEFAULT_HORIZON, DictMarkers
from cronlog.model import JobSpec
from cronlog.tenants import PLATFORM_COMMANDS
from cronlog.vocabulary import RejectReason
from tests.property.sequences import (
    COMMON,
    KINDS,
    MAX_STEPS,
    Driver,
    Step,
    cron_specs,
    once_specs,
)

HORIZON_KINDS = [*KINDS, "churn", "duplicate", "duplicate", "delete", "register"]


def _user(command: cmd.Command) -> bool:
    return not isinstance(command, PLATFORM_COMMANDS)


def _firsts(steps: list[Step]) -> dict[str, cmd.Envelope]:
    """Each user idem_key's first delivery that left a record (what the fold marked).

    Left out: a user command under a worker command's key (``do_reuse``, a sender's bug),
    which carries no ``issued_at``.
    """
    firsts: dict[str, cmd.Envelope] = {}
    for s in steps:
        key = s.envelope.idem_key
        if _user(s.envelope.command) and key not in firsts and s.after is not None:
            firsts[key] = s.envelope
    return {k: e for k, e in firsts.items() if e.issued_at is not None}


def check_re_deliveries_within_the_horizon_yield_nothing(steps: list[Step]) -> None:
    """A user command delivered again after its first application: no events, no change."""
    applied: dict[str, cmd.Envelope] = {}
    for s in steps:
        key = s.envelope.idem_key
        if not _user(s.envelope.command):
            continue
        if applied.get(key) == s.envelope:
            assert s.events == (), f"re-delivered {key} emitted {s.events}"
            assert s.after is s.before
        elif key not in applied and s.after is not None:
            applied[key] = s.envelope


@COMMON
@given(
    data=st.data(),
    spec=st.one_of(cron_specs(), once_specs()),
    n_steps=st.integers(5, MAX_STEPS),
    later_s=st.integers(0, 3600),
)
def test_re_sends_after_random_interleavings_are_no_ops_within_the_horizon(
    data: st.DataObject, spec: JobSpec, n_steps: int, later_s: int
) -> None:
    driver = Driver(data, spec, HORIZON_KINDS, book=DictMarkers())
    driver.run(n_steps)
    check_re_deliveries_within_the_horizon_yield_nothing(driver.steps)
    later = driver.t + timedelta(seconds=later_s)
    for key, envelope in _firsts(driver.steps).items():
        assert envelope.issued_at is not None
        if later - envelope.issued_at > DEFAULT_HORIZON:
            continue  # a long history: that one is past the horizon (the next test)
        after, events = handle(driver.state, envelope, later, driver.book)
        assert events == [], f"re-sent {key} emitted {events}"
        assert after is driver.state


@settings(COMMON, max_examples=max(10, COMMON.max_examples // 2))
@given(data=st.data(), spec=cron_specs(), n_steps=st.integers(5, MAX_STEPS))
def test_re_sends_past_the_horizon_are_refused_and_change_nothing(
    data: st.DataObject, spec: JobSpec, n_steps: int
) -> None:
    driver = Driver(data, spec, HORIZON_KINDS, book=DictMarkers())
    driver.run(n_steps)
    state = driver.state
    assert state is not None
    for key, envelope in _firsts(driver.steps).items():
        assert envelope.issued_at is not None
        late = max(state.clock, envelope.issued_at + DEFAULT_HORIZON + timedelta(milliseconds=1))
        after, events = handle(state, envelope, late, driver.book)
        assert [type(e) for e in events] == [ev.CommandRejected], key
        refusal = events[0]
        assert isinstance(refusal, ev.CommandRejected)
        assert refusal.reason is RejectReason.IDEM_KEY_EXPIRED
        assert after is not None and after.runs == state.runs and after.spec == state.spec
        assert after.status is state.status and after.applied == state.applied


@settings(COMMON, max_examples=max(10, COMMON.max_examples // 2))
@given(data=st.data(), spec=cron_specs(), n_steps=st.integers(5, MAX_STEPS))
def test_folding_the_log_again_with_a_fresh_book_decides_the_same(
    data: st.DataObject, spec: JobSpec, n_steps: int
) -> None:
    driver = Driver(data, spec, HORIZON_KINDS, book=DictMarkers())
    driver.run(n_steps)
    book, state = DictMarkers(), None
    for step in driver.steps:
        state, events = handle(state, step.envelope, step.record_time, book)
        assert tuple(events) == step.events
        assert state == step.after
    assert book.markers == driver.book.markers  # type: ignore[union-attr]
