"""Worker settings (env prefix ``CRONLOG_``)."""

from __future__ import annotations

import os
import socket

from pydantic import Field

from topology.config import KafkaSettings


def _default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class WorkerSettings(KafkaSettings):
    """Settings of one worker process.

    Attributes:
        worker_id: unique per process; the lease holder's name. Default ``<host>-<pid>``.
        slots: how many attempts run at once. Default 4.
        group_id: consumer group on the ready topic shared by all workers. Default
            ``<topic_prefix>cronlog-workers``.
        claim_timeout_s: how long to wait for the fold's answer to a claim, seconds.
        drain_s: on SIGTERM, seconds running attempts get to finish before being killed.
    """

    worker_id: str = Field(default_factory=_default_worker_id)
    slots: int = Field(default=4, ge=1, le=256)
    group_id: str = ""
    claim_timeout_s: float = 30.0
    drain_s: float = 30.0

    def ready_group(self) -> str:
        """Return the consumer group of the ready topic."""
        return self.group_id or f"{self.topic_prefix}cronlog-workers"
