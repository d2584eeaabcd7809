"""Can a job's table record outgrow the fold's limit? The API's answer before registering it.

The fold refuses every command whose resulting job record (``topology.wire.state_codec``) exceeds
``topology.fold.record_limits.MAX_RECORD_BYTES`` (``record_too_large``). A definition whose record
could grow past it would be registered, then see its ticks or claims refused. So the API builds the
largest record the job's own schedule can give it and encodes it with the fold's codec. Every
field a producer chooses is at the wire's limit (``cronlog/limits.py``), of the costliest
character of the stored JSON (``state_codec.WORST_CHAR``, 6 bytes; identifiers, such as
worker and run ids, are of ``cronlog.limits.ID_CHARS``: one byte):

- the definition (``JobSpec``) as stored;
- ``max_active_runs`` active runs, plus the one a ``buffer_one`` job holds, every task of each
  claimed, with every field at its longest: a worker id of ``MAX_WORKER_ID_CHARS`` characters,
  every instant set, the largest attempt and epoch, the most lease lapses a task can count,
  the longest state and trigger names;
- every dedupe marker slot full (``MAX_APPLIED_MARKERS`` + ``MAX_RENEWAL_MARKERS``), added the
  way the fold adds them, for idem_keys of ``MAX_IDEM_KEY_CHARS`` characters (a marker is a
  fixed-size digest of its key, ``cronlog.ids.idem_marker``), user markers with their digest;
- a full queue: ``max_queued_runs`` queued runs; an ``after`` job's carry its upstream job and
  an upstream run id of ``MAX_RUN_ID_CHARS`` characters (other jobs' queued runs have none).

The definition is refused when that record exceeds ``MAX_RECORD_BYTES``. Not budgeted here:
runs outside ``max_active_runs`` (manual, backfill and replay runs, runs reopened by a rerun)
and the queued runs an earlier ``after`` definition left behind; their commands and the fold's
own refusal bound them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime

from cronlog import commands as cmd
from cronlog.ids import command_digest
from cronlog.job import (
    MAX_APPLIED_MARKERS,
    MAX_RENEWAL_MARKERS,
    Buffered,
    JobState,
    Queued,
    Run,
    TaskInstance,
)
from cronlog.leases import lease_digest
from cronlog.limits import COUNTER, MAX_IDEM_KEY_CHARS, MAX_RUN_ID_CHARS, MAX_WORKER_ID_CHARS
from cronlog.model import JobSpec, ScheduleKind
from cronlog.vocabulary import JobStatus, RunTrigger, TaskState
from topology.fold.record_limits import MAX_RECORD_BYTES
from topology.wire.state_codec import WORST_CHAR, dump_state

ID_CHAR = "~"
"""An identifier's costliest character: one byte stored (``cronlog.limits.ID_CHARS``)."""
WORKER_ID = ID_CHAR * MAX_WORKER_ID_CHARS
"""The costliest worker id a lease can hold (128 bytes stored: worker ids are identifiers)."""
IDEM_KEY = WORST_CHAR * MAX_IDEM_KEY_CHARS
"""The costliest idem_key a command can carry; its marker is what the record keeps."""
UPSTREAM_RUN_ID = ID_CHAR * MAX_RUN_ID_CHARS
"""The costliest upstream run id an ``after`` job's queued run can carry."""
_LATEST = datetime(9000, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)
_COUNT = COUNTER[1]  # the largest attempt / epoch on the wire
_TOTAL = 2**62  # runs_fired, incarnation: counters with no wire bound
_STATE = max(TaskState, key=lambda s: len(s.value))
_TRIGGER = max(RunTrigger, key=lambda t: len(t.value))
_STATUS = max(JobStatus, key=lambda s: len(s.value))


@dataclass(frozen=True, slots=True)
class RecordTooLarge(Exception):
    """The job's record could exceed ``MAX_RECORD_BYTES``.

    Attributes:
        field: the field to change (``max_queued_runs`` when a shorter queue would fit,
            ``max_active_runs`` when fewer runs would fit, else the whole definition, ``""``).
        reason: the estimate and the limit, in bytes.
    """

    field: str
    reason: str


def _run(spec: JobSpec, n: int) -> Run:
    task = TaskInstance(
        task="",
        state=_STATE,
        attempt=_COUNT,
        epoch=_COUNT,
        worker_id=WORKER_ID,
        lease_expires_at=_LATEST,
        retry_at=_LATEST,
        deadline_at=_LATEST,
        first_attempt=_COUNT,
        lease_expiries=spec.max_lease_expiries + 1,  # the lapse past the bound ends it
        lease_token_digest=lease_digest("worst"),  # always 32 hex digits
    )
    return Run(
        run_id=f"r{n:024x}",
        scheduled_for=_LATEST,
        trigger=_TRIGGER,
        tasks=tuple(replace(task, task=name) for name in spec.tasks),
        timeout_at=_LATEST,
    )


