"""Every command field has a limit the codec checks at decode (issue 11, the poison pill).

Table-driven over ``cronlog.limits.COMMAND_LIMITS`` itself: for each field, a command with the
field just at its limit decodes to what was sent, and one just past it is a DecodeError whose
reason names the field path and the limit. Durations, instants and the record size are bounded
by type and checked here on a few fields each.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastavro.schema import load_schema
from pydantic import ValidationError

from cronlog import commands as cmd
from cronlog import limits
from cronlog.errors import CronlogError, InvalidDefinition
from cronlog.events import RunEvent
from cronlog.job_level import JobLevelTask
from cronlog.limits import COMMAND_LIMITS, Limit
from cronlog.model import (
    Exclusion,
    HttpHeader,
    HttpTask,
    JobSpec,
    RetryPolicy,
    Schedule,
    ScheduleKind,
    TaskKind,
    TaskSpec,
    main_task,
)
from cronlog.validation import validate_spec
from cronlog.vocabulary import FailureKind, UpstreamOutcome
from services.api.shapes.requests import BackfillIn
from tests.old_shape import old_shape
from topology.wire.avro_limits import bound_field
from topology.wire.avro_mapping import plan_for, record_names
from topology.wire.codec import (
    SCHEMA_DIR,
    DecodeError,
    decode_command,
    encode_command,
)

T = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
RUN = "r" + "0" * 24
SPEC = JobSpec("limits", Schedule(ScheduleKind.CRON, "*/5 * * * *"), main_task(("true",)))
SNAPSHOT = cmd.TaskSnapshot(task="main", state="failed", attempt=1, epoch=1)
LEASE: dict[str, Any] = {"run_id": RUN, "task": "main", "attempt": 1, "epoch": 1, "worker_id": "w1"}
BODIES: dict[str, Any] = {
    "BackfillJob": cmd.BackfillJob(ticks=(T,)),
    "ClaimTask": cmd.ClaimTask(run_id=RUN, task="main", attempt=1, worker_id="w1"),
    "RenewLease": cmd.RenewLease(**LEASE),
    "CompleteTask": cmd.CompleteTask(
        **LEASE,
        succeeded=False,
        exit_code=1,
        failure_kind=FailureKind.NONZERO_EXIT,
        output_tail="boom",
        started_at=T,
        finished_at=T,
    ),
    "ReleaseTask": cmd.ReleaseTask(**LEASE, reason="draining"),
    "CancelRun": cmd.CancelRun(run_id=RUN, task="main"),
    "PollTasks": cmd.PollTasks(worker_id="w1", slots=4, poll_id="p1"),
    "ReplayTask": cmd.ReplayTask(run_id=RUN, task="main", scheduled_for=T),
    "RerunTask": cmd.RerunTask(
        run_id=RUN,
        task="main",
        downstream=False,
        scheduled_for=T,
        trigger="schedule",
        tasks=(SNAPSHOT,),
    ),
    "UpstreamRunEnded": cmd.UpstreamRunEnded(
        upstream_job_id="up",
        upstream_run_id=RUN,
        upstream_scheduled_for=T,
        outcome=UpstreamOutcome.SUCCEEDED,
        upstream_event_id="e" * 32,
    ),
    "AskSlots": cmd.AskSlots(tenant="a", asker="j", count=1, rank_at=T),
    "ReturnSlots": cmd.ReturnSlots(tenant="a", asker="j", count=1),
    "GrantSlots": cmd.GrantSlots(tenant="a", count=1),
    "SetTenantLimits": cmd.SetTenantLimits(tenant="a", weight=1, max_running_tasks=4),
}
ITEMS: dict[type, Any] = {  # one valid item of each array element type
    str: "a",
    int: 1,
    datetime: T,
    FailureKind: FailureKind.TIMEOUT,
    TaskSpec: TaskSpec("a", ("true",)),
    Exclusion: Exclusion(weekdays=("mon",)),
    HttpHeader: HttpHeader("a", "b"),
    cmd.TaskSnapshot: SNAPSHOT,
}
SPEC_PATH = "Command.body.RegisterJob.spec"


def _register(spec: JobSpec) -> cmd.Envelope:
    return cmd.Envelope(idem_key="k", job_id="j", command=cmd.RegisterJob(spec=spec))


def holder(record: str, **change: Any) -> tuple[cmd.Envelope, str]:
    """Return a command holding one ``record`` with ``change`` applied, and the record's path."""
    http = HttpTask("http://example.com/")
    match record:
        case "Command":
            env = cmd.Envelope(idem_key="k", job_id="j", command=cmd.PauseJob())
            return replace(env, **change), "Command"
        case "JobSpec":
            return _register(replace(SPEC, **change)), SPEC_PATH
        case "Schedule":
            schedule = replace(SPEC.schedule, **change)
            return _register(replace(SPEC, schedule=schedule)), f"{SPEC_PATH}.schedule"
        case "Exclusion":
            window = replace(ITEMS[Exclusion], **change)
            schedule = replace(SPEC.schedule, exclusions=(window,))
            return (
                _register(replace(SPEC, schedule=schedule)),
                f"{SPEC_PATH}.schedule.exclusions[0]",
            )
        case "RetryPolicy":
            policy = replace(RetryPolicy(), **change)
            return _register(replace(SPEC, retry_policy=policy)), f"{SPEC_PATH}.retry_policy"
        case "TaskSpec":
            task = replace(ITEMS[TaskSpec], **change)
            spec = replace(SPEC, task_specs=(task,))
            return _register(spec), f"{SPEC_PATH}.task_specs[0]"
        case "HttpTask":
            return (
                _register(replace(SPEC, task_specs=main_task(http=replace(http, **change)))),
                f"{SPEC_PATH}.task_specs[0].http",
            )
        case "HttpHeader":
            header = replace(ITEMS[HttpHeader], **change)
            return (
                _register(
                    replace(SPEC, task_specs=main_task(http=replace(http, headers=(header,))))
                ),
                f"{SPEC_PATH}.task_specs[0].http.headers[0]",
            )
        case "TaskSnapshot":
            rerun = replace(BODIES["RerunTask"], tasks=(replace(SNAPSHOT, **change),))
            return cmd.Envelope(idem_key="k", job_id="j", command=rerun), (
                "Command.body.RerunTask.tasks[0]"
            )
    body = replace(BODIES[record], **change)
    return cmd.Envelope(idem_key="k", job_id="j", command=body), f"Command.body.{record}"


