"""Scheduler settings (env prefix ``CRONLOG_``)."""

from __future__ import annotations

import logging
import os
import socket

from pydantic import Field

from topology.config import KafkaSettings


class SchedulerSettings(KafkaSettings):
    """Settings of one scheduler process.

    Attributes:
        instance_id: unique per live process; the static group membership id, so keep it
            stable across restarts of the same process (a restart then takes its partitions
            back without a rebalance). Default ``<host>-<pid>``.
        state_dir: where faust keeps RocksDB tables. Default ``state/scheduler-<instance_id>``.
        tick_interval_s: seconds between the Ticks this process appends to every partition.
        batch_size: most command records folded per batch.
        batch_within_s: seconds a batch waits to fill up. Default 0.002: at low load every
            fold pass waits this long, and a DAG hop takes two passes (bench/dag_chain.py:
            10 ms made a hop 30 ms median, 2 ms 17 ms); under a burst batches fill at once,
            so throughput did not change (bench/fold.py, same run).
        standby_replicas: faust standby replicas of the job table.
        web_port: faust's health server port; 0 disables it.
        session_timeout_s: consumer-group session timeout, seconds: how long a crashed
            process keeps its partitions before the others take over. Default 15.
        log_level: ``debug``, ``info`` (default), ``warning`` or ``error``.
        keep_local_state: reuse the RocksDB tables left by a previous run instead of
            recovering every owned partition from its changelog. Default False: after a
            kill -9 the local store can be *ahead* of the changelog (faust writes RocksDB
            first and the changelog asynchronously), and a store ahead of the changelog is a
            store ahead of the committed offsets (docs/architecture.md).
        rocksdb_block_cache_mb: per-partition RocksDB block cache, MiB.
        rocksdb_write_buffer_mb: per-partition RocksDB write buffer, MiB.
        after_relay: run the after relay (run-events → UpstreamRunEnded, job after job) in
            a thread of this process. Default True; any number of processes may run one.
        fold_stats_s: period of the ``action=fold_stats`` log line, seconds. Default 10
            (the benchmarks use 1 to see a burst second by second).
    """

    instance_id: str = Field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    state_dir: str = ""
    tick_interval_s: float = Field(default=1.0, gt=0)
    batch_size: int = Field(default=1000, ge=1)
    batch_within_s: float = Field(default=0.002, gt=0)
    standby_replicas: int = Field(default=1, ge=0)
    web_port: int = 0
    session_timeout_s: float = Field(default=15.0, ge=6.0)
    log_level: str = "info"
    keep_local_state: bool = False
    rocksdb_block_cache_mb: int = 8
    rocksdb_write_buffer_mb: int = 4
    after_relay: bool = True
    fold_stats_s: float = Field(default=10.0, gt=0)

    def state_path(self) -> str:
        """Return the state directory (explicit or derived from instance_id)."""
        return self.state_dir or os.path.join("state", f"scheduler-{self.instance_id}")

    def log_level_number(self) -> int:
        """Return ``log_level`` as a ``logging`` level number (INFO when unknown)."""
        level = logging.getLevelName(self.log_level.upper())
        return level if isinstance(level, int) else logging.INFO
