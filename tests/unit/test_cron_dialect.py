"""The cron dialect of docs/schedules.md: what each spelling matches, and what is refused.

Ticks are read in UTC from Monday 2024-01-01T00:00Z (a leap year), so only the dialect is
under test here; time zones and DST are in test_schedule.py.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

import pytest
from croniter.croniter import EXPRESSIONS

from cronlog.cron import parse
from cronlog.errors import InvalidDefinition
from cronlog.schedule import cron_ticks, validate_cron

START = datetime(2024, 1, 1, tzinfo=UTC)


def ticks(expression: str, n: int, hash_id: str | None = None) -> list[str]:
    """The first n ticks after START as ``MM-DD HH:MM:SS``."""
    got = itertools.islice(cron_ticks(expression, "UTC", START, hash_id=hash_id), n)
    return [t.strftime("%m-%d %H:%M:%S") for t in got]


def days(expression: str, n: int) -> list[str]:
    """The first n tick dates after START as ``MM-DD``."""
    return [t[:5] for t in ticks(expression, n)]


# --- ranges, steps, lists, names ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        # a-a is the single value a (croniter: the whole cycle).
        ("5-5 * * * *", ["01-01 00:05:00", "01-01 01:05:00"]),
        ("0 0 * * 3-3", ["01-03 00:00:00", "01-10 00:00:00"]),
        ("0 0 * * wed-wed", ["01-03 00:00:00", "01-10 00:00:00"]),
        ("0 0 * 2-2 *", ["02-01 00:00:00", "02-02 00:00:00"]),
        # a/n means a-max/n; 59/5 is just 59 (croniter: 59-59/5, the whole hour every 5).
        ("59/5 * * * *", ["01-01 00:59:00", "01-01 01:59:00"]),
        ("10/20 * * * *", ["01-01 00:10:00", "01-01 00:30:00", "01-01 00:50:00", "01-01 01:10:00"]),
        # a-b with a > b wraps around; steps continue along the wrapped order.
        (
            "0 22-1 * * *",
            [
                "01-01 01:00:00",
                "01-01 22:00:00",
                "01-01 23:00:00",
                "01-02 00:00:00",
                "01-02 01:00:00",
            ],
        ),
        ("50-10/15 * * * *", ["01-01 00:05:00", "01-01 00:50:00", "01-01 01:05:00"]),
        (
            "0 0 28-2/2 * *",
            ["01-28 00:00:00", "01-30 00:00:00", "02-01 00:00:00", "02-28 00:00:00"],
        ),  # 28, 30, then 1 (not 2)
        ("0 0 1 nov-feb *", ["02-01 00:00:00", "11-01 00:00:00", "12-01 00:00:00"]),
        (
            "0 0 * * fri-mon",
            [
                "01-05 00:00:00",
                "01-06 00:00:00",
                "01-07 00:00:00",
                "01-08 00:00:00",
                "01-12 00:00:00",
            ],
        ),
        # 7 is Sunday too, in values and ranges.
        ("0 0 * * 7", ["01-07 00:00:00", "01-14 00:00:00"]),
        ("0 0 * * 5-7", ["01-05 00:00:00", "01-06 00:00:00", "01-07 00:00:00", "01-12 00:00:00"]),
        ("0 0 * * 7-1", ["01-07 00:00:00", "01-08 00:00:00", "01-14 00:00:00"]),
        ("0 0 * * 0-7", ["01-02 00:00:00", "01-03 00:00:00"]),
        ("0 9 * * MON,wed,Fri", ["01-01 09:00:00", "01-03 09:00:00", "01-05 09:00:00"]),
        ("0 0 1 JAN,jul *", ["07-01 00:00:00"]),
        (
            "*/20 9-10/1 * * *",
            ["01-01 09:00:00", "01-01 09:20:00", "01-01 09:40:00", "01-01 10:00:00"],
        ),
    ],
)
def test_ranges_steps_lists_and_names(expression: str, expected: list[str]) -> None:
    assert ticks(expression, len(expected)) == expected


@pytest.mark.parametrize(
    ("macro", "same_as"),
    [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
        ("@Daily", "0 0 * * *"),
    ],
)
def test_macros_are_vixie_nicknames_even_with_a_hash_id(macro: str, same_as: str) -> None:
    # croniter hashes macros ("@daily" -> "H H * * *") when given a hash_id; Vixie does not.
    assert ticks(macro, 3, hash_id="job-1") == ticks(same_as, 3)


def test_six_fields_put_seconds_first() -> None:
    assert ticks("*/20 30 9 * * *", 4) == [
        "01-01 09:30:00",
        "01-01 09:30:20",
        "01-01 09:30:40",
        "01-02 09:30:00",
    ]
    assert ticks("3-3 * * * * *", 2) == ["01-01 00:00:03", "01-01 00:01:03"]


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        # a-L is a..the month's last day: 31-L is the 31st, in the months that have one
        # (croniter reads 31-L as every day, 31-L/2 as the odd days).
        ("0 0 31-L * *", ["01-31", "03-31", "05-31", "07-31"]),
        ("0 0 31-L/2 * *", ["01-31", "03-31", "05-31"]),
        ("0 0 30-L * *", ["01-30", "01-31", "03-30", "03-31", "04-30"]),  # none in February
        ("0 0 28-L/2 * *", ["01-28", "01-30", "02-28", "03-28", "03-30"]),
        ("0 0 1,31-L 2-4 *", ["02-01", "03-01", "03-31", "04-01"]),
        # 7 is Sunday: 7-7 is a-a (not 0-7, the whole week); 7/n is 7..7, Sunday alone.
        ("0 0 * * 7-7", ["01-07", "01-14", "01-21"]),
        ("0 0 * * 7-7/2", ["01-07", "01-14"]),
        ("0 0 * * 7/2", ["01-07", "01-14", "01-21"]),
        ("0 0 * * 7/1", ["01-07", "01-14", "01-21"]),
        ("0 0 * * 7-0", ["01-07", "01-14"]),  # both ends Sunday
        ("0 0 * * 0-7/7", ["01-07", "01-14"]),
        # a/n in day_of_week runs to Saturday, as croniter and Quartz read it.
        ("0 0 * * 1/2", ["01-03", "01-05", "01-08", "01-10"]),  # Mon, Wed, Fri
        ("0 0 * * 5/1", ["01-05", "01-06", "01-12", "01-13"]),  # Fri, Sat
        ("0 0 * * fri/1", ["01-05", "01-06", "01-12"]),
        ("0 0 * * 6/1", ["01-06", "01-13"]),  # croniter: every day
        ("0 0 * * 0/3", ["01-03", "01-06", "01-07", "01-10"]),  # Sun, Wed, Sat
        ("0 0 * * 6-1", ["01-06", "01-07", "01-08", "01-13"]),  # Sat, Sun, Mon (wraps)
    ],
)
def test_last_day_ranges_sunday_as_7_and_weekday_steps(
    expression: str, expected: list[str]
) -> None:
    assert days(expression, len(expected)) == expected


def test_l_in_a_list_is_the_last_day_not_every_day() -> None:
    # croniter reads 1-27,29-31,L as every day of the month; 2024-02-28 is not February's last.
    feb_2024 = [f"02-{d:02}" for d in (*range(1, 28), 29)]
    assert days("0 0 29-27,L 2 *", 28) == feb_2024
    assert days("0 0 1-27,29-31,L 2 *", 28) == feb_2024
    assert not parse("0 0 29-27,L * *").every_day


# --- day of month / day of week (Vixie: AND if either starts with *, else OR) -------------------


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("0 0 1,15 * fri", ["01-05", "01-12", "01-15", "01-19", "01-26", "02-01"]),  # OR
        ("0 0 */2 * fri", ["01-05", "01-19", "02-09", "02-23"]),  # */2 starts with *: AND
        ("0 0 1-7 * */7", ["01-07", "02-04", "03-03"]),  # first Sunday of the month
        ("0 0 ? * MON", ["01-08", "01-15"]),  # Quartz ?: no specific value
        ("0 0 15 * ?", ["01-15", "02-15"]),
        ("0 0 13 * 5", ["01-05", "01-12", "01-13", "01-19"]),  # OR: Fridays and the 13th
    ],
)
def test_day_of_month_and_day_of_week_follow_vixie(expression: str, expected: list[str]) -> None:
    assert days(expression, len(expected)) == expected


# --- L, W, LW, #, nL ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("0 0 L * *", ["01-31", "02-29", "03-31", "04-30"]),
        ("0 0 31,L * *", ["01-31", "02-29", "03-31", "04-30"]),  # a list is a union
        ("0 0 25-L/3 * *", ["01-25", "01-28", "01-31", "02-25"]),
        # LW: last Monday-Friday (2024-03-31 is a Sunday, 2024-06-30 a Sunday).
        ("0 0 LW 3,6 *", ["03-29", "06-28"]),
        # nW: nearest Monday-Friday, never leaving the month (2024-06-01 is a Saturday,
        # 2024-06-15 a Saturday, 2024-09-01 a Sunday, 2024-03-31 a Sunday).
        ("0 0 1W 6,9 *", ["06-03", "09-02"]),
        ("0 0 15W 6 *", ["06-14"]),
        ("0 0 31W 2,3,4 *", ["03-29"]),  # no 31 February or 31 April: no tick
        ("0 0 1W,15 6 *", ["06-03", "06-15"]),
        # d#n: the nth weekday d of the month; unions with plain weekdays and with nL.
        ("0 0 * * 0#2", ["01-14", "02-11"]),
        ("0 0 * * FRI#5", ["03-29", "05-31"]),
        ("0 0 * * 1#1,5L", ["01-26", "02-05", "02-23", "03-04"]),
        ("0 0 * * 3,5L", ["01-03", "01-10", "01-17", "01-24", "01-26"]),
        # Quartz's 5L and FRIL, croniter's L5: the last Friday of the month.
        ("0 0 * * 5L", ["01-26", "02-23", "03-29"]),
        ("0 0 * * FRIL", ["01-26", "02-23", "03-29"]),
        ("0 0 * * L5", ["01-26", "02-23", "03-29"]),
        ("0 0 * * 7L", ["01-28", "02-25"]),
        # '#' is a day-of-week restriction like any other: ORed with day-of-month.
        ("0 0 8-9 * 0#2", ["01-08", "01-09", "01-14", "02-08", "02-09", "02-11"]),
        ("0 0 L * 1", ["01-08", "01-15", "01-22", "01-29", "01-31", "02-05"]),
    ],
)
def test_last_nearest_and_nth_day_spellings(expression: str, expected: list[str]) -> None:
    assert days(expression, len(expected)) == expected


# --- Jenkins H ----------------------------------------------------------------------------------


def test_h_is_stable_for_one_job_and_spreads_jobs() -> None:
    first = ticks("H H * * *", 2, hash_id="billing-report")
    assert first == ticks("H H * * *", 2, hash_id="billing-report")
    others = {tuple(ticks("H H * * *", 1, hash_id=f"job-{i}")) for i in range(20)}
    assert len(others) > 10
    assert ticks("H H * * *", 1) == ticks("H H * * *", 1, hash_id=None)  # the fixed seed


def test_h_forms_stay_inside_their_ranges() -> None:
    for i in range(50):
        job = f"job-{i}"
        spec = parse("H(0-29)/10 H(9-17) H * H", job)
        assert len(spec.minutes) == 3 and spec.minutes[0] < 10
        assert [m - spec.minutes[0] for m in spec.minutes] == [0, 10, 20]
        assert len(spec.hours) == 1 and 9 <= spec.hours[0] <= 17
        (day,) = spec.days
        assert 1 <= day <= 28  # Jenkins: H in day-of-month is 1-28, so every month has it
        assert len(spec.weekdays) == 1
        steps = parse("H/15 * * * *", job).minutes
        assert len(steps) == 4 and steps[0] < 15


def test_h_with_step_counts_as_a_wildcard_but_plain_h_is_fixed_time() -> None:
    assert parse("H H * * *", "j").fixed_time
    assert not parse("H/15 * * * *", "j").fixed_time
    assert not parse("0 H/2 * * *", "j").fixed_time
    assert parse("0 H(0-5)/2 * * *", "j").fixed_time


@pytest.mark.parametrize(
    ("expression", "fixed"),
    [
        ("0 2 * * *", True),
        ("30 1,2 * * *", True),
        ("0-59/30 2 * * *", True),
        ("*/5 2 * * *", False),
        ("0 * * * *", False),
        ("0 */2 * * *", False),
        ("@hourly", False),
        ("@daily", True),
        ("0 30 2 * * *", True),
        ("*/10 30 2 * * *", False),
    ],
)
def test_fixed_time_is_vixies_textual_rule(expression: str, fixed: bool) -> None:
    assert parse(expression).fixed_time is fixed


# --- refusals ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("0 0 30 2 *", "cron field day_of_month '30' is not valid: no day ever matches"),
        ("0 0 31 4,6,9,11 *", "cron field day_of_month '31' is not valid: no day ever"),
        ("0 0 * * L", "cron field day_of_week 'L' is not valid: L alone is ambiguous"),
        ("R * * * *", "cron field minute 'R' is not valid: R (random) is not allowed"),
        ("0 0 32W * *", "cron field day_of_month '32W' is not valid: 32 is outside 1-31"),
        ("0 0 * * 8L", "cron field day_of_week '8L' is not valid"),
        ("0 0 * * 5#6", "cron field day_of_week '5#6' is not valid"),
        ("H,5 * * * *", "cron field minute 'H,5' is not valid"),
        ("H(5-2) * * * *", "cron field minute 'H(5-2)' is not valid"),
        ("? * * * *", "cron field minute '?' is not valid"),
        ("0 0 * JANUARY *", "cron field month 'JANUARY' is not valid"),
        ("@reboot", "unknown macro '@reboot'"),
        ("0 0 1 1 * 2024 x", "has 7 fields"),
    ],
)
def test_refusals_name_the_field(expression: str, reason: str) -> None:
    with pytest.raises(InvalidDefinition) as info:
        validate_cron(expression)
    assert info.value.field == "schedule.expression"
    assert reason in info.value.reason


def test_expanding_does_not_grow_croniters_module_cache() -> None:
    # croniter stores every expanded expression in a module dict: one per hashed job would leak.
    before = len(EXPRESSIONS)
    for i in range(200):
        parse("H H * * 1#2", f"leak-probe-{i}")
    assert len(EXPRESSIONS) == before
