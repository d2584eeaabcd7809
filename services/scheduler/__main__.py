"""``python -m services.scheduler``: ensure topics, then run the scheduler until SIGTERM."""

from __future__ import annotations

import atexit
import logging
import shutil

import faust

from services.scheduler.app import create_app
from services.scheduler.settings import SchedulerSettings
from topology.after_relay import start_after_relay
from topology.bootstrap import ensure_topics_retrying


def main() -> None:
    """Start one scheduler process with settings from the environment (``CRONLOG_*``)."""
    settings = SchedulerSettings()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    ensure_topics_retrying(settings)
    if not settings.keep_local_state:
        # State is the changelog, never a local store that may be ahead of it.
        shutil.rmtree(settings.state_path(), ignore_errors=True)
    app = create_app(settings)
    if settings.after_relay:
        # job after job: a thread beside the fold; its progress is its committed offsets
        thread, stop = start_after_relay(settings)
        atexit.register(lambda: (stop.set(), thread.join(5)))
    worker = faust.Worker(app, loglevel=settings.log_level, redirect_stdouts=False)
    worker.execute_from_commandline()


if __name__ == "__main__":
    main()
