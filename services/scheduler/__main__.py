"""``python -m services.scheduler``: ensure topics, then fold and tick until SIGTERM."""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from types import FrameType

from services import tracing
from services.logging_setup import configure_logging, log_settings
from services.scheduler import metrics
from services.scheduler.after_relay import start_after_relay
from services.scheduler.runtime import FoldRuntime
from services.scheduler.settings import SchedulerSettings
from services.scheduler.ticker import run_ticker
from services.scheduler.transaction import Fenced
from topology.kafka.bootstrap import ensure_topics_retrying
from topology.kafka.retrying import FATAL_EXIT, Stopped, fatal, start_thread
from topology.wire.codec import RegistryUnavailable
from topology.wire.registry import register_schemas, registry_client

log = logging.getLogger("cronlog.scheduler")


def main() -> None:
    """Start one scheduler process with settings from the environment (``CRONLOG_*``).

    Every way it ends is one of docs/operations.md, "Faults and what happens": SIGTERM (exit
    0), fenced (exit 70, ``action=fenced``), or anything else that cannot go on (exit 70,
    ``action=fatal thread=main``): never a raw traceback.
    """
    settings = SchedulerSettings()
    configure_logging("scheduler", level=settings.log_level)
    log_settings(log, settings)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("stopping", extra={"action": "stopping", "signal": signum})
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    relay_stop: threading.Event | None = None
    try:
        tracing.setup("cronlog-scheduler")  # off unless OTEL_* asks for traces
        metrics.serve(settings.metrics_port, settings.metrics_host)  # a port taken: exit 70
        ensure_topics_retrying(settings, stop=stop)  # a broker not up yet is waited for
        register_with_registry(settings)
        runtime = FoldRuntime(settings, stop=stop)
        start_thread(
            "ticker",
            lambda: run_ticker(
                settings,
                runtime.owned_partitions,
                stop,
                interval_s=settings.tick_interval_s,
                instance_id=settings.instance_id,
                gate=runtime.tick_gate,
            ),
        )
        if settings.after_relay:
            # job after job: a thread beside the fold; its progress is its committed offsets
            _, relay_stop = start_after_relay(settings)
        runtime.run()
    except Fenced as exc:
        log.critical(
            "this process may no longer write (a newer instance took its transactional.id, "
            "or its transaction timed out and was aborted); exiting so that it restarts fresh",
            extra={"action": "fenced", "error": exc},
        )
        sys.exit(FATAL_EXIT)
    except Stopped as exc:
        log.info("stopped while waiting", extra={"action": "stopped_waiting", "error": exc})
    except Exception as exc:  # e.g. a restore error that is not transient: exit 70, logged
        fatal("main", exc)
    finally:
        if relay_stop is not None:
            relay_stop.set()
    log.info("stopped", extra={"action": "stopped"})


REGISTRY_EXIT = 78
"""Exit status when the schema registry refused or never answered (BSD's EX_CONFIG)."""


def register_with_registry(settings: SchedulerSettings, deadline_s: float = 60.0) -> None:
    """Register cronlog's schemas when ``CRONLOG_SCHEMA_REGISTRY_URL`` is set (else nothing).

    Retried every 2 s for up to ``deadline_s`` seconds; then the process exits
    ``REGISTRY_EXIT`` naming the subject and the error: a registry that is configured but
    refuses (a compatibility rule, auth) is a configuration error to see, not to fold past.
    """
    client = registry_client(settings)
    if client is None:
        return
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            register_schemas(client, settings)
            return
        except RegistryUnavailable as exc:
            if time.monotonic() >= deadline:
                log.critical("exiting", extra={"action": "schema_registry_failed", "error": exc})
                sys.exit(REGISTRY_EXIT)
            log.warning(
                "registry not answering: retried in 2 s",
                extra={"action": "schema_registry_retry", "error": exc},
            )
            time.sleep(2.0)


if __name__ == "__main__":
    main()
