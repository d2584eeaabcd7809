"""Worker heartbeats on ``cronlog.workers``: the records (``schemas/cronlog.WorkerHeartbeat.avsc``).

Each worker process announces itself every ``CRONLOG_HEARTBEAT_S`` seconds under the key of its
worker_id on a compacted topic, and writes a tombstone (null value) there when it stops
gracefully; a worker killed outright simply stops, and readers hold it as lost once its last
heartbeat is older than its ``ttl``. Writer: ``services/worker/heartbeat.py``; reader:
``services/api/routes/workers.py``; codec: ``topology.wire.codec`` (``encode_heartbeat``).
Heartbeats are for people and tools: leases and claims are the fold's, never decided by a heartbeat.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

TTL_INTERVALS = 3
"""A heartbeat vouches for its worker this many heartbeat intervals (its ``ttl``): one or two
lost or late beats do not make a worker look lost."""


@dataclass(frozen=True, slots=True)
class HeldLease:
    """One attempt a worker holds a lease on, as its heartbeat reports it."""

    run_id: str
    """The run."""
    task: str
    """The task of the run."""
    attempt: int
    """Attempt number, from 1."""
    epoch: int
    """The lease's epoch (fencing token) the fold granted."""


@dataclass(frozen=True, slots=True)
class WorkerHeartbeat:
    """A worker process as it announced itself at ``at`` (``cronlog.WorkerHeartbeat``)."""

    worker_id: str
    """The worker's id, its name as a lease holder; the record key."""
    host: str
    """Host name of the machine it runs on."""
    pid: int
    """Its process id on that host."""
    slots: int
    """How many attempts it runs at once."""
    free_slots: int
    """Slots not running an attempt when the heartbeat was cut."""
    leases: tuple[HeldLease, ...]
    """The attempts it holds a lease on when the heartbeat was cut."""
    started_at: datetime
    """When it started pulling, aware UTC (worker clock)."""
    at: datetime
    """When this heartbeat was cut, aware UTC (worker clock)."""
    ttl: timedelta
    """How long this heartbeat vouches for the worker (``TTL_INTERVALS`` x its interval)."""

    def lost(self, now: datetime) -> bool:
        """Return whether the worker is lost at ``now``: no newer heartbeat within ``ttl``."""
        return now - self.at > self.ttl