JOB_LEVEL = {f.name for f in dataclasses.fields(JobLevelTask)}
"""The fields of the old shape's job-level task, which ``cronlog.JobSpec`` still holds."""


def encoded(record: str, **change: Any) -> tuple[bytes, cmd.Envelope, str]:
    """``holder``'s command, encoded; a field of the old shape's job-level task in it."""
    if record == "JobSpec" and set(change) <= JOB_LEVEL:
        return (*old_shape(_register(SPEC), **change), SPEC_PATH)
    env, path = holder(record, **change)
    return encode_command(env), env, path


def _type_of(record: str, field: str) -> object:
    cls = {
        "Command": cmd.Envelope,
        "JobSpec": JobLevelTask if field in JOB_LEVEL else JobSpec,
        "Schedule": Schedule,
        "Exclusion": Exclusion,
        "RetryPolicy": RetryPolicy,
        "TaskSpec": TaskSpec,
        "HttpTask": HttpTask,
        "HttpHeader": HttpHeader,
        "TaskSnapshot": cmd.TaskSnapshot,
    }.get(record) or type(BODIES[record])
    hint = typing.get_type_hints(cls)[field]
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if typing.get_origin(hint) is not tuple and args else hint


def cases() -> list[tuple[str, str, object, object, str]]:
    """(record, field, value at the limit, value past it, the refusal after the field path)."""
    out = []
    for key, limit in COMMAND_LIMITS.items():
        record, field = key.split(".")
        tp = _type_of(record, field)
        out += [(record, field, *case) for case in _field_cases(tp, limit)]
    return out


