"""One shape of the job definition (issue 23): every job has its tasks in ``task_specs``.

Definitions of the old shape (a one-task job's task at job level) keep working: on the wire
(the Avro codec upcasts them), in stored job records (``v2``, upcast on load), in command
digests (a re-delivery across the change is still a re-delivery), in the API's answers.
"""

from __future__ import annotations

import io
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from fastavro import schemaless_reader
from fastavro.schema import load_schema

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.decide import handle
from cronlog.ids import command_digest
from cronlog.job_level import JobLevelTask, job_level, upcast, written
from cronlog.model import (
    Isolation,
    JobSpec,
    RetryPolicy,
    Schedule,
    ScheduleKind,
    TaskKind,
    TaskSpec,
    main_task,
)
from services.api.readmodel.event_json import dump_run_event, load_run_event
from services.api.shapes.definition import JobDefinition
from services.api.shapes.mapping import spec_to_json, to_spec
from tests.old_shape import RECORDS, old_shape, v2_record
from topology.wire.avro_mapping import plan_for
from topology.wire.codec import (
    SCHEMA_DIR,
    decode_command,
    decode_event,
    encode_command,
    encode_event,
)
from topology.wire.state_codec import dump_state, is_current, load_state

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
CRON = Schedule(ScheduleKind.CRON, "*/5 * * * *", "Europe/Berlin")
ONE = JobSpec("one", CRON, main_task(("echo", "hi")), retry_policy=RetryPolicy(max_attempts=3))
DAG = JobSpec("dag", CRON, (TaskSpec("a", ("x",)), TaskSpec("b", ("y",), depends_on=("a",))))


def _register(spec: JobSpec, key: str = "k") -> cmd.Envelope:
    return cmd.Envelope(idem_key=key, job_id="j", command=cmd.RegisterJob(spec=spec))


# -- the wire ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "job_level_fields",
    [
        {"command": ("echo", "hi")},
        {"kind": TaskKind.SHELL, "shell": "echo hi"},
        {"kind": TaskKind.PYTHON, "callable": "m:f", "isolation": Isolation.THREAD},
        {"command": ("true",), "tasks": ("a", "b")},
    ],
)
def test_an_old_shape_definition_decodes_to_one_task_per_name(
    job_level_fields: dict[str, object],
) -> None:
    data, upcast_env = old_shape(_register(ONE), **job_level_fields)
    decoded = decode_command(data)
    assert decoded == upcast_env
    assert isinstance(decoded.command, cmd.RegisterJob)
    old = JobLevelTask(**job_level_fields)  # type: ignore[arg-type]
    assert decoded.command.spec.tasks == old.tasks
    for task in decoded.command.spec.task_specs:
        assert (task.command, task.kind, task.shell, task.callable, task.isolation) == (
            old.command,
            old.kind,
            old.shell,
            old.callable,
            old.isolation,
        )
        assert task.depends_on == () and task.retry_policy is None and task.timeout is None


def test_the_one_shape_round_trips_and_writes_the_job_level_fields_at_their_defaults() -> None:
    for spec in (ONE, DAG, replace(ONE, task_specs=())):
        env = _register(spec)
        assert decode_command(encode_command(env)) == env
        datum = plan_for(JobSpec).to_avro(spec)
        assert not datum["command"] and datum["kind"] == "exec" and datum["shell"] is None
        assert list(datum["tasks"]) == list(spec.tasks)


def test_a_reader_of_the_last_shipped_schema_reads_a_one_task_job_as_a_dag_of_main() -> None:
    # forward compatibility: a v3 consumer builds runs from ``tasks`` and reads task_specs
    data = encode_command(_register(ONE))
    writer = load_schema(str(SCHEMA_DIR / "cronlog.Command.avsc"))
    reader = load_schema(str(SCHEMA_DIR / "history" / "v3" / "cronlog.Command.avsc"))
    body = schemaless_reader(io.BytesIO(data[10:]), writer, reader, return_record_name=True)
    spec = body["body"][1]["spec"]
    assert spec["tasks"] == ["main"] and spec["command"] == []
    assert [(t["name"], t["command"], t["kind"]) for t in spec["task_specs"]] == [
        ("main", ["echo", "hi"], "exec")
    ]


def test_job_registered_of_the_old_shape_decodes_upcast() -> None:
    _, env = old_shape(_register(ONE), command=("echo", "hi"))
    upcast_spec = env.command.spec  # type: ignore[union-attr]
    assert upcast_spec == ONE
    event = ev.RunEvent(
        event_id="e", job_id="j", at=T0, idem_key="k", index=0,
        event=ev.JobRegistered(spec=upcast_spec, next_fire_at=None),
    )  # fmt: skip
    assert decode_event(encode_event(event)) == event


# -- the fields of the old shape -------------------------------------------------------------


