"""``Decision``: the events being decided for one command, and the state they lead to."""

from __future__ import annotations

from collections.abc import Iterable

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.errors import InvariantViolation
from cronlog.evolve import evolve
from cronlog.job import JobState
from cronlog.vocabulary import RejectReason


class Decision:
    """Events being decided, with the state they lead to (each emit evolves it)."""

    def __init__(self, state: JobState | None, job_id: str) -> None:
        self.state = state
        self.job_id = job_id
        self.events: list[ev.Event] = []

    def live(self) -> JobState:
        """Return the state, which callers past the registration check know exists.

        Raises:
            InvariantViolation: the state is None (a bug in decide's dispatch).
        """
        if self.state is None:
            raise InvariantViolation(f"job {self.job_id!r} has no state here")
        return self.state

    def emit(self, event: ev.Event) -> None:
        """Append ``event`` and apply it to ``self.state``."""
        self.events.append(event)
        self.state = evolve(self.state, self.job_id, event)

    def emit_all(self, events: Iterable[ev.Event]) -> None:
        """Emit each of ``events`` in order."""
        for event in events:
            self.emit(event)

    def reject(self, command: cmd.JobCommand, reason: RejectReason, detail: str) -> None:
        """Emit a CommandRejected for ``command``."""
        self.emit(
            ev.CommandRejected(
                command=cmd.command_kind(command),
                reason=reason,
                detail=detail,
                run_id=getattr(command, "run_id", None),
                task=getattr(command, "task", None),
                worker_id=getattr(command, "worker_id", None),
                epoch=getattr(command, "epoch", None),
            )
        )