def _field_cases(tp: object, limit: Limit) -> list[tuple[Any, Any, str]]:
    if tp is str:
        assert limit.chars is not None
        cap = limit.chars
        if limit.token:  # an identifier: one byte a character, and those characters only
            bad = f": ' ' is not an identifier character ({limits.ID_CHARS})"
            return [
                ("~" * cap, "~" * (cap + 1), f": {cap + 1} characters, at most {cap}"),
                ("a!#[]~", "a b", bad),
            ]
        return [("é" * cap, "é" * (cap + 1), f": {cap + 1} characters, at most {cap}")]
    if tp is int:
        assert limit.low is not None and limit.high is not None
        lo, hi = limit.low, limit.high
        return [
            (hi, hi + 1, f": {hi + 1} is out of range, must be {lo}..{hi}"),
            (lo, lo - 1, f": {lo - 1} is out of range, must be {lo}..{hi}"),
        ]
    (item_type, _) = typing.get_args(tp)
    item = ITEMS[item_type]
    assert limit.items is not None
    n = limit.items
    out: list[tuple[Any, Any, str]] = [
        ((item,) * n, (item,) * (n + 1), f": {n + 1} items, at most {n}")
    ]
    if limit.chars is not None:
        c = limit.chars
        out.append((("x" * c,), ("x" * (c + 1),), f"[0]: {c + 1} characters, at most {c}"))
    if limit.total_chars is not None:
        t = limit.total_chars
        half = "x" * (t // 2)
        out.append(((half, half), (half, half + "y"), f": {t + 1} characters in all, at most {t}"))
    if item_type is int:
        hi = typing.cast(int, limit.high)
        out.append(((hi,), (hi + 1,), f"[0]: {hi + 1} is out of range, must be {limit.low}..{hi}"))
    return out


CASES = cases()


@pytest.mark.parametrize(
    ("record", "field", "at", "past", "refusal"),
    CASES,
    ids=[f"{r}.{f}-{i}" for i, (r, f, _, _, _) in enumerate(CASES)],
)
def test_a_field_at_its_limit_decodes_and_past_it_is_refused_naming_it(
    record: str, field: str, at: object, past: object, refusal: str
) -> None:
    data, env, path = encoded(record, **{field: at})
    assert decode_command(data) == env
    data, env, path = encoded(record, **{field: past})
    with pytest.raises(DecodeError) as info:
        decode_command(data)
    assert info.value.reason == f"{path}.{field}{refusal}"


def test_the_poison_pill_of_issue_11_is_refused_naming_idem_key() -> None:
    env = cmd.Envelope(idem_key="k" * 1_040_000, job_id="j", command=cmd.TriggerJob())
    with pytest.raises(DecodeError) as info:
        decode_command(encode_command(env))
    assert info.value.reason == "Command.idem_key: 1040000 characters, at most 512"


def test_a_record_past_the_size_limit_is_refused_even_with_every_field_in_bounds() -> None:
    tasks = tuple(TaskSpec(f"t{i}", ("x" * 60_000,)) for i in range(14))  # 14 x 60 KB
    spec = replace(SPEC, task_specs=tasks)
    data = encode_command(_register(spec))
    assert len(data) > limits.MAX_COMMAND_RECORD_BYTES
    with pytest.raises(DecodeError) as info:
        decode_command(data)
    assert info.value.reason == (
        f"Command: {len(data)} bytes, at most {limits.MAX_COMMAND_RECORD_BYTES}"
    )
    smaller = replace(spec, task_specs=tasks[:12])
    assert decode_command(encode_command(_register(smaller))).command == cmd.RegisterJob(
        spec=smaller
    )


MAX_MS = limits.MAX_DURATION_MS
DURATIONS = [("JobSpec", "timeout"), ("Schedule", "misfire_grace"), ("RetryPolicy", "backoff")]


@pytest.mark.parametrize(("record", "attr"), DURATIONS)
def test_a_duration_must_lie_in_zero_to_ten_years(record: str, attr: str) -> None:
    longest = timedelta(milliseconds=MAX_MS)
    env, path = holder(record, **{attr: longest})
    assert decode_command(encode_command(env)) == env
    for bad in (longest + timedelta(milliseconds=1), timedelta(milliseconds=-1)):
        env, path = holder(record, **{attr: bad})
        with pytest.raises(DecodeError) as info:
            decode_command(encode_command(env))
        ms = bad // timedelta(milliseconds=1)
        assert info.value.reason == (
            f"{path}.{attr}_ms: {ms} ms is out of range, must be 0..{MAX_MS} ms"
        )


RANGE = "must be 1970-01-01T00:00:00.000Z..9000-12-31T23:59:59.999Z"
INSTANTS = [
    ("CompleteTask", "started_at", ""),
    ("ReplayTask", "scheduled_for", ""),
    ("UpstreamRunEnded", "upstream_scheduled_for", ""),
    ("Schedule", "run_at", ""),
    ("BackfillJob", "ticks", "[0]"),
]


@pytest.mark.parametrize(("record", "attr", "index"), INSTANTS)
def test_an_instant_must_lie_in_the_years_1970_to_9000(record: str, attr: str, index: str) -> None:
    def at(instant: datetime) -> object:
        return (instant,) if index else instant

    for ok in (limits.EARLIEST, limits.LATEST):
        env, path = holder(record, **{attr: at(ok)})
        assert decode_command(encode_command(env)) == env
    for bad, shown in (
        (limits.EARLIEST - timedelta(milliseconds=1), "1969-12-31T23:59:59.999Z"),
        (limits.LATEST + timedelta(milliseconds=1), "9001-01-01T00:00:00.000Z"),
    ):
        env, path = holder(record, **{attr: at(bad)})
        with pytest.raises(DecodeError) as info:
            decode_command(encode_command(env))
        assert info.value.reason == f"{path}.{attr}{index}: {shown} is out of range, {RANGE}"


def test_an_instant_in_a_later_array_item_names_its_index() -> None:
    ticks = (T, T, datetime(1960, 1, 1, tzinfo=UTC), T)
    env, path = holder("BackfillJob", ticks=ticks)
    with pytest.raises(DecodeError) as info:
        decode_command(encode_command(env))
    assert info.value.reason.startswith(f"{path}.ticks[2]: 1960-01-01T00:00:00.000Z")


def test_optional_fields_left_empty_pass() -> None:
    env, _ = holder("CompleteTask", exit_code=None, failure_kind=None)
    assert decode_command(encode_command(env)) == env
    env, _ = holder("Schedule", expression=None, max_runs=None, after_job_id=None)
    assert decode_command(encode_command(env)) == env


# -- the table itself ------------------------------------------------------------------------


def _command_fields() -> set[str]:
    schema = load_schema(str(SCHEMA_DIR / "cronlog.Command.avsc"))
    return {
        f"{record.rpartition('.')[2]}.{field}"
        for record, fields in record_names(schema, {}).items()
        for field in fields
    }


def test_every_limit_names_a_field_of_a_command_record() -> None:
    assert set(COMMAND_LIMITS) - _command_fields() == set()


def test_every_string_integer_and_array_field_of_a_command_has_a_limit() -> None:
    # The bounded plan refuses to build otherwise; building it is the check.
    plan_for.cache_clear()
    assert plan_for(cmd.Envelope, True).bounds is not None
    with pytest.raises(CronlogError, match=r"ClaimTask\.nickname has no limit"):
        bound_field("ClaimTask", "nickname", str, None)


def test_the_limits_accept_every_definition_the_core_accepts_at_its_own_bounds() -> None:
    # The core's validation (and so the API) never lets through what the decoder refuses.
    argv = ("x" * (limits.MAX_COMMAND_BYTES - limits.MAX_ARGV_ITEMS + 1),) + ("",) * (
        limits.MAX_ARGV_ITEMS - 1
    )
    spec = replace(SPEC, name="n" * limits.MAX_NAME_CHARS, task_specs=main_task(argv))
    validate_spec(spec)
    assert decode_command(encode_command(_register(spec))).command == cmd.RegisterJob(spec=spec)


def test_event_plans_are_not_bounded() -> None:
    # Events written before the limits (or with fields only events have) still decode.
    assert all(plan_for(t).bounds is None for t in (RunEvent, JobSpec, cmd.TaskSnapshot))


# -- the core and the API refuse, naming the field, what the decoder would ------------------


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (replace(SPEC, schedule=Schedule(ScheduleKind.CRON, "* " * 600)), "schedule.expression"),
        (
            replace(SPEC, task_specs=main_task(("",) * (limits.MAX_ARGV_ITEMS + 1))),
            "tasks[0].command",
        ),
        (
            replace(SPEC, task_specs=main_task(kind=TaskKind.PYTHON, callable="m." * 600 + ":f")),
            "tasks[0].callable",
        ),
        (
            replace(
                SPEC,
                task_specs=main_task(
                    kind=TaskKind.HTTP,
                    http=HttpTask("http://h/", headers=(HttpHeader("a", ""),) * 257),
                ),
            ),
            "tasks[0].http.headers",
        ),
        (
            replace(
                SPEC,
                task_specs=main_task(
                    kind=TaskKind.HTTP, http=HttpTask("http://h/", success_codes=(200,) * 501)
                ),
            ),
            "tasks[0].http.success_codes",
        ),
        (
            replace(
                SPEC,
                schedule=replace(SPEC.schedule, exclusions=(Exclusion(weekdays=("mon",) * 8),)),
            ),
            "schedule.exclusions[0].weekdays",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_validation_refuses_what_the_api_could_send_past_a_limit(spec: JobSpec, field: str) -> None:
    with pytest.raises(InvalidDefinition) as info:
        validate_spec(spec)
    assert info.value.field == field


@pytest.mark.parametrize("instant", ["1970-01-01T00:30:00+01:00", "9000-12-31T23:00:00-05:00"])
def test_the_api_checks_instants_in_utc_as_the_decoder_does(instant: str) -> None:
    with pytest.raises(ValidationError, match="between the years 1970 and 9000"):
        BackfillIn.model_validate({"start": instant, "end": "2024-01-01T00:00:00Z"})


def _shown(value: int) -> str:
    for name, power in (("2^31", 2**31), ("2^62", 2**62)):
        for shift, suffix in ((0, ""), (1, " - 1")):
            if abs(value) == power - shift:
                return f"{'-' if value < 0 else ''}{name}{suffix}"
    return f"{value:,}"


def _row(key: str, limit: Limit) -> str:
    each = "each " if limit.items is not None else ""
    parts = [f"{limit.items:,} items"] if limit.items is not None else []
    if limit.chars is not None:
        parts.append(f"{each}{limit.chars:,} characters")
    if limit.total_chars is not None:
        parts.append(f"{limit.total_chars:,} characters in all")
    if limit.low is not None and limit.high is not None:
        parts.append(f"{each}{_shown(limit.low)} .. {_shown(limit.high)}")
    return f"| `{key}` | {', '.join(parts)} |"


def test_the_readme_documents_every_limit_as_the_table_has_it() -> None:
    readme = (SCHEMA_DIR / "README.md").read_text()
    documented = {line.split("`")[1] for line in readme.splitlines() if line.startswith("| `")}
    assert [k for k in COMMAND_LIMITS if _row(k, COMMAND_LIMITS[k]) not in readme] == []
    assert {k for k in documented if "." in k and k[0].isupper()} == set(COMMAND_LIMITS)
