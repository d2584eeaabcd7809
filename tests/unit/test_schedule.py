"""Schedule maths: cron ticks (5 and 6 fields, UTC and zones), validation naming the field, once
and manual schedules, and the shared cases of /work/shared/cases/schedule-cases.json."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.decide import handle
from cronlog.errors import InvalidDefinition
from cronlog.job import JobState
from cronlog.model import (
    CatchupPolicy,
    DstGapPolicy,
    DstOverlapPolicy,
    JobSpec,
    Schedule,
    ScheduleKind,
    main_task,
)
from cronlog.schedule import (
    cron_ticks,
    next_tick,
    prev_ticks,
    validate_cron,
    validate_schedule,
    zone,
)
from cronlog.vocabulary import RunTrigger

CASES_PATH = Path("/work/shared/cases/schedule-cases.json")


def utc(text: str) -> datetime:
    """Parse ``2024-06-10T12:00:00Z`` (or without the Z) as an aware UTC instant."""
    return datetime.fromisoformat(text.removesuffix("Z")).replace(tzinfo=UTC)


def first_ticks(expression: str, tz: str, after: datetime, n: int) -> list[datetime]:
    return list(itertools.islice(cron_ticks(expression, tz, after), n))


def cron(expression: str, tz: str = "UTC", **kw: Any) -> Schedule:
    return Schedule(ScheduleKind.CRON, expression=expression, timezone=tz, **kw)


# --- the core must import with the pinned dependencies -------------------------------------


def test_core_imports_with_the_pinned_croniter() -> None:
    # Regression: schedule.py once did `from croniter import CroniterError`, a name croniter
    # 5.0.1 (pinned) exports only from croniter.croniter, so the core failed to import. A
    # fresh interpreter, so nothing this process imported first can mask it.
    result = subprocess.run(
        [sys.executable, "-c", "import cronlog.decide"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr[-800:]


# --- cron ticks ------------------------------------------------------------------------------

TICK_TABLE = [
    pytest.param(
        "*/15 * * * *",
        "UTC",
        "2024-06-10T12:07:00Z",
        [
            "2024-06-10T12:15:00Z",
            "2024-06-10T12:30:00Z",
            "2024-06-10T12:45:00Z",
            "2024-06-10T13:00:00Z",
        ],
        id="5-field-every-15-min-utc",
    ),
    pytest.param(
        "0 0 * * *",
        "UTC",
        "2024-06-10T00:00:00Z",
        ["2024-06-11T00:00:00Z", "2024-06-12T00:00:00Z"],
        id="5-field-after-is-exclusive",
    ),
    pytest.param(
        "0 9 * * 1-5",
        "UTC",
        "2024-06-07T09:00:00Z",  # a Friday
        ["2024-06-10T09:00:00Z", "2024-06-11T09:00:00Z"],
        id="5-field-weekdays-skip-the-weekend",
    ),
    pytest.param(
        "30 9 * * *",
        "Europe/Berlin",
        "2024-06-10T12:00:00Z",
        ["2024-06-11T07:30:00Z", "2024-06-12T07:30:00Z", "2024-06-13T07:30:00Z"],
        id="5-field-berlin-summer-cest",
    ),
    pytest.param(
        "30 9 * * *",
        "Europe/Berlin",
        "2024-01-10T12:00:00Z",
        ["2024-01-11T08:30:00Z", "2024-01-12T08:30:00Z"],
        id="5-field-berlin-winter-cet",
    ),
    pytest.param(
        "0 0 12 * * *",
        "Asia/Kolkata",
        "2024-06-10T00:00:00Z",
        ["2024-06-10T06:30:00Z", "2024-06-11T06:30:00Z"],
        id="6-field-half-hour-zone",
    ),
    pytest.param(
        "*/10 * * * * *",
        "UTC",
        "2024-06-10T00:00:05Z",
        ["2024-06-10T00:00:10Z", "2024-06-10T00:00:20Z", "2024-06-10T00:00:30Z"],
        id="6-field-seconds-first-utc",
    ),
    pytest.param(
        "15 30 9 * * *",
        "Europe/Berlin",
        "2024-06-10T07:30:15Z",
        ["2024-06-11T07:30:15Z", "2024-06-12T07:30:15Z"],
        id="6-field-seconds-first-berlin",
    ),
    pytest.param(
        "@daily",
        "UTC",
        "2024-06-10T00:00:00Z",
        ["2024-06-11T00:00:00Z", "2024-06-12T00:00:00Z"],
        id="macro-daily",
    ),
]


@pytest.mark.parametrize(("expression", "tz", "after", "expected"), TICK_TABLE)
def test_cron_ticks_are_the_next_utc_instants_strictly_after(
    expression: str, tz: str, after: str, expected: list[str]
) -> None:
    got = first_ticks(expression, tz, utc(after), len(expected))
    assert got == [utc(t) for t in expected]
    assert all(t.tzinfo is UTC for t in got)


def test_cron_ticks_accept_after_in_any_zone() -> None:
    after_berlin = utc("2024-06-10T12:00:00Z").astimezone(zone("Europe/Berlin"))
    assert first_ticks("30 9 * * *", "Europe/Berlin", after_berlin, 1) == [
        utc("2024-06-11T07:30:00Z")
    ]


def test_cron_ticks_refuse_a_naive_after() -> None:
    with pytest.raises(ValueError, match="naive"):
        first_ticks("* * * * *", "UTC", datetime(2024, 6, 10, 12), 1)


def test_next_tick_of_cron_schedule_is_strictly_after() -> None:
    schedule = cron("0 * * * *")
    assert next_tick(schedule, utc("2024-06-10T12:00:00Z")) == utc("2024-06-10T13:00:00Z")
    assert next_tick(schedule, utc("2024-06-10T11:59:59.999Z")) == utc("2024-06-10T12:00:00Z")


def test_next_tick_of_once_schedule_is_run_at_until_it_passes() -> None:
    run_at = utc("2024-06-10T12:00:00Z")
    schedule = Schedule(ScheduleKind.ONCE, run_at=run_at)
    assert next_tick(schedule, run_at - timedelta(days=3)) == run_at
    assert next_tick(schedule, run_at - timedelta(milliseconds=1)) == run_at
    assert next_tick(schedule, run_at) is None
    assert next_tick(schedule, run_at + timedelta(hours=1)) is None


def test_next_tick_of_manual_schedule_is_none() -> None:
    assert next_tick(Schedule(ScheduleKind.MANUAL), utc("2024-06-10T12:00:00Z")) is None


def test_ticks_are_strictly_after_a_sub_second_after() -> None:
    assert first_ticks("* * * * * *", "UTC", utc("2024-06-10T12:00:00.000001Z"), 1) == [
        utc("2024-06-10T12:00:01Z")
    ]
    assert first_ticks("* * * * * *", "UTC", utc("2024-06-10T11:59:59.999999Z"), 1) == [
        utc("2024-06-10T12:00:00Z")
    ]


# --- DST: policies for fixed-time jobs, real instants for wildcard jobs -------------------------
# Europe/Berlin 2024: 02:00 CET -> 03:00 CEST at 2024-03-31T01:00Z (gap 02:00-02:59);
# 03:00 CEST -> 02:00 CET at 2024-10-27T01:00Z (02:00-02:59 twice: 00:xxZ, then 01:xxZ).

SPRING, FALL = "2024-03-30T12:00:00Z", "2024-10-26T12:00:00Z"


@pytest.mark.parametrize(
    ("expression", "after", "gap", "overlap", "expected"),
    [
        # fixed-time in the gap: shift fires once at the gap's end; skip drops that day.
        (
            "30 2 * * *",
            SPRING,
            DstGapPolicy.SHIFT,
            DstOverlapPolicy.FIRST,
            ["2024-03-31T01:00:00Z", "2024-04-01T00:30:00Z"],
        ),
        (
            "30 2 * * *",
            SPRING,
            DstGapPolicy.SKIP,
            DstOverlapPolicy.FIRST,
            ["2024-04-01T00:30:00Z", "2024-04-02T00:30:00Z"],
        ),
        # several gap times (or a gap time and the real instant it shifts to) fire once.
        (
            "0,30 2 * * *",
            SPRING,
            DstGapPolicy.SHIFT,
            DstOverlapPolicy.FIRST,
            ["2024-03-31T01:00:00Z", "2024-04-01T00:00:00Z"],
        ),
        (
            "0 2,3 * * *",
            SPRING,
            DstGapPolicy.SHIFT,
            DstOverlapPolicy.FIRST,
            ["2024-03-31T01:00:00Z", "2024-04-01T00:00:00Z", "2024-04-01T01:00:00Z"],
        ),
        (
            "15 30 2 * * *",
            SPRING,
            DstGapPolicy.SHIFT,
            DstOverlapPolicy.FIRST,
            ["2024-03-31T01:00:00Z", "2024-04-01T00:30:15Z"],
        ),
        # fixed-time in the overlap: first pass, second pass, or both.
        (
            "30 2 * * *",
            FALL,
            DstGapPolicy.SHIFT,
            DstOverlapPolicy.FIRST,
            ["2024-10-27T00:30:00Z", "2024-10-28T01:30:00Z"],
        ),
        (
            "30 2 * * *",
            FALL,
            DstGapPolicy.SHIFT,
            DstOverlapPolicy.LAST,
            ["2024-10-27T01:30:00Z", "2024-10-28T01:30:00Z"],
        ),
        (
            "30 2 * * *",
            FALL,
            DstGapPolicy.SHIFT,
            DstOverlapPolicy.BOTH,
            ["2024-10-27T00:30:00Z", "2024-10-27T01:30:00Z", "2024-10-28T01:30:00Z"],
        ),
        # wildcard (minute starts with *): real instants only, whatever the policy.
        (
            "*/30 2 * * *",
            SPRING,
            DstGapPolicy.SHIFT,
            DstOverlapPolicy.FIRST,
            ["2024-04-01T00:00:00Z", "2024-04-01T00:30:00Z"],
        ),
        (
            "*/30 2 * * *",
            FALL,
            DstGapPolicy.SHIFT,
            DstOverlapPolicy.FIRST,
            [
                "2024-10-27T00:00:00Z",
                "2024-10-27T00:30:00Z",
                "2024-10-27T01:00:00Z",
                "2024-10-27T01:30:00Z",
                "2024-10-28T01:00:00Z",
            ],
        ),
    ],
)
def test_dst_policies_in_berlin(
    expression: str, after: str, gap: DstGapPolicy, overlap: DstOverlapPolicy, expected: list[str]
) -> None:
    got = itertools.islice(
        cron_ticks(expression, "Europe/Berlin", utc(after), dst_gap=gap, dst_overlap=overlap),
        len(expected),
    )
    assert list(got) == [utc(t) for t in expected]


def test_lord_howe_half_hour_gap_and_overlap() -> None:
    # +10:30 -> +11 at 2024-10-05T15:30Z (02:00-02:29 missing); +11 -> +10:30 at
    # 2024-04-06T15:00Z (01:30-01:59 twice).
    assert first_ticks("15 2 * * *", "Australia/Lord_Howe", utc("2024-10-05T00:00:00Z"), 2) == [
        utc("2024-10-05T15:30:00Z"),
        utc("2024-10-06T15:15:00Z"),
    ]
    both = cron_ticks(
        "45 1 * * *",
        "Australia/Lord_Howe",
        utc("2024-04-06T00:00:00Z"),
        dst_overlap=DstOverlapPolicy.BOTH,
    )
    assert list(itertools.islice(both, 3)) == [
        utc("2024-04-06T14:45:00Z"),
        utc("2024-04-06T15:15:00Z"),
        utc("2024-04-07T15:15:00Z"),
    ]


def test_next_tick_follows_the_schedules_policies_and_hash_id() -> None:
    skip = cron("30 2 * * *", "Europe/Berlin", dst_gap=DstGapPolicy.SKIP)
    assert next_tick(skip, utc(SPRING)) == utc("2024-04-01T00:30:00Z")
    last = cron("30 2 * * *", "Europe/Berlin", dst_overlap=DstOverlapPolicy.LAST)
    assert next_tick(last, utc(FALL)) == utc("2024-10-27T01:30:00Z")
    hashed = cron("H H * * *")
    assert next_tick(hashed, utc(SPRING), hash_id="job-a") == next(
        cron_ticks("H H * * *", "UTC", utc(SPRING), hash_id="job-a")
    )
    assert next_tick(hashed, utc(SPRING)) == next(cron_ticks("H H * * *", "UTC", utc(SPRING)))


# --- previous ticks -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "tz", "start"),
    [
        ("30 2 * * *", "Europe/Berlin", "2024-03-25T00:00:00Z"),
        ("30 2 * * *", "Europe/Berlin", "2024-10-20T00:00:00Z"),
        ("*/20 1-3 * * *", "Europe/Berlin", "2024-10-26T00:00:00Z"),
        ("0 */2 * * *", "America/Toronto", "2023-03-11T00:00:00Z"),
        ("15 2 * * *", "Australia/Lord_Howe", "2024-10-01T00:00:00Z"),
        ("*/15 1 * * *", "Australia/Lord_Howe", "2024-04-05T00:00:00Z"),
        ("0 0 29 * *", "UTC", "2023-12-01T00:00:00Z"),
        ("*/10 30 2 * * *", "America/New_York", "2024-11-02T12:00:00Z"),
    ],
)
@pytest.mark.parametrize("overlap", list(DstOverlapPolicy))
@pytest.mark.parametrize("gap", list(DstGapPolicy))
def test_prev_ticks_are_the_forward_ticks_in_reverse(
    expression: str, tz: str, start: str, gap: DstGapPolicy, overlap: DstOverlapPolicy
) -> None:
    forward = list(
        itertools.islice(
            cron_ticks(expression, tz, utc(start), dst_gap=gap, dst_overlap=overlap), 40
        )
    )
    end = forward[-1] + timedelta(microseconds=1)
    back = list(prev_ticks(expression, tz, end, len(forward), dst_gap=gap, dst_overlap=overlap))
    assert back == forward[::-1]
    assert list(prev_ticks(expression, tz, forward[-1], 1, dst_gap=gap, dst_overlap=overlap)) == [
        forward[-2]
    ]


def test_prev_ticks_count_and_bounds() -> None:
    before = utc("2024-03-15T00:00:00Z")
    assert list(prev_ticks("0 0 29 * *", "UTC", before, 0)) == []
    assert list(prev_ticks("0 0 29 2 *", "UTC", before, 3)) == [
        utc("2024-02-29T00:00:00Z"),
        utc("2020-02-29T00:00:00Z"),
        utc("2016-02-29T00:00:00Z"),
    ]
    with pytest.raises(ValueError, match="naive"):
        next(prev_ticks("* * * * *", "UTC", datetime(2024, 6, 10)))


# --- validation --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "cron_field"),
    [
        ("61 * * * *", "minute"),
        ("abc * * * *", "minute"),
        ("*/0 * * * *", "minute"),
        ("1-70 * * * *", "minute"),
        ("* 25 * * *", "hour"),
        ("* * 32 * *", "day_of_month"),
        ("* * 0 * *", "day_of_month"),
        ("* * * 13 *", "month"),
        ("* * * * 8", "day_of_week"),
        ("61 * * * * *", "second"),
        ("0 61 * * * *", "minute"),
        ("0 0 24 * * *", "hour"),
    ],
)
def test_invalid_cron_field_is_named(expression: str, cron_field: str) -> None:
    with pytest.raises(InvalidDefinition) as info:
        validate_cron(expression)
    assert info.value.field == "schedule.expression"
    assert info.value.reason.startswith(f"cron field {cron_field} ")
    assert repr(expression.split()[_field_index(expression, cron_field)]) in info.value.reason


def _field_index(expression: str, cron_field: str) -> int:
    names = ["minute", "hour", "day_of_month", "month", "day_of_week"]
    if len(expression.split()) == 6:
        names = ["second", *names]
    return names.index(cron_field)


@pytest.mark.parametrize("expression", ["", "* * *", "* * * *", "* * * * * * *"])
def test_wrong_field_count_is_rejected_on_schedule_expression(expression: str) -> None:
    with pytest.raises(InvalidDefinition) as info:
        validate_cron(expression)
    assert info.value.field == "schedule.expression"
    assert f"has {len(expression.split())} fields" in info.value.reason


@pytest.mark.parametrize(
    "expression",
    ["* * * * *", "*/5 9-17 * * 1-5", "0 0 1 1 *", "* * * * 7", "*/30 * * * * *", "@hourly"],
)
def test_valid_cron_expressions_pass(expression: str) -> None:
    validate_cron(expression)


@pytest.mark.parametrize("tz", ["Mars/Olympus", "", "utc", "Europe/Berln"])
def test_unknown_timezone_is_rejected_on_schedule_timezone(tz: str) -> None:
    with pytest.raises(InvalidDefinition) as info:
        validate_schedule(cron("* * * * *", tz))
    assert info.value.field == "schedule.timezone"
    assert repr(tz) in info.value.reason


@pytest.mark.parametrize(
    ("schedule", "field"),
    [
        (Schedule(ScheduleKind.CRON), "schedule.expression"),
        (Schedule(ScheduleKind.ONCE), "schedule.run_at"),
        (Schedule(ScheduleKind.MANUAL, timezone="Nope/Nope"), "schedule.timezone"),
        (cron("* * * * *", catchup_window=timedelta(seconds=-1)), "schedule.catchup_window_s"),
    ],
    ids=["cron-without-expression", "once-without-run_at", "manual-bad-zone", "negative-window"],
)
def test_invalid_schedule_names_the_field(schedule: Schedule, field: str) -> None:
    with pytest.raises(InvalidDefinition) as info:
        validate_schedule(schedule)
    assert info.value.field == field


@pytest.mark.parametrize(
    "schedule",
    [
        cron("0 9 * * *", "Europe/Berlin"),
        Schedule(ScheduleKind.ONCE, run_at=utc("2024-06-10T12:00:00Z")),
        Schedule(ScheduleKind.MANUAL),
    ],
    ids=["cron", "once", "manual"],
)
def test_valid_schedules_pass(schedule: Schedule) -> None:
    validate_schedule(schedule)


# --- /work/shared/cases/schedule-cases.json ---------------------------------------------------

ISSUE_3 = "issue 3: "
KNOWN_FAILING: dict[str, str] = {
    # case id -> why it still fails (marks it xfail(strict=True)); empty: every case passes.
}


def _load_cases() -> list[dict[str, Any]]:
    return json.loads(CASES_PATH.read_text())["cases"]  # type: ignore[no-any-return]


def _case_params(case_type: str) -> list[Any]:
    params = []
    for case in _load_cases():
        if case["type"] != case_type:
            continue
        variants = [case, *case.get("also", [])]
        for i, variant in enumerate(variants):
            case_id = case["id"] if i == 0 else f"{case['id']}/also{i}"
            marks = []
            if case_id in KNOWN_FAILING:
                marks.append(
                    pytest.mark.xfail(strict=True, reason=ISSUE_3 + KNOWN_FAILING[case_id])
                )
            params.append(pytest.param({**case, **variant}, id=case_id, marks=marks))
    return params


@pytest.mark.parametrize("case", _case_params("ticks"))
def test_shared_case_ticks(case: dict[str, Any]) -> None:
    validate_cron(case["expr"])
    expected = [utc(t) for t in case["expected_utc"]]
    assert first_ticks(case["expr"], case["tz"], utc(case["after"]), len(expected)) == expected


@pytest.mark.parametrize("case", _case_params("prev_ticks"))
def test_shared_case_prev_ticks(case: dict[str, Any]) -> None:
    expected = [utc(t) for t in case["expected_utc"]]
    got = list(
        itertools.islice(prev_ticks(case["expr"], case["tz"], utc(case["after"])), len(expected))
    )
    assert got == expected


# Scenario cases are folded through the real decider: each command is an Envelope handled at
# its record time, exactly as the adapter would.


@dataclass
class Scenario:
    """A command log being folded; records every event with the record time that caused it."""

    job_id: str = "scenario-job"
    state: JobState | None = None
    log: list[tuple[cmd.Envelope, datetime]] | None = None
    emitted: list[tuple[datetime, ev.Event]] | None = None
    seq: int = 0

    def __post_init__(self) -> None:
        self.log, self.emitted = [], []

    def send(self, command: cmd.Command, at: datetime, idem_key: str | None = None) -> None:
        self.seq += 1
        envelope = cmd.Envelope(
            idem_key=idem_key or f"c{self.seq}", job_id=self.job_id, command=command
        )
        self.deliver(envelope, at)

    def deliver(self, envelope: cmd.Envelope, at: datetime) -> None:
        assert self.log is not None and self.emitted is not None
        self.log.append((envelope, at))
        self.state, events = handle(self.state, envelope, at)
        self.emitted.extend((at, e) for e in events)

    def ticks(self, start: datetime, stop: datetime, every: timedelta) -> None:
        """Tick at start, start+every, ... while < stop."""
        t = start
        while t < stop:
            self.send(cmd.Tick(), t, idem_key=f"tick@{t.isoformat()}")
            t += every

    def scheduled_runs(self) -> list[tuple[datetime, ev.RunScheduled]]:
        assert self.emitted is not None
        return [
            (at, e)
            for at, e in self.emitted
            if isinstance(e, ev.RunScheduled) and e.trigger is not RunTrigger.MANUAL
        ]


def _spec(case: dict[str, Any], catchup: CatchupPolicy = CatchupPolicy.LATEST) -> JobSpec:
    return JobSpec(
        "scenario", cron(case["expr"], case["tz"], catchup=catchup), main_task(("true",))
    )


def _event_time(case: dict[str, Any], kind: str, key: str = "at_utc") -> datetime:
    return utc(next(e for e in case["events"] if e["type"] == kind)[key])


def _k8s_downtime(case: dict[str, Any]) -> Scenario:
    s = Scenario()
    start = utc(case["after"])
    down_from = _event_time(case, "scheduler_down", "from_utc")
    down_to = _event_time(case, "scheduler_down", "to_utc")
    s.send(cmd.RegisterJob(spec=_spec(case, CatchupPolicy(case["policy"]["catchup"]))), start)
    s.ticks(start, down_from, timedelta(seconds=30))  # the timer runs until the outage
    s.ticks(down_to, down_to + timedelta(minutes=2, seconds=1), timedelta(seconds=30))
    return s


def _pause_resume(case: dict[str, Any]) -> Scenario:
    s = Scenario()
    start = utc(case["after"])
    paused = _event_time(case, "pause")
    resumed = _event_time(case, "resume")
    s.send(cmd.RegisterJob(spec=_spec(case)), start)
    s.send(cmd.PauseJob(), paused)
    s.ticks(paused, resumed, timedelta(hours=1))
    s.send(cmd.ResumeJob(), resumed)
    last = max(utc(r["scheduled_for"]) for r in case["expected_runs"])
    s.ticks(resumed, last + timedelta(hours=1), timedelta(hours=1))
    return s


def _restart_duplicate(case: dict[str, Any]) -> Scenario:
    s = Scenario()
    fired = _event_time(case, "fired")
    restart = _event_time(case, "scheduler_restart")
    s.send(cmd.RegisterJob(spec=_spec(case)), fired - timedelta(hours=1))
    s.ticks(fired - timedelta(hours=1), fired + timedelta(hours=1), timedelta(minutes=15))
    # Restart: a new owner rebuilds the record by replaying the log from offset 0 (same events
    # as before), then the at-least-once consumer re-delivers the last ticks it had not
    # committed, then the timer resumes.
    assert s.log is not None and s.emitted is not None
    replayed: list[ev.Event] = []
    state: JobState | None = None
    for envelope, at in s.log:
        state, events = handle(state, envelope, at)
        replayed.extend(events)
    assert replayed == [e for _, e in s.emitted]
    assert state == s.state
    for envelope, at in s.log[-4:]:
        s.deliver(envelope, at)
    last = max(utc(r["scheduled_for"]) for r in case["expected_runs"])
    s.ticks(restart, last + timedelta(hours=1), timedelta(minutes=15))
    return s


def _manual_trigger_drift(case: dict[str, Any]) -> Scenario:
    s = Scenario()
    trigger_at = _event_time(case, "manual_trigger")
    start = trigger_at - timedelta(minutes=30)
    s.send(cmd.RegisterJob(spec=_spec(case)), start)
    s.ticks(start, trigger_at, timedelta(minutes=15))
    assert s.state is not None
    cursor = s.state.next_fire_at
    s.send(cmd.TriggerJob(), trigger_at)
    assert s.state.next_fire_at == cursor  # a manual run does not move the schedule
    assert s.emitted is not None
    manual = [
        e for _, e in s.emitted if isinstance(e, ev.RunScheduled) and e.trigger is RunTrigger.MANUAL
    ]
    assert [e.scheduled_for for e in manual] == [trigger_at]
    last = max(utc(r["scheduled_for"]) for r in case["expected_runs"])
    s.ticks(trigger_at, last + timedelta(hours=1), timedelta(hours=1))
    return s


SCENARIOS: dict[str, Callable[[dict[str, Any]], Scenario]] = {
    "K8S-42649-DOWNTIME-CATCHUP": _k8s_downtime,
    "CELERY-370-REENABLE-RUNS-NOW": _pause_resume,
    "OPENCLAW-42039-RESTART-REPLAY": _restart_duplicate,
    "HYDROSERVER-445-DRIFT": _manual_trigger_drift,
}


@pytest.mark.parametrize("case", _case_params("scenario"))
def test_shared_case_scenario(case: dict[str, Any]) -> None:
    build = SCENARIOS.get(case["id"])
    if build is None:
        pytest.fail(f"no scenario builder for {case['id']}: add one to SCENARIOS")
    s = build(case)
    runs = s.scheduled_runs()
    by_tick: dict[datetime, list[tuple[datetime, ev.RunScheduled]]] = {}
    for created_at, run in runs:
        by_tick.setdefault(run.scheduled_for, []).append((created_at, run))
    # Exactly the expected runs, each once (no double tick), nothing else in the horizon.
    assert sorted(by_tick) == sorted(utc(r["scheduled_for"]) for r in case["expected_runs"])
    for expected in case["expected_runs"]:
        made = by_tick[utc(expected["scheduled_for"])]
        assert len(made) == expected.get("count", 1)
        if "created_not_before" in expected:
            assert made[0][0] >= utc(expected["created_not_before"])
    if "no_runs_between" in case:
        lo, hi = (utc(t) for t in case["no_runs_between"])
        assert not [r for _, r in runs if lo < r.scheduled_for < hi]


def _iter_ids(params: list[Any]) -> Iterator[str]:
    for p in params:
        yield p.id


def test_every_shared_case_is_run() -> None:
    known = {c["id"] for c in _load_cases()}
    run = {
        i.split("/")[0]
        for t in ("ticks", "prev_ticks", "scenario")
        for i in _iter_ids(_case_params(t))
    }
    assert run == known
    assert {k.split("/")[0] for k in KNOWN_FAILING} <= known
