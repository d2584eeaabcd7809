"""What producing a command gives back, and how commands get their idem_keys."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from cronlog import commands as cmd
from cronlog.errors import CronlogError
from cronlog.ids import complete_idem_key, release_idem_key


class CommandNotSent(CronlogError):
    """The broker did not acknowledge a command (unreachable, refused, or not in time).

    It may still be delivered later: re-send it under the same idem_key and issued_at (its
    attributes), which makes the second copy a no-op if the first one arrives too.

    Attributes:
        idem_key: the key it was sent under (``send`` sets it; None when raised elsewhere).
        issued_at: the ``issued_at`` it carried (None: none).
    """

    idem_key: str | None = None
    issued_at: datetime | None = None


def new_idem_key() -> str:
    """Return a fresh idem_key (32 hex digits of a uuid4) for a command sent once."""
    return uuid.uuid4().hex


@dataclass(frozen=True, slots=True)
class Sent:
    """Where the broker put one command.

    Attributes:
        job_id: the job it addressed (the record key).
        idem_key: its idem_key; re-send under this key to retry safely.
        partition: the commands partition it landed on (murmur2 of the key).
        offset: its offset in that partition.
        issued_at: the ``issued_at`` it carried (aware UTC; None for a platform command):
            re-send with it, so the dedupe horizon counts from the first try.
    """

    job_id: str
    idem_key: str
    partition: int
    offset: int
    issued_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class RunRef:
    """A manual run asked for by ``CommandProducer.trigger``.

    Attributes:
        job_id: the job.
        run_id: the run the fold will create, ``run_id_for_trigger(job_id, idem_key)``
            (``cronlog.ids``): known before the fold answers.
        idem_key: the TriggerJob's idem_key (its CommandRejected carries it too).
        events_partition: the run-events partition the run's events go to (same partition
            count and key as the commands topic).
        events_offset: that partition's end offset taken just before the trigger was produced:
            every event the trigger causes lands at or after it, so ``EventStream`` need not
            read the partition's history. A re-sent trigger that the fold deduplicates causes
            no new event: read from the beginning then.
    """

    job_id: str
    run_id: str
    idem_key: str
    events_partition: int
    events_offset: int


def derived_key(command: cmd.Command) -> str | None:
    """The idem_key cronlog's own worker gives a lease's completion or release; else None."""
    if isinstance(command, cmd.CompleteTask):
        return complete_idem_key(command.run_id, command.task, command.epoch)
    if isinstance(command, cmd.ReleaseTask):
        return release_idem_key(command.run_id, command.task, command.epoch)
    return None
