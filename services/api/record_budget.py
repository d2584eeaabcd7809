"""Can a job's table record outgrow the fold's limit? The API's answer before registering it.

The fold refuses every command whose resulting job record (``topology.state_codec``) exceeds
``topology.fold.MAX_RECORD_BYTES`` (``record_too_large``). A definition whose record could
grow past it would be registered, then see its ticks or claims refused. So the API builds the
largest record the job's own schedule can give it and encodes it with the fold's codec:

- the definition (``JobSpec``) as stored;
- ``max_active_runs`` active runs, plus the one a ``buffer_one`` job holds, every task of each
  claimed, with every field at its longest: a worker id of ``WORKER_ID_CHARS`` characters,
  every instant set, 10-digit attempt and epoch numbers, the most lease lapses a task can count;
- every dedupe marker slot full (``MAX_APPLIED_MARKERS`` + ``MAX_RENEWAL_MARKERS``), each
  idem_key ``MARKER_CHARS`` characters, each user command's with its digest;
- a full queue: ``max_queued_runs`` queued runs (after runs' upstream ids included).

The definition is refused when that record exceeds ``MAX_RECORD_BYTES``. Runs outside
``max_active_runs`` (backfill and replay runs) are bounded by their commands and by the fold's
own refusal, not here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime

from cronlog.ids import COMMAND_DIGEST_SIZE
from cronlog.job import (
    MAX_APPLIED_MARKERS,
    MAX_RENEWAL_MARKERS,
    Buffered,
    JobState,
    Queued,
    Run,
    TaskInstance,
)
from cronlog.model import JobSpec
from cronlog.vocabulary import JobStatus, RunTrigger, TaskState
from topology.fold import MAX_RECORD_BYTES
from topology.state_codec import dump_state

WORKER_ID_CHARS = 80
"""Longest worker id budgeted in a lease, characters (the default ``<host>-<pid>`` is at
most 64 + 1 + 7)."""
MARKER_CHARS = 300
"""Longest idem_key budgeted in a dedupe marker, characters (an Idempotency-Key is at most
200, plus the API's suffix such as ``:<run_id>:<task>`` of a replay; a worker's claim key
``claim:<run_id>:<task>:<attempt>:<worker_id>:<nonce>`` is shorter)."""
_LATEST = datetime(9000, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)
_BIG = 10**10 - 1  # a 10-digit attempt / epoch / count


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
        state=TaskState.RETRY_WAIT,  # the longest state name
        attempt=_BIG,
        epoch=_BIG,
        worker_id="w" * WORKER_ID_CHARS,
        lease_expires_at=_LATEST,
        retry_at=_LATEST,
        deadline_at=_LATEST,
        first_attempt=_BIG,
        lease_expiries=spec.max_lease_expiries + 1,  # the lapse past the bound ends it
    )
    return Run(
        run_id=f"r{n:024x}",
        scheduled_for=_LATEST,
        trigger=RunTrigger.SCHEDULE,
        tasks=tuple(replace(task, task=name) for name in spec.tasks),
        timeout_at=_LATEST,
    )


def worst_case_record_bytes(job_id: str, spec: JobSpec, runs: int | None = None) -> int:
    """Return the size of the largest record job ``job_id`` can reach, bytes (see the module).

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
        status=JobStatus.DELETED,  # the longest status name
        clock=_LATEST,
        next_fire_at=_LATEST,
        runs=tuple(_run(spec, n) for n in range(count)),
        applied=tuple("a" * MARKER_CHARS for _ in range(MAX_APPLIED_MARKERS)),
        applied_digests=tuple("d" * 2 * COMMAND_DIGEST_SIZE for _ in range(MAX_APPLIED_MARKERS)),
        renewals=tuple("r" * MARKER_CHARS for _ in range(MAX_RENEWAL_MARKERS)),
        runs_fired=_BIG,
        incarnation=_BIG,
        buffered=Buffered(f"r{count:024x}", _LATEST, RunTrigger.SCHEDULE),
        queue=tuple(
            Queued(f"r{n:024x}", _LATEST, RunTrigger.CATCHUP, "u" * 128, f"r{n:024x}")
            for n in range(spec.max_queued_runs)
        ),
    )
    return len(dump_state(state))


def check_record_budget(job_id: str, spec: JobSpec) -> int:
    """Refuse a definition whose job record could exceed the fold's ``MAX_RECORD_BYTES``.

    Args:
        job_id: the job's id (its longest form, 128 characters, when not chosen yet).
        spec: a definition the core's ``validate_spec`` accepted.

    Returns:
        The worst-case record size, bytes (at most ``MAX_RECORD_BYTES``).

    Raises:
        RecordTooLarge: naming ``max_active_runs`` if a single active run would fit (with a
            full queue), else ``max_queued_runs`` if one would fit with an empty queue, else
            the definition as a whole; the reason gives the estimate and the limit.
    """
    size = worst_case_record_bytes(job_id, spec)
    if size <= MAX_RECORD_BYTES:
        return size
    unqueued = replace(spec, max_queued_runs=0)
    if worst_case_record_bytes(job_id, spec, runs=1) <= MAX_RECORD_BYTES:
        field, where = "max_active_runs", f"with {spec.max_active_runs} active runs"
    elif worst_case_record_bytes(job_id, unqueued, runs=1) <= MAX_RECORD_BYTES:
        field, where = "max_queued_runs", f"with {spec.max_queued_runs} queued runs"
    else:
        field, where = "", "alone"
    advice = f"lower {field}" if field else "shrink the definition"
    raise RecordTooLarge(
        field,
        f"the job's record could grow to {size} bytes {where}; the fold's limit is "
        f"{MAX_RECORD_BYTES} bytes ({advice})",
    )
