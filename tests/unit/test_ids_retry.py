"""Deterministic identifiers (run_id, event_id, idem keys), jitter, and retry backoff."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from cronlog.ids import (
    event_id,
    run_id_for_tick,
    run_id_for_trigger,
    stable_fraction,
    task_idem_key,
)
from cronlog.model import RetryPolicy
from cronlog.retry import backoff_delay, next_attempt_at

T0 = datetime(2024, 6, 10, 12, 0, tzinfo=UTC)
RUN_ID = re.compile(r"^r[0-9a-f]{24}$")

# --- run_id ---------------------------------------------------------------------------------


def test_run_id_for_tick_is_a_pure_function_of_job_and_tick() -> None:
    assert run_id_for_tick("job-1", T0) == run_id_for_tick("job-1", T0)
    assert RUN_ID.match(run_id_for_tick("job-1", T0))


def test_derived_ids_are_pinned() -> None:
    # These values are in every log and every consumer's dedupe table: changing the
    # derivation re-keys every run and event, a breaking change (replay logs would diverge).
    assert run_id_for_tick("job-1", T0) == "r0c90943afbd8029691509ec4"
    assert run_id_for_trigger("job-1", "k1") == "rc287ea0da6efa61320ac2ecb"
    assert event_id("cmd-1", "job-1", 0) == "4a6cd326da6349cd211842bbdfc52eac"


def test_run_ids_of_consecutive_ticks_are_all_distinct() -> None:
    ticks = [T0 + timedelta(seconds=s) for s in range(5000)]
    assert len({run_id_for_tick("job-1", t) for t in ticks}) == len(ticks)


def test_run_id_for_tick_names_an_instant_not_a_wall_time() -> None:
    berlin = T0.astimezone(ZoneInfo("Europe/Berlin"))
    assert berlin.hour == 14
    assert run_id_for_tick("job-1", berlin) == run_id_for_tick("job-1", T0)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (("job-1", T0), ("job-2", T0)),
        (("job-1", T0), ("job-1", T0 + timedelta(milliseconds=1))),
        (("job-1", T0), ("job-1", T0 + timedelta(days=1))),
        (("job-1", T0), ("job-10", T0)),
    ],
    ids=["other-job", "one-ms-later", "next-day", "prefix-job-id"],
)
def test_run_ids_of_different_ticks_differ(
    a: tuple[str, datetime], b: tuple[str, datetime]
) -> None:
    assert run_id_for_tick(*a) != run_id_for_tick(*b)


def test_run_id_for_tick_refuses_a_naive_tick() -> None:
    with pytest.raises(ValueError, match="naive"):
        run_id_for_tick("job-1", datetime(2024, 6, 10, 12, 0))


def test_run_id_for_trigger_derives_from_the_idem_key() -> None:
    assert run_id_for_trigger("job-1", "k1") == run_id_for_trigger("job-1", "k1")
    assert RUN_ID.match(run_id_for_trigger("job-1", "k1"))
    assert run_id_for_trigger("job-1", "k1") != run_id_for_trigger("job-1", "k2")
    assert run_id_for_trigger("job-1", "k1") != run_id_for_trigger("job-2", "k1")


def test_manual_and_scheduled_run_ids_do_not_collide() -> None:
    ms = str((T0 - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1))
    assert run_id_for_trigger("job-1", ms) != run_id_for_tick("job-1", T0)


# --- event_id / idem keys ------------------------------------------------------------------


def test_event_id_is_deterministic_and_distinct_per_position() -> None:
    ids = [event_id("cmd-1", "job-1", i) for i in range(100)]
    assert ids == [event_id("cmd-1", "job-1", i) for i in range(100)]
    assert len(set(ids)) == 100
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)


@pytest.mark.parametrize(
    "other",
    [("cmd-2", "job-1", 0), ("cmd-1", "job-2", 0), ("cmd-1", "job-1", 1), ("cmd-1job-1", "", 0)],
    ids=["other-command", "other-job", "other-index", "concatenation"],
)
def test_event_ids_of_different_events_differ(other: tuple[str, str, int]) -> None:
    assert event_id("cmd-1", "job-1", 0) != event_id(*other)


def test_task_idem_key_is_run_id_colon_task() -> None:
    assert task_idem_key("r0123", "extract") == "r0123:extract"


# --- jitter ------------------------------------------------------------------------------------


def test_stable_fraction_is_deterministic_and_in_unit_interval() -> None:
    values = [stable_fraction("r1", "main", str(a)) for a in range(1, 2001)]
    assert values == [stable_fraction("r1", "main", str(a)) for a in range(1, 2001)]
    assert all(0.0 <= v < 1.0 for v in values)
    assert len(set(values)) == len(values)
    # Spread, not clumped: each decile gets a share.
    deciles = [sum(1 for v in values if i / 10 <= v < (i + 1) / 10) for i in range(10)]
    assert min(deciles) > 100


def test_stable_fraction_depends_on_every_part() -> None:
    base = stable_fraction("r1", "main", "1")
    assert base != stable_fraction("r2", "main", "1")
    assert base != stable_fraction("r1", "load", "1")
    assert base != stable_fraction("r1", "main", "2")


# --- backoff ------------------------------------------------------------------------------------

DEFAULT = RetryPolicy(max_attempts=10)  # backoff 10 s, coefficient 2, cap 10 min


@pytest.mark.parametrize(
    ("failed_attempt", "seconds"),
    [(1, 10), (2, 20), (3, 40), (4, 80), (5, 160), (6, 320), (7, 600), (8, 600), (30, 600)],
)
def test_backoff_doubles_from_the_first_delay_up_to_the_cap(
    failed_attempt: int, seconds: int
) -> None:
    assert backoff_delay(DEFAULT, failed_attempt) == timedelta(seconds=seconds)


def test_backoff_with_coefficient_one_is_constant() -> None:
    policy = RetryPolicy(backoff=timedelta(seconds=3), backoff_coefficient=1.0)
    assert {backoff_delay(policy, a) for a in range(1, 20)} == {timedelta(seconds=3)}


def test_backoff_is_capped_even_when_the_first_delay_exceeds_the_cap() -> None:
    policy = RetryPolicy(backoff=timedelta(hours=1), max_backoff=timedelta(minutes=5))
    assert backoff_delay(policy, 1) == timedelta(minutes=5)


@pytest.mark.parametrize(
    ("jitter", "seconds"), [(0.0, 40.0), (0.5, 36.0), (0.25, 38.0), (0.999, 32.008)]
)
def test_jitter_shortens_the_delay_by_up_to_a_fifth(jitter: float, seconds: float) -> None:
    assert backoff_delay(DEFAULT, 3, jitter) == timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("policy", "failed_attempt"),
    [
        (RetryPolicy(max_attempts=5, backoff_coefficient=1e200), 3),
        (RetryPolicy(max_attempts=2000), 1026),
    ],
    ids=["huge-coefficient", "many-attempts"],
)
def test_backoff_of_a_huge_exponent_is_the_cap(policy: RetryPolicy, failed_attempt: int) -> None:
    assert backoff_delay(policy, failed_attempt) == policy.max_backoff


def test_next_attempt_at_is_none_once_attempts_are_exhausted() -> None:
    policy = RetryPolicy(max_attempts=3)
    assert next_attempt_at(policy, "r1", "main", 3, T0) is None
    assert next_attempt_at(policy, "r1", "main", 4, T0) is None
    assert next_attempt_at(RetryPolicy(), "r1", "main", 1, T0) is None  # default: no retry


@pytest.mark.parametrize("failed_attempt", [1, 2, 3, 4])
def test_next_attempt_at_is_the_jittered_backoff_after_now(failed_attempt: int) -> None:
    policy = RetryPolicy(max_attempts=5)
    at = next_attempt_at(policy, "r1", "main", failed_attempt, T0)
    jitter = stable_fraction("r1", "main", str(failed_attempt))
    assert at == T0 + backoff_delay(policy, failed_attempt, jitter)
    full = backoff_delay(policy, failed_attempt)
    assert T0 + full * 0.8 <= at <= T0 + full  # type: ignore[operator]


def test_next_attempt_at_is_deterministic_and_spreads_runs() -> None:
    policy = RetryPolicy(max_attempts=5, backoff=timedelta(minutes=1))
    first = [next_attempt_at(policy, f"r{i}", "main", 1, T0) for i in range(50)]
    assert first == [next_attempt_at(policy, f"r{i}", "main", 1, T0) for i in range(50)]
    assert len(set(first)) == 50
