"""API settings (env prefix ``CRONLOG_``), on top of the shared Kafka settings."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr

from services.api.access.auth import Authenticator
from topology.kafka.config import KafkaSettings


class ApiSettings(KafkaSettings):
    """Settings of one API process.

    Attributes:
        api_host: interface uvicorn binds; env ``CRONLOG_API_HOST``. Default ``127.0.0.1``.
        api_port: TCP port; env ``CRONLOG_API_PORT``. Default 8080.
        api_state_dir: directory of the read model's RocksDB; default ``state/api-<api_port>``
            (relative to the working directory). One directory per process: RocksDB locks it.
            Task logs have their own RocksDB beside it, ``<api_state_dir>-logs``.
        api_write_timeout_s: how long a write waits for its effect to appear in the read model
            before answering 202 with a Location, seconds. Default 10.
        api_delivery_timeout_s: how long a write waits for the broker to acknowledge the command,
            seconds. Default 10.
        api_max_body_bytes: the largest request body accepted, bytes; env
            ``CRONLOG_API_MAX_BODY_BYTES``. Default 1 MiB (a job definition of 200 tasks with
            long commands fits). A larger body is answered 413 while it streams in: a declared
            Content-Length is checked before the body is read, a chunked body is counted as it
            arrives, so nothing is parsed or held beyond the cap.
        api_stall_s: a consumer thread (run-events, logs) that has not gone round its loop for
            this many seconds is stuck: ``/healthz`` answers 503 so a supervisor restarts the
            process. Default 60.
        api_tokens_file: the static API tokens (their SHA-256 digests, tenant and role; see
            ``services.api.access.auth``); env ``CRONLOG_API_TOKENS_FILE``. Default
            ``state/api-tokens.json``; ``cronlog tokens create`` adds to it.
        api_jwt_keys_file: the public key (PEM) or key set (JWKS JSON) JWTs are verified
            with; env ``CRONLOG_API_JWT_KEYS_FILE``. Default none: JWTs are refused.
        api_jwt_audience: the ``aud`` a JWT must carry. Default ``cronlog``.
        api_jwt_issuer: the ``iss`` a JWT must carry. Default none (any issuer).
        api_tenants_file: tenants' quotas (``services.api.routes.tenants``); env
            ``CRONLOG_API_TENANTS_FILE``. Default none: no quotas.
        metrics_max_jobs: at most this many distinct ``job`` label values per metric of
            ``GET /metrics``; later jobs share ``job="other"`` (jobs tagged ``critical``
            always keep their own); env ``CRONLOG_METRICS_MAX_JOBS``. Default 200.
        metrics_history_s: run-events older than this many seconds before the process started
            are history, not news: the counters and histograms of ``GET /metrics`` skip them,
            so a read model rebuilt from offset 0 (a new replica, a format change) does not
            replay old misses into alerts; env ``CRONLOG_METRICS_HISTORY_S``. Default 900.
        api_stalled_dag_s: an active run with unfinished tasks, none claimed, and no task
            progress for this many seconds counts in ``cronlog_dags_stalled``; env
            ``CRONLOG_API_STALLED_DAG_S``. Default 600.
        api_console_max_streams: how many live-update streams (``/console/stream``, the web
            console's server-sent events) may be open at once; one more is answered 503.
            Default 100.
        history_hot_days: how long the read model keeps a run after it ended (with its task
            instances, dead letters, task-log copies and event copies), days, measured on the
            run-events' own clock (the newest event applied); fractions allowed (tests use
            seconds' worth); 0 keeps everything forever; env ``CRONLOG_HISTORY_HOT_DAYS``.
            Default 32: longer than the archive's hot window (30 days) plus the day it waits
            for a day to end and its interval, so a pruned run is already in the archive.
            A live run is never pruned.
        api_cursor_key: the key that seals paging cursors (a Fernet key; env
            ``CRONLOG_API_CURSOR_KEY``; give an API's replicas the same one). Empty (default):
            each process draws its own, and a restart refuses older cursors (422).
        history_archive_lookup: answer a run the read model no longer holds from the cold
            archive (``CRONLOG_ARCHIVE_DEST`` and the archive's other settings, docs/history.md;
            no archive there: 404 as before); env ``CRONLOG_HISTORY_ARCHIVE_LOOKUP``. Default on.
        history_prune_interval_s: seconds between pruning passes; env
            ``CRONLOG_HISTORY_PRUNE_INTERVAL_S``. Default 60.
        history_prune_batch: most runs (and most events) one pruning step deletes under the
            read model's write lock; env ``CRONLOG_HISTORY_PRUNE_BATCH``. Default 500.
        api_test_fault: tests only: ``fatal`` makes the read model meet a fatal KafkaError,
            ``stall`` makes it hang. Default empty (none).
    """

    api_host: str = "127.0.0.1"
    api_port: int = Field(default=8080, ge=1, le=65535)
    api_state_dir: Path | None = None
    api_write_timeout_s: float = Field(default=10.0, gt=0, le=300)
    api_delivery_timeout_s: float = Field(default=10.0, gt=0, le=300)
    api_max_body_bytes: int = Field(default=1024 * 1024, ge=1024, le=64 * 1024 * 1024)
    api_stall_s: float = Field(default=60.0, gt=0)
    api_tokens_file: Path = Path("state") / "api-tokens.json"
    api_jwt_keys_file: Path | None = None
    api_jwt_audience: str = "cronlog"
    api_jwt_issuer: str | None = None
    api_tenants_file: Path | None = None
    metrics_max_jobs: int = Field(default=200, ge=0, le=100_000)
    api_stalled_dag_s: float = Field(default=600.0, gt=0, allow_inf_nan=False)
    metrics_history_s: float = Field(default=900.0, ge=0, allow_inf_nan=False)
    api_console_max_streams: int = Field(default=100, ge=0, le=100_000)
    history_hot_days: float = Field(default=32.0, ge=0, le=36_500, allow_inf_nan=False)
    history_prune_interval_s: float = Field(default=60.0, gt=0, le=86_400, allow_inf_nan=False)
    history_prune_batch: int = Field(default=500, ge=1, le=100_000)
    history_archive_lookup: bool = True
    api_cursor_key: SecretStr = SecretStr("")
    api_test_fault: Literal["", "fatal", "stall"] = ""

    def authenticator(self) -> Authenticator:
        """Return the API's authenticator from these settings (reads the JWT keys file)."""
        return Authenticator(
            self.api_tokens_file, self.api_jwt_keys_file, self.api_jwt_audience, self.api_jwt_issuer
        )

    def state_path(self) -> Path:
        """Return the read model's RocksDB directory."""
        return self.api_state_dir or Path("state") / f"api-{self.api_port}"

    def logs_state_path(self) -> Path:
        """Return the task-log read model's RocksDB directory: beside ``state_path()``."""
        path = self.state_path()
        return path.with_name(path.name + "-logs")
