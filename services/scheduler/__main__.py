"""``python -m services.scheduler``: ensure topics, then fold and tick until SIGTERM."""

from __future__ import annotations

import logging
import signal
import sys
from types import FrameType

from services import tracing
from services.scheduler import metrics
from services.scheduler.runtime import FoldRuntime
from services.scheduler.settings import SchedulerSettings
from services.scheduler.ticker import run_ticker
from services.scheduler.transaction import Fenced
from topology.after_relay import start_after_relay
from topology.bootstrap import ensure_topics_retrying
from topology.retrying import Stopped, start_thread

log = logging.getLogger("cronlog.scheduler")


def main() -> None:
    """Start one scheduler process with settings from the environment (``CRONLOG_*``)."""
    settings = SchedulerSettings()
    logging.basicConfig(
        level=settings.log_level_number(),
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    tracing.setup("cronlog-scheduler")  # off unless OTEL_* asks for traces
    metrics.serve(settings.metrics_port, settings.metrics_host)  # a port taken: exit 70
    ensure_topics_retrying(settings)
    runtime = FoldRuntime(settings)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("action=stopping signal=%d", signum)
        runtime.stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    start_thread(
        "ticker",
        lambda: run_ticker(
            settings,
            runtime.owned_partitions,
            runtime.stop,
            interval_s=settings.tick_interval_s,
            instance_id=settings.instance_id,
            gate=runtime.tick_gate,
        ),
    )
    relay_stop = None
    if settings.after_relay:
        # job after job: a thread beside the fold; its progress is its committed offsets
        _, relay_stop = start_after_relay(settings)
    try:
        runtime.run()
    except Fenced as exc:
        log.critical(
            "action=fenced error=%s: this process may no longer write (a newer instance took "
            "its transactional.id, or its transaction timed out and was aborted); exiting so "
            "that it restarts fresh",
            exc,
        )
        sys.exit(70)
    except Stopped as exc:
        log.info("action=stopped_waiting error=%s", exc)
    finally:
        if relay_stop is not None:
            relay_stop.set()
    log.info("action=stopped")


if __name__ == "__main__":
    main()
