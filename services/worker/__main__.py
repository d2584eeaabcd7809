"""``python -m services.worker``: run one worker until SIGTERM/SIGINT, then drain."""

from __future__ import annotations

import logging
import os
import signal

from cronlog.errors import CronlogError
from services import tracing
from services.logging_setup import configure_logging, log_settings
from services.worker import metrics
from services.worker.sandbox import isolation_line
from services.worker.settings import WorkerSettings
from services.worker.worker import Worker
from topology.kafka.bootstrap import ensure_topics_retrying
from topology.kafka.retrying import FATAL_EXIT


def main() -> None:
    """Start a worker with settings from the environment (``CRONLOG_*``)."""
    configure_logging("worker")
    settings = WorkerSettings()
    log = logging.getLogger("cronlog.worker")
    log_settings(log, settings)
    tracing.setup("cronlog-worker")  # off unless OTEL_* asks for traces
    metrics.serve(settings.metrics_port, settings.metrics_host)  # a port taken: exit 70
    ensure_topics_retrying(settings)  # idempotent; any service may start first
    worker = Worker(settings)
    level, message, fields = isolation_line(
        settings.task_isolation, worker.reach.user, worker.reach.dirs, os.geteuid()
    )
    log.log(level, message, extra=fields)

    def on_signal(signum: int, _frame: object) -> None:
        log.info(
            "draining",
            extra={"action": "stopping", "signal": signum, "drain": f"{settings.drain_s:.0f}s"},
        )
        worker.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        worker.run()
    except Exception as exc:  # a fatal broker error, or a reader that could not go on
        log.critical(
            "the worker stopped (exit %d)",
            FATAL_EXIT,
            exc_info=not isinstance(exc, CronlogError),
            extra={"action": "fatal", "thread_": "main", "error": exc},
        )
        raise SystemExit(FATAL_EXIT) from exc
    if worker.failure is not None:
        log.critical(
            "the worker stopped (exit %d)",
            FATAL_EXIT,
            extra={"action": "fatal", "thread_": "replies", "error": worker.failure},
        )
        raise SystemExit(FATAL_EXIT)
    log.info("stopped", extra={"action": "stopped", "worker_id": settings.worker_id})


if __name__ == "__main__":
    main()
