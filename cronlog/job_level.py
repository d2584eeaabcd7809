"""A one-task job's task written at job level, and its upcast into the one shape of JobSpec.

Every job has its tasks in ``JobSpec.task_specs``. Before issue 23 a one-task job kept its task
at job level instead (``command``, ``kind``, ``shell``, ``callable``, ``http``, ``isolation``;
its task names in ``tasks``) with no ``task_specs``, while a DAG job had ``task_specs`` and
left those fields at their defaults. Those fields stay in the Avro record ``cronlog.JobSpec``
(never remove a field) and in stored job records of format ``v2``: their readers
(``topology/wire/avro_mapping.py``, ``topology/wire/state_codec.py``) read them as a
``JobLevelTask`` and ``upcast`` the definition, and writers leave them at their defaults
(``written``). The API's and YAML's job-level ``command`` form is the same form
(``job_level``), and ``cronlog.ids.command_digest`` counts a definition in it, so a command
keeps its digest across the change. docs: schemas/README.md, "One shape of the job definition".
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from cronlog.model import MAIN_TASK, HttpTask, Isolation, JobSpec, TaskKind, TaskSpec


@dataclass(frozen=True, slots=True)
class JobLevelTask:
    """The job-level task fields of a definition (their Avro names; defaults as written).

    Attributes:
        command: argv of a one-task job's task (``kind=exec``). Default empty.
        kind: what it ran. Default ``exec``.
        shell: ``kind=shell`` only.
        callable: ``kind=python`` only.
        http: ``kind=http`` only.
        isolation: where a ``python`` call ran. Default ``process``.
        tasks: the job's task names: a one-task job's (``("main",)`` unless a producer named
            them), or a DAG's ``task_specs`` names in order. Default ``("main",)``.
    """

    command: tuple[str, ...] = ()
    kind: TaskKind = TaskKind.EXEC
    shell: str | None = None
    callable: str | None = None
    http: HttpTask | None = None
    isolation: Isolation = Isolation.PROCESS
    tasks: tuple[str, ...] = (MAIN_TASK,)


def written(spec: JobSpec) -> JobLevelTask:
    """Return the old fields as a writer of the one shape leaves them.

    Returns:
        Every field at its default but ``tasks``: the names of ``spec.task_specs`` (what a
        reader of the old shape builds runs from).
    """
    return JobLevelTask(tasks=spec.tasks)


def upcast(spec: JobSpec, old: JobLevelTask) -> JobSpec:
    """Return ``spec`` in the one shape.

    Args:
        spec: a definition as read, its ``task_specs`` as written.
        old: the old fields of the same record.

    Returns:
        ``spec`` itself when it has ``task_specs`` (a DAG, or a record of the one shape: the
        old fields are then unused, as they always were). Otherwise a record of the old
        shape: each name of ``old.tasks`` becomes a TaskSpec running the job-level task,
        with no dependencies and every other setting inherited from the job, which is how
        such a job ran. (A record of the one shape with no tasks at all, which validation
        refuses, writes no names and stays without tasks.)

    Determinism: a pure function; ``upcast(s, written(s)) == s`` for every ``s``.
    """
    if spec.task_specs:
        return spec
    tasks = tuple(
        TaskSpec(
            name,
            old.command,
            old.kind,
            old.shell,
            old.callable,
            old.http,
            isolation=old.isolation,
        )
        for name in old.tasks
    )
    return replace(spec, task_specs=tasks)


def job_level(spec: JobSpec) -> JobLevelTask | None:
    """Return ``spec``'s task as job-level fields, if it can be written so.

    Returns:
        For a job of one task named ``main`` with no dependencies and no setting of its own
        beyond what it runs (what the API's job-level ``command`` form gives, and what a
        one-task job of the old shape upcasts to), the fields that ``upcast`` turns back into
        ``spec``; for any other job None (its tasks can only be written as ``task_specs``).
    """
    if len(spec.task_specs) != 1:
        return None
    t = spec.task_specs[0]
    old = JobLevelTask(t.command, t.kind, t.shell, t.callable, t.http, t.isolation)
    return old if upcast(replace(spec, task_specs=()), old) == spec else None
