"""The after relay's index: which jobs run after which, and what an upstream run's end sends.

Pure (no I/O): fed every RunEvent of every partition in log order per partition, it keeps
upstream job → downstream jobs (from JobRegistered / JobRedefined / JobDeleted) and each
active run's ``scheduled_for``, and answers the UpstreamRunEnded envelopes a run's end asks
for (carrying the upstream's tenant from the ending event, which the fold checks). Design:
docs/architecture.md, "Job after job: the relay".
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.ids import after_idem_key
from cronlog.model import ScheduleKind
from cronlog.vocabulary import UpstreamOutcome

OUTCOMES: dict[type, UpstreamOutcome] = {
    ev.RunSucceeded: UpstreamOutcome.SUCCEEDED,
    ev.RunFailed: UpstreamOutcome.FAILED,
    ev.RunCancelled: UpstreamOutcome.CANCELLED,
}
"""Run-ending events and the outcome each reports."""


class AfterIndex:
    """Downstream jobs per upstream job.

    Memory: one entry per ``after`` job. A run's end carries its tick (RunSucceeded /
    RunFailed / RunCancelled ``scheduled_for``), so no run needs remembering; ``ticks`` is
    kept only for snapshots written before those events carried it (it only shrinks).
    """

    def __init__(self) -> None:
        self._upstream_of: dict[str, str] = {}
        self._downstream: dict[str, set[str]] = {}
        self._ticks: dict[str, datetime] = {}

    @classmethod
    def restored(cls, upstream_of: Mapping[str, str], ticks: Mapping[str, datetime]) -> AfterIndex:
        """Return an index in the state ``state()`` returned (a snapshot's, on relay start).

        Args:
            upstream_of: downstream job → the upstream job it is ``after``.
            ticks: active run_id → its ``scheduled_for`` (aware UTC).
        """
        index = cls()
        for down, up in upstream_of.items():
            index._upstream_of[down] = up
            index._downstream.setdefault(up, set()).add(down)
        index._ticks.update(ticks)
        return index

    def state(self) -> tuple[dict[str, str], dict[str, datetime]]:
        """Return copies of (downstream job → upstream job, active run_id → tick).

        Everything else the index holds derives from these two; ``restored`` inverts it.
        """
        return dict(self._upstream_of), dict(self._ticks)

    def downstream(self, upstream_job_id: str) -> frozenset[str]:
        """Return the jobs currently ``after`` ``upstream_job_id``."""
        return frozenset(self._downstream.get(upstream_job_id, ()))

    def wants_end(self, job_id: str) -> bool:
        """Return whether a run end of ``job_id`` can ask for anything (or change the index).

        False when no job is ``after`` it and no pre-tick snapshot run is remembered: then
        ``apply`` of its RunSucceeded / RunFailed / RunCancelled returns nothing and changes
        nothing, and a reader may skip decoding it.
        """
        return job_id in self._downstream or bool(self._ticks)

    def apply(self, record: ev.RunEvent) -> list[cmd.Envelope]:
        """Apply one run-event; return the UpstreamRunEnded envelopes it asks for.

        Args:
            record: a RunEvent read from ``cronlog.run-events``.

        Returns:
            One envelope per downstream job of the record's job when the event ends a run
            (RunSucceeded, RunFailed, RunCancelled), whatever the downstream's ``after_on``:
            the fold decides with the job's current definition. Empty otherwise.

        Idempotency: a re-delivered event asks for the same envelopes (same idem_keys).
        """
        event, job_id = record.event, record.job_id
        match event:
            case ev.JobRegistered(spec=spec) | ev.JobRedefined(spec=spec):
                sched = spec.schedule
                self._unlink(job_id)
                if sched.kind is ScheduleKind.AFTER and sched.after_job_id:
                    self._upstream_of[job_id] = sched.after_job_id
                    self._downstream.setdefault(sched.after_job_id, set()).add(job_id)
            case ev.JobDeleted():
                self._unlink(job_id)
            case (
                ev.RunSucceeded(run_id=run_id)
                | ev.RunFailed(run_id=run_id)
                | ev.RunCancelled(run_id=run_id)
            ):
                remembered = self._ticks.pop(run_id, None)
                tick: datetime | None = event.scheduled_for or remembered
                ended = cmd.UpstreamRunEnded(
                    upstream_job_id=job_id,
                    upstream_run_id=run_id,
                    upstream_scheduled_for=tick,
                    outcome=OUTCOMES[type(event)],
                    upstream_event_id=record.event_id,
                    upstream_tenant=event.tenant,
                )
                return [
                    cmd.Envelope(
                        idem_key=after_idem_key(down, run_id, record.event_id),
                        job_id=down,
                        command=ended,
                    )
                    for down in sorted(self.downstream(job_id))
                ]
        return []

    def _unlink(self, job_id: str) -> None:
        upstream = self._upstream_of.pop(job_id, None)
        if upstream is not None:
            downs = self._downstream.get(upstream, set())
            downs.discard(job_id)
            if not downs:
                self._downstream.pop(upstream, None)
