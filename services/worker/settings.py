"""Worker settings (env prefix ``CRONLOG_``)."""

from __future__ import annotations

import os
import socket

from pydantic import Field

from cronlog.limits import MAX_CLAIM_NEXT, MAX_WORKER_ID_CHARS
from topology.config import KafkaSettings
from topology.logs import DEFAULT_CAP_BYTES


def _default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class WorkerSettings(KafkaSettings):
    """Settings of one worker process.

    Attributes:
        worker_id: unique per process; the lease holder's name, 1..128 identifier characters
            (``cronlog.limits.ID_CHARS``; the fold dead-letters commands with another).
            Default ``<host>-<pid>``.
        slots: how many attempts run at once. Default 4.
        group_id: prefix of the worker's consumer group ids (no group is shared: the ready
            topic is read by every worker, the replies by each its own partition). Default
            ``<topic_prefix>cronlog-workers``.
        claim_timeout_s: how long to wait for the fold's answer to a poll, seconds: past it
            the poll's slots are free again (a grant arriving later is run if a slot is free,
            else released). Default 30.
        drain_s: on SIGTERM, seconds running attempts get to finish before being killed.
        poll_sweep_s: with free slots, every commands partition is polled at least this often
            even without a notification (a safety net), seconds. Default 30.
        log_cap_bytes: bytes of output kept per attempt on the logs topic; past it output is
            counted, not kept (``truncated``). Env ``CRONLOG_LOG_CAP_BYTES``. Default 1 MiB;
            0 keeps none.
        log_flush_s: seconds output may wait in the worker before it is sent as a LogChunk
            (a full 64 KiB chunk goes at once): how stale a running attempt's log can be.
            Env ``CRONLOG_LOG_FLUSH_S``. Default 0.5.
        heartbeat_s: seconds between two heartbeats on ``cronlog.workers`` (slots, free
            slots, held leases; ``services/worker/heartbeat.py``). A heartbeat vouches for
            the worker 3 intervals. Env ``CRONLOG_HEARTBEAT_S``. Default 2.
    """

    worker_id: str = Field(
        default_factory=_default_worker_id,
        min_length=1,
        max_length=MAX_WORKER_ID_CHARS,
        pattern=r"^[!#-\[\]-~]+$",  # cronlog.limits.ID_CHARS: the fold refuses others
    )
    slots: int = Field(default=4, ge=1, le=MAX_CLAIM_NEXT)
    group_id: str = ""
    claim_timeout_s: float = 30.0
    drain_s: float = 30.0
    poll_sweep_s: float = Field(default=30.0, gt=0)
    log_cap_bytes: int = Field(default=DEFAULT_CAP_BYTES, ge=0, le=1024**3)
    log_flush_s: float = Field(default=0.5, gt=0, le=60)
    heartbeat_s: float = Field(default=2.0, ge=0.1, le=300)

    def ready_group(self) -> str:
        """Return the consumer group of the ready topic."""
        return self.group_id or f"{self.topic_prefix}cronlog-workers"
