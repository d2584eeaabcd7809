"""Scheduler settings (env prefix ``CRONLOG_``)."""

from __future__ import annotations

import os
import socket
from datetime import timedelta

from pydantic import Field

from cronlog.idem import DEFAULT_HORIZON, DEFAULT_MAX_FUTURE, IdemRules
from topology.fold.state_cache import DEFAULT_CAPACITY
from topology.kafka.config import KafkaSettings


class SchedulerSettings(KafkaSettings):
    """Settings of one scheduler process.

    Attributes:
        instance_id: unique per live process, stable across its restarts: the static group
            membership id (a restart within the session takes its partitions back without a
            rebalance) and the transactional.id suffix (a restart fences its previous
            incarnation and aborts its open transaction at once). Default ``<host>-<pid>``.
        state_dir: where the partitions' RocksDB stores live. Default
            ``state/scheduler-<instance_id>``.
        tick_interval_s: seconds between the Ticks this process appends to each partition it
            owns. Default 1.
        batch_size: most command records in one transaction (several decide passes may go
            into one). Default 5000.
        commit_interval_ms: how long a transaction stays open under load, ms (env
            ``CRONLOG_COMMIT_INTERVAL_MS``): while one commits, the fold decides the next;
            that one commits once the first returned and it has been open this long, or at
            once when the consumer has nothing more to give (idle: latency stays low). Kafka
            Streams' ``commit.interval.ms`` under exactly-once. Default 100; 0 commits as
            soon as the previous commit returns.
        commit_max_bytes: most output bytes (messages and job records) in one transaction;
            a full one is committed without waiting for the interval. Default 16 MiB.
        state_cache: decoded job records kept in memory (``topology/fold/state_cache.py``), jobs;
            0 turns it off. Default 50,000.
        tick_slice: most due jobs one Tick decides; the rest continue on a Tick the fold
            appends (topology/fold/folder.py). Default 250 (about 50 ms of fold time).
        transaction_timeout_s: the transactions' timeout, seconds: how long a killed
            scheduler's open transaction holds its partitions' readers back. Default 10.
        session_timeout_s: consumer-group session timeout, seconds: how long a crashed
            process keeps its partitions before the others take over. Default 6 (the broker's
            floor).
        static_membership: join the group with ``group.instance.id = instance_id``. Default
            True.
        log_level: ``debug``, ``info`` (default), ``warning``, ``error`` or ``critical``;
            env ``CRONLOG_LOG_LEVEL``, which every process reads (an unknown one: ``info``,
            with a warning; ``services/logging_setup.py``).
        keep_local_state: reuse the stores left by a previous run (read from the changelog
            only what they lack). Default True: the fold writes RocksDB only after the
            transaction that put the same records on the changelog committed, so a store is
            never ahead of it. False rebuilds every owned partition from its changelog.
        rocksdb_write_buffer_mb: per-partition RocksDB write buffer, MiB.
        after_relay: run the after relay (run-events → UpstreamRunEnded, job after job) in
            a thread of this process. Default True; any number of processes may run one.
        fold_stats_s: period of the ``action=fold_stats`` log line, seconds. Default 10
            (the benchmarks use 1 to see a burst second by second).
        metrics_port: TCP port of the Prometheus metrics (``/metrics``); env
            ``CRONLOG_METRICS_PORT``. Default 9464; 0 picks an ephemeral port (logged
            ``action=metrics_serving url=...``), -1 serves none.
        metrics_host: interface the metrics are served on; env ``CRONLOG_METRICS_HOST``.
            Default ``127.0.0.1`` (this machine only; ``0.0.0.0`` for a remote Prometheus).
        idem_horizon_s: the dedupe horizon of external commands, seconds (``cronlog.idem``;
            env ``CRONLOG_IDEM_HORIZON_S``): a command re-sent under its idem_key within it is
            a no-op, one issued longer ago is refused with ``idem_key_expired``. Default 86,400
            (24 h). Every scheduler of a cluster and ``cronlog replay`` must use the same
            value: it is part of what the fold decides.
        idem_max_future_s: how far a command's ``issued_at`` may be ahead of the log time,
            seconds (env ``CRONLOG_IDEM_MAX_FUTURE_S``); further is refused with
            ``issued_at_in_future``. Default 3,600.
        unstable_report_s: a partition whose committed offset stays unstable this long,
            seconds, has the transactions that may hold it looked up with Kafka's own tool and
            logged with the command that ends each (``action=offsets_unstable_held``;
            ``services/scheduler/held.py``). Default 60; 0 turns it off.
    """

    instance_id: str = Field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    state_dir: str = ""
    tick_interval_s: float = Field(default=1.0, gt=0)
    batch_size: int = Field(default=5000, ge=1, le=100_000)
    commit_interval_ms: int = Field(default=100, ge=0, le=60_000)
    commit_max_bytes: int = Field(default=16 * 1024 * 1024, ge=1024)
    tick_slice: int = Field(default=250, ge=1)
    state_cache: int = Field(default=DEFAULT_CAPACITY, ge=0)
    transaction_timeout_s: float = Field(default=10.0, ge=1.0, le=900.0)
    session_timeout_s: float = Field(default=6.0, ge=6.0)
    static_membership: bool = True
    log_level: str = "info"
    keep_local_state: bool = True
    rocksdb_write_buffer_mb: int = 4
    after_relay: bool = True
    fold_stats_s: float = Field(default=10.0, gt=0)
    metrics_port: int = Field(default=9464, ge=-1, le=65535)
    metrics_host: str = "127.0.0.1"
    idem_horizon_s: float = Field(default=DEFAULT_HORIZON.total_seconds(), ge=1.0)
    idem_max_future_s: float = Field(default=DEFAULT_MAX_FUTURE.total_seconds(), ge=0.0)

    def idem_rules(self) -> IdemRules:
        """Return the dedupe horizon these settings give (``cronlog.idem.IdemRules``)."""
        return IdemRules(
            horizon=timedelta(seconds=self.idem_horizon_s),
            max_future=timedelta(seconds=self.idem_max_future_s),
        )

    unstable_report_s: float = Field(default=60.0, ge=0)

    def state_path(self) -> str:
        """Return the state directory (explicit or derived from instance_id)."""
        return self.state_dir or os.path.join("state", f"scheduler-{self.instance_id}")
