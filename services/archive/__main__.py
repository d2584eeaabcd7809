"""``python -m services.archive``: export run-events past the hot window, then every interval.

``--once`` exports once and exits (status 0; 1 on an archive error, naming it).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from datetime import UTC, datetime
from types import FrameType

from cronlog.errors import CronlogError
from services.archive.export import export
from services.archive.settings import ArchiveSettings
from services.logging_setup import configure_logging, log_settings

log = logging.getLogger("cronlog.archive")


def main(argv: list[str] | None = None) -> int:
    """Run the exporter with settings from the environment (``CRONLOG_*``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--once", action="store_true", help="export once and exit")
    args = parser.parse_args(argv)
    configure_logging("archive")
    settings = ArchiveSettings()
    log_settings(log, settings)  # action=start, settings.archive_dest=… and the others
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    while True:
        try:
            report = export(settings, datetime.now(UTC))
        except (CronlogError, TimeoutError) as exc:
            log.error("export failed", extra={"action": "export_failed", "error": exc})
            if args.once:
                return 1
        else:
            log.info(
                "exported",
                extra={
                    "action": "exported",
                    "days": len(report.days),
                    "rows": report.rows,
                    "files": report.files,
                    "bytes": report.bytes,
                    "already": report.already,
                },
            )
            if args.once:
                return 0
        if stop.wait(settings.archive_interval.total_seconds()):
            return 0


if __name__ == "__main__":
    sys.exit(main())
