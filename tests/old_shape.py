"""Commands and job records written in the definition's old shape (before issue 23).

The old shape kept a one-task job's task at job level (``cronlog.job_level``). The dataclasses
can no longer say so, so these write the fields themselves; ``records/`` holds what the code
before the change stored.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

from fastavro import schemaless_writer
from fastavro.schema import load_schema

from cronlog import commands as cmd
from cronlog.job import JobState
from cronlog.job_level import JobLevelTask, job_level, upcast
from cronlog.model import JobSpec
from topology.wire.avro_mapping import plan_for
from topology.wire.codec import SCHEMA_DIR, SINGLE_OBJECT_MAGIC, schema_fingerprint
from topology.wire.state_codec import dump_state

RECORDS = Path(__file__).resolve().parent / "records"
"""What the code of commit 431be26 (before the one shape) stored: job records
``job_v2_one_task.txt`` (a shell job, registered and triggered: one run ready) and
``job_v2_named_tasks.txt`` (a job-level ``true`` under task names ``a``, ``b``), and the API
read model's ``read_model_v5_job_registered.json`` (a shell job's JobRegistered)."""


def v2_record(name: str) -> bytes:
    """Return the stored bytes of ``records/job_v2_<name>.txt``."""
    return (RECORDS / f"job_v2_{name}.txt").read_bytes()


def old_shape(env: cmd.Envelope, **job_level: Any) -> tuple[bytes, cmd.Envelope]:
    """Write a RegisterJob or UpdateJob as a producer of the old shape did.

    Args:
        env: the command; its definition's ``task_specs`` are left out.
        job_level: the job-level task fields (``JobLevelTask``'s), e.g. ``command=("true",)``.

    Returns:
        The record's value (single-object encoding, current schema), and the command the
        codec decodes it to (the definition upcast).
    """
    command = env.command
    assert isinstance(command, cmd.RegisterJob | cmd.UpdateJob)
    old = JobLevelTask(**job_level)
    bare: JobSpec = replace(command.spec, task_specs=())
    datum = plan_for(cmd.Envelope).to_avro(replace(env, command=replace(command, spec=bare)))
    datum["body"][1]["spec"].update(plan_for(JobLevelTask).to_avro(old))
    value = _write(SCHEMA_DIR / "cronlog.Command.avsc", datum)
    return value, replace(env, command=replace(command, spec=upcast(bare, old)))


def old_shape_writer(schema: Path) -> Callable[[cmd.Envelope], bytes]:
    """Return an encoder of commands as the code before the change wrote them.

    Args:
        schema: the ``cronlog.Command.avsc`` to write with (a version's, or the current).

    Returns:
        A function of an Envelope to its record value (single-object encoding): a
        definition of the job-level form (``cronlog.job_level.job_level``) with its task at
        job level and no ``task_specs``, any other as the one shape writes it (which is how
        the old shape wrote a DAG).
    """

    def encode(env: cmd.Envelope) -> bytes:
        datum = plan_for(cmd.Envelope).to_avro(env)
        command = env.command
        if isinstance(command, cmd.RegisterJob | cmd.UpdateJob):
            old = job_level(command.spec)
            if old is not None:
                spec = datum["body"][1]["spec"]
                spec.update(plan_for(JobLevelTask).to_avro(old), task_specs=[])
        return _write(schema, datum)

    return encode


def _write(schema_path: Path, datum: dict[str, Any]) -> bytes:
    schema = _schema(schema_path)
    out = io.BytesIO()
    out.write(SINGLE_OBJECT_MAGIC + schema_fingerprint(schema))
    schemaless_writer(out, schema, datum)  # fields the version lacks are left out
    return out.getvalue()


@cache
def _schema(path: Path) -> Any:
    return load_schema(str(path))


def as_v2(state: JobState) -> bytes:
    """Return a job record of ``state`` in format ``v2``, as the code before the change wrote.

    A job of the job-level form (``job_level``) keeps its task at job level, any other its
    ``task_specs``, with the names in ``tasks`` and the job-level fields at their defaults.
    """
    doc = json.loads(dump_state(state)[3:])
    old = job_level(state.spec) or JobLevelTask(tasks=state.spec.tasks)
    fields = json.loads(json.dumps(plan_for(JobLevelTask).to_avro(old)))  # same JSON names
    doc["spec"].update(fields)
    if job_level(state.spec) is not None:
        doc["spec"]["task_specs"] = []
    return b"v2:" + json.dumps(doc, separators=(",", ":")).encode()
