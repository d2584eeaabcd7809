"""``python -m services.ingress``: relay tenants' ingress topics to the commands topic until
SIGTERM/SIGINT."""

from __future__ import annotations

import logging
import signal
import threading

from services import metrics_http
from services.ingress.relay import REGISTRY, IngressRelay
from services.ingress.settings import IngressSettings
from services.logging_setup import configure_logging, log_settings
from topology.kafka.bootstrap import ensure_topics_retrying
from topology.kafka.retrying import fatal

log = logging.getLogger("cronlog.ingress")


def main() -> None:
    """Start one ingress relay with settings from the environment (``CRONLOG_*``)."""
    configure_logging("ingress")
    settings = IngressSettings()
    log_settings(log, settings)
    metrics_http.serve(REGISTRY, settings.metrics_port, settings.metrics_host)
    ensure_topics_retrying(settings)  # idempotent; any service may start first
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        log.info("stopping", extra={"action": "stopping", "signal": signum})
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        IngressRelay(settings).run(stop)
    except Exception as exc:  # a fatal broker error, or a bug: end here, restarted from outside
        fatal("main", exc)
    log.info("stopped", extra={"action": "stopped"})


if __name__ == "__main__":
    main()
