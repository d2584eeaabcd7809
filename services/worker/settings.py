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
        worker_id: unique per process; the lease holder's name, 1..128 characters (the
            fold dead-letters commands with a longer one). Default ``<host>-<pid>``.
        slots: how many attempts run at once. Default 4.
        group_id: consumer group on the ready topic shared by all workers. Default
            ``<topic_prefix>cronlog-workers``.
        claim_timeout_s: how long to wait for the fold's answer to a claim, seconds.
        drain_s: on SIGTERM, seconds running attempts get to finish before being killed.
        ready_session_timeout_s: consumer-group session timeout of the ready consumer, seconds.
            Default 10. A worker killed with ``kill -9`` keeps its ready partitions (new
            runs and retries on them unread) until this passes; librdkafka's default is 45 s.
            librdkafka heartbeats from its own thread, so a busy interpreter does not trip
            it. Must lie within the broker's ``group.min/max.session.timeout.ms`` (6 s to 30 min
            by default).
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
        default_factory=_default_worker_id, min_length=1, max_length=MAX_WORKER_ID_CHARS
    )
    slots: int = Field(default=4, ge=1, le=MAX_CLAIM_NEXT)
    group_id: str = ""
    claim_timeout_s: float = 30.0
    drain_s: float = 30.0
    ready_session_timeout_s: float = Field(default=10.0, gt=0)
    log_cap_bytes: int = Field(default=DEFAULT_CAP_BYTES, ge=0, le=1024**3)
    log_flush_s: float = Field(default=0.5, gt=0, le=60)
    heartbeat_s: float = Field(default=2.0, ge=0.1, le=300)

    def ready_group(self) -> str:
        """Return the consumer group of the ready topic."""
        return self.group_id or f"{self.topic_prefix}cronlog-workers"

    def ready_consumer_config(self) -> dict[str, object]:
        """Return the ready consumer's settings: its group, a short session, small fetches."""
        session_ms = round(self.ready_session_timeout_s * 1000)
        return self.consumer_config(
            self.ready_group(),
            **{
                "session.timeout.ms": session_ms,
                "heartbeat.interval.ms": max(session_ms // 3, 100),  # Kafka's advice: <= 1/3
                "max.poll.interval.ms": 600_000,
                "queued.max.messages.kbytes": 1024,
                "fetch.max.bytes": 1_048_576,
            },
        )