@pytest.mark.parametrize(
    "spec",
    [
        ONE,
        DAG,
        JobSpec("sh", CRON, main_task(kind=TaskKind.SHELL, shell="echo")),  # noqa: S604
        JobSpec("named", CRON, (TaskSpec("a", ("x",)),)),
        JobSpec("own", CRON, (replace(main_task(("x",))[0], timeout=timedelta(seconds=5)),)),
    ],
)
def test_job_level_is_the_inverse_of_upcast_where_it_exists(spec: JobSpec) -> None:
    old = job_level(spec)
    assert upcast(spec, written(spec)) == spec
    if old is not None:
        assert upcast(replace(spec, task_specs=()), old) == spec
    assert (old is not None) == (spec.name in ("one", "sh"))


# -- the digest of a command -------------------------------------------------------------------


S = Schedule(ScheduleKind.CRON, "*/5 * * * *", "Europe/Berlin")
DIGESTS_BEFORE = [  # computed by the code of commit 431be26, with the old shape's JobSpec
    (JobSpec("one", S, main_task(("echo", "hi")), retry_policy=RetryPolicy(max_attempts=3)),
     "568ef93e4a18d5fa", "ac1a666a72210978"),
    (JobSpec("sh", S, main_task(kind=TaskKind.SHELL, shell="echo hi")),  # noqa: S604
     "b27e40b11b0f4711", "81dff73e9082d1a3"),
    (JobSpec("py", S, main_task(kind=TaskKind.PYTHON, callable="m:f", isolation=Isolation.THREAD)),
     "f0aef29fac2f6436", "5719fd06661ef1f6"),
    (JobSpec("dag", S, (TaskSpec("a", ("x",)), TaskSpec("b", ("y",), depends_on=("a",)))),
     "83557d2f535a5839", "5ae0940002b1f0ca"),
]  # fmt: skip


@pytest.mark.parametrize(("spec", "register", "update"), DIGESTS_BEFORE)
def test_a_definition_keeps_the_digest_it_had_in_the_old_shape(
    spec: JobSpec, register: str, update: str
) -> None:
    assert command_digest(cmd.RegisterJob(spec=spec)) == register
    assert command_digest(cmd.UpdateJob(spec=spec)) == update


# -- stored job records --------------------------------------------------------------------


def test_a_v2_record_of_a_one_task_job_loads_upcast_and_is_written_back_as_v3() -> None:
    old = v2_record("one_task")
    assert old.startswith(b"v2:") and not is_current(old)
    state = load_state(old)
    assert state.spec.task_specs == main_task(kind=TaskKind.SHELL, shell="echo hi")  # noqa: S604
    assert state.spec.retry_policy.max_attempts == 3
    assert [t.task for r in state.runs for t in r.tasks] == ["main"]
    new = dump_state(state)
    assert new.startswith(b"v3:") and is_current(new)
    assert load_state(new) == state


def test_a_v2_record_with_task_names_gets_one_task_per_name() -> None:
    state = load_state(v2_record("named_tasks"))
    assert state.spec.task_specs == (TaskSpec("a", ("true",)), TaskSpec("b", ("true",)))
    assert state.spec.max_active_tasks == 1


def test_the_registration_in_a_v2_record_is_still_a_re_delivery() -> None:
    # The record holds the digest the old code computed; the same command decoded now (its
    # definition upcast) must be recognised, not refused as a re-use of the key.
    state = load_state(v2_record("one_task"))
    spec = state.spec
    register = cmd.Envelope(idem_key="k0", job_id="legacy", command=cmd.RegisterJob(spec=spec))
    after, events = handle(state, register, T0 + timedelta(minutes=1))
    assert events == [] and after == state
    pause = cmd.Envelope(idem_key="p", job_id="legacy", command=cmd.PauseJob())
    _, events = handle(state, pause, T0 + timedelta(minutes=1))
    assert events == [ev.JobPaused()]


# -- the API -------------------------------------------------------------------------------


def test_a_definition_the_read_model_stored_in_the_old_shape_loads_upcast() -> None:
    stored = (RECORDS / "read_model_v5_job_registered.json").read_bytes()
    record = load_run_event(stored)
    assert isinstance(record.event, ev.JobRegistered)
    assert record.event.spec.task_specs == main_task(kind=TaskKind.SHELL, shell="echo hi")  # noqa: S604
    assert load_run_event(dump_run_event(record)) == record


def test_the_api_shows_a_one_task_job_at_job_level_and_a_dag_with_its_tasks() -> None:
    one = spec_to_json(ONE)
    assert (one["command"], one["tasks"]) == (["echo", "hi"], [])
    dag = spec_to_json(DAG)
    assert dag["command"] == [] and [t["name"] for t in dag["tasks"]] == ["a", "b"]
    for spec in (ONE, DAG):
        assert to_spec(JobDefinition.model_validate(spec_to_json(spec))) == spec
