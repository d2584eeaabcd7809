"""``python -m services.worker``: run one worker until SIGTERM/SIGINT, then drain."""

from __future__ import annotations

import logging
import signal

from cronlog.errors import CronlogError
from services.worker.settings import WorkerSettings
from services.worker.worker import Worker
from topology.bootstrap import ensure_topics


def main() -> None:
    """Start a worker with settings from the environment (``CRONLOG_*``)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    settings = WorkerSettings()
    ensure_topics(settings)  # idempotent; any service may start first
    worker = Worker(settings)
    signal.signal(signal.SIGTERM, lambda *_: worker.stop())
    signal.signal(signal.SIGINT, lambda *_: worker.stop())
    try:
        worker.run()
    except CronlogError as exc:
        logging.getLogger("cronlog.worker").critical("worker stopped: %s", exc)
        raise SystemExit(1) from exc


if __name__ == "__main__":
    main()
