"""The fold adapter's part of the tenant ledger (``cronlog.ledger``, docs/tenants.md).

``LedgerFold`` folds the commands addressed to the ledger's record (``LEDGER_KEY``) and sends
its grants; ``ledger_commands`` turns a job's slot events into the commands the ledger
folds. Both append to the commands topic, in the batch's transaction, like the continuation
Ticks of ``topology/fold/folder.py``: a replay reads them from the log.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.dedupe import event_key
from cronlog.ids import event_id, idem_marker
from cronlog.job import JobState
from cronlog.ledger import LEDGER_KEY, LedgerState, decide_ledger
from cronlog.slots import waiting_rank_ms
from cronlog.time import from_ms
from topology.fold.batch import BatchResult, Outgoing, Record, Write
from topology.kafka.topics import Topics
from topology.wire.codec import Codec
from topology.wire.state_codec import dump_ledger, load_ledger


class LedgerFold:
    """Folds the ledger's commands, one batch at a time; writes its record once per batch.

    Args:
        topics: topic names.
        load: (partition, key) → stored record bytes or None (the ledger's ``l1:`` record).
        codec: the Avro codec.
    """

    def __init__(
        self, topics: Topics, load: Callable[[int, str], bytes | None], codec: Codec
    ) -> None:
        self.topics = topics
        self.load = load
        self.codec = codec
        self._state: LedgerState | None = None
        self._partition: int | None = None

    def begin(self) -> None:
        """Forget the last batch (its record is in the store now, or was never kept)."""
        self._state, self._partition = None, None

    def fold(self, rec: Record, env: cmd.Envelope, record_time: datetime, out: BatchResult) -> None:
        """Fold one ledger command; send its grants (GrantSlots to each job).

        Grants' idem_keys: ``slots:<marker of the ledger command>:<job_id>``. They are
        encoded before the new state is kept, so a failure dead-letters the whole command.

        Raises:
            CronlogError: a command the ledger refuses (``decide_ledger``).
        """
        state = self._state
        if state is None:
            raw = self.load(rec.partition, LEDGER_KEY)
            state = load_ledger(raw) if raw is not None else None
        new, grants = decide_ledger(state, env, record_time)
        marker = idem_marker(env.idem_key)
        sends = []
        for g in grants:
            grant = cmd.Envelope(
                idem_key=f"slots:{marker}:{g.job_id}",
                job_id=g.job_id,
                command=cmd.GrantSlots(tenant=g.tenant, count=g.count, refused=g.refused),
                tenant=g.tenant,
            )
            value = self.codec.encode_command(grant)
            sends.append(Outgoing(self.topics.commands, g.job_id.encode(), value))
        out.decisions += 1
        out.sends += sends
        if new is not state:
            self._state, self._partition = new, rec.partition

    def finish(self, out: BatchResult) -> None:
        """Add the ledger's record to the batch's writes if the batch changed it."""
        if self._state is not None and self._partition is not None:
            out.writes[LEDGER_KEY] = Write(self._partition, dump_ledger(self._state), None, None)


def ledger_commands(
    codec: Codec,
    topics: Topics,
    env: cmd.Addressed,
    at: datetime,
    events: list[ev.Event],
    state: JobState | None,
) -> list[Outgoing]:
    """Return the ledger commands of a job's slot events (``cronlog.slots``).

    An AskSlots per TenantSlotsAsked (ranked at the job's best task without a slot), a
    ReturnSlots per TenantSlotsReturned, keyed ``LEDGER_KEY``; idem_key: the event's event_id.
    """
    sends: list[Outgoing] = []
    for i, e in enumerate(events):
        command: cmd.Command
        if isinstance(e, ev.TenantSlotsAsked) and state is not None:
            rank = waiting_rank_ms(state)
            rank_at = from_ms(rank) if rank is not None else at
            command = cmd.AskSlots(
                tenant=e.tenant, asker=env.job_id, count=e.count, rank_at=rank_at
            )
        elif isinstance(e, ev.TenantSlotsReturned):
            command = cmd.ReturnSlots(
                tenant=e.tenant, asker=env.job_id, count=e.count, withdraw=e.withdraw
            )
        else:
            continue
        key = event_id(event_key(env, e), env.job_id, i)
        ledger = cmd.Envelope(idem_key=key, job_id=LEDGER_KEY, command=command)
        sends.append(Outgoing(topics.commands, LEDGER_KEY.encode(), codec.encode_command(ledger)))
    return sends
