"""``python -m services.worker``: run one worker until SIGTERM/SIGINT, then drain."""

from __future__ import annotations

import logging
import signal

from cronlog.errors import CronlogError
from services import tracing
from services.worker import metrics
from services.worker.settings import WorkerSettings
from services.worker.worker import Worker
from topology.kafka.bootstrap import ensure_topics_retrying
from topology.kafka.retrying import FATAL_EXIT


def main() -> None:
    """Start a worker with settings from the environment (``CRONLOG_*``)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    settings = WorkerSettings()
    tracing.setup("cronlog-worker")  # off unless OTEL_* asks for traces
    metrics.serve(settings.metrics_port, settings.metrics_host)  # a port taken: exit 70
    ensure_topics_retrying(settings)  # idempotent; any service may start first
    worker = Worker(settings)
    log = logging.getLogger("cronlog.worker")

    def on_signal(signum: int, _frame: object) -> None:
        log.info("action=stopping signal=%d: draining (up to %.0f s)", signum, settings.drain_s)
        worker.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        worker.run()
    except Exception as exc:  # a fatal broker error, or a reader that could not go on
        log.critical(
            "action=fatal thread=main error=%s: the worker stopped (exit %d)",
            exc,
            FATAL_EXIT,
            exc_info=not isinstance(exc, CronlogError),
        )
        raise SystemExit(FATAL_EXIT) from exc
    if worker.failure is not None:
        log.critical(
            "action=fatal thread=replies error=%s: the worker stopped (exit %d)",
            worker.failure,
            FATAL_EXIT,
        )
        raise SystemExit(FATAL_EXIT)
    log.info("action=stopped worker_id=%s", settings.worker_id)


if __name__ == "__main__":
    main()
