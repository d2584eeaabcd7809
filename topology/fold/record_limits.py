"""How big a job record and a decision's output may grow, and what a manual start must leave.

The fold (``topology/fold/folder.py``) refuses a decision past these as ``record_too_large``; the
API's record budget (``services/api/shapes/record_budget.py``) refuses definitions that could.
"""

from __future__ import annotations

from cronlog import commands as cmd
from cronlog.job import JobState
from cronlog.vocabulary import TERMINAL_TASK_STATES

MAX_RECORD_BYTES = 512 * 1024
"""A command whose resulting job record would exceed this is refused (record_too_large):
the record must fit one changelog message whatever the input."""

MAX_OUTPUT_BYTES = 900 * 1024
"""A decision whose events would not fit a Kafka message (the producer's ``message.max.bytes``
is 1,000,000) is not applied: its input is dead-lettered instead of crash-looping the fold."""

CLAIM_RESERVE_BYTES = 256
"""Room a claim may take in a job record: it grows the record by at most ~200 bytes (a
128-character worker id, the lease's instants)."""
RESERVED_CLAIMS = 32
"""A manual start (TriggerJob, BackfillJob, ReplayTask: runs outside ``max_active_runs``) must
leave room for this many claims (``CLAIM_RESERVE_BYTES`` each, fewer if fewer task instances
are unended), so a record that manual runs filled can always grant some of them: they end,
their runs leave the record, and the rest follow. Without it, an adversarial run filled a
record with 1,526 triggered runs none of which could then be claimed."""

MANUAL_STARTS = (cmd.TriggerJob, cmd.BackfillJob, cmd.ReplayTask)

TOO_LARGE_RETRY_MS = 60_000
"""A due job whose decision was refused as too large is due again this much later (not at
once: it would keep every Tick busy deciding it again)."""


def unended(state: JobState) -> int:
    """How many task instances of ``state``'s active runs have not ended."""
    return sum(1 for r in state.runs for t in r.tasks if t.state not in TERMINAL_TASK_STATES)