def _queued(spec: JobSpec, n: int) -> Queued:
    after = spec.schedule.after_job_id if spec.schedule.kind is ScheduleKind.AFTER else None
    upstream_run = UPSTREAM_RUN_ID if after is not None else None
    return Queued(f"r{n:024x}", _LATEST, _TRIGGER, after, upstream_run)


def _full_windows(state: JobState) -> JobState:
    """Return ``state`` with both marker windows full of the costliest keys' markers."""
    digest = command_digest(cmd.PauseJob())  # every command digest has the same size
    for _ in range(MAX_APPLIED_MARKERS):
        state = state.with_applied(IDEM_KEY, digest)
    for _ in range(MAX_RENEWAL_MARKERS):
        state = state.with_renewal(IDEM_KEY)
    return state


def worst_case_state(job_id: str, spec: JobSpec, runs: int | None = None) -> JobState:
    """Return the largest record job ``job_id`` can reach (see the module), unencoded.

    Args:
        job_id: the job's id (it is part of the record).
        spec: a definition the core's ``validate_spec`` accepted (so at most 1000 task
            instances across ``max_active_runs`` runs).
        runs: active runs to budget; default ``spec.max_active_runs``.
    """
    count = spec.max_active_runs if runs is None else runs
    state = JobState(
        job_id=job_id,
        spec=spec,
        status=_STATUS,
        clock=_LATEST,
        next_fire_at=_LATEST,
        runs=tuple(_run(spec, n) for n in range(count)),
        runs_fired=_TOTAL,
        incarnation=_TOTAL,
        buffered=Buffered(f"r{count:024x}", _LATEST, _TRIGGER),
        queue=tuple(_queued(spec, n) for n in range(spec.max_queued_runs)),
    )
    return _full_windows(state)


def worst_case_record_bytes(job_id: str, spec: JobSpec, runs: int | None = None) -> int:
    """Return the size of the largest record job ``job_id`` can reach, bytes (see the module).

    Args:
        job_id: the job's id (it is part of the record).
        spec: a definition the core's ``validate_spec`` accepted.
        runs: active runs to budget; default ``spec.max_active_runs``.
    """
    return len(dump_state(worst_case_state(job_id, spec, runs)))


def _most_runs(job_id: str, spec: JobSpec) -> int:
    """Return the most active runs whose worst record fits (at least 1: the caller checked)."""
    low, high = 1, spec.max_active_runs - 1  # low fits, spec.max_active_runs does not
    while low < high:
        mid = (low + high + 1) // 2
        if worst_case_record_bytes(job_id, spec, runs=mid) <= MAX_RECORD_BYTES:
            low = mid
        else:
            high = mid - 1
    return low


def check_record_budget(job_id: str, spec: JobSpec) -> int:
    """Refuse a definition whose job record could exceed the fold's ``MAX_RECORD_BYTES``.

    Args:
        job_id: the job's id (its longest form, 128 characters, when not chosen yet).
        spec: a definition the core's ``validate_spec`` accepted.

    Returns:
        The worst-case record size, bytes (at most ``MAX_RECORD_BYTES``).

    Raises:
        RecordTooLarge: naming ``max_active_runs`` if a single active run would fit (with a
            full queue; the reason says how many fit), else ``max_queued_runs`` if one would fit
            with an empty queue, else the definition as a whole; the reason gives the estimate
            and the limit.
    """
    size = worst_case_record_bytes(job_id, spec)
    if size <= MAX_RECORD_BYTES:
        return size
    unqueued = replace(spec, max_queued_runs=0)
    if worst_case_record_bytes(job_id, spec, runs=1) <= MAX_RECORD_BYTES:
        field, where = "max_active_runs", f"with {spec.max_active_runs} active runs"
        advice = f"lower max_active_runs: at most {_most_runs(job_id, spec)} fit"
    elif worst_case_record_bytes(job_id, unqueued, runs=1) <= MAX_RECORD_BYTES:
        field, where = "max_queued_runs", f"with {spec.max_queued_runs} queued runs"
        advice = "lower max_queued_runs"
    else:
        field, where, advice = "", "alone", "shrink the definition"
    raise RecordTooLarge(
        field,
        f"the job's record could grow to {size} bytes {where} (every task claimed by a worker "
        f"id of {MAX_WORKER_ID_CHARS} characters); the fold's limit is {MAX_RECORD_BYTES} "
        f"bytes ({advice})",
    )
