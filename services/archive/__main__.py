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

log = logging.getLogger("cronlog.archive")


def main(argv: list[str] | None = None) -> int:
    """Run the exporter with settings from the environment (``CRONLOG_*``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--once", action="store_true", help="export once and exit")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    settings = ArchiveSettings()
    log.info(
        "action=start dest=%s hot_window=%s interval=%s",
        settings.archive_dest,
        settings.archive_hot_window,
        settings.archive_interval,
    )
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    while True:
        try:
            report = export(settings, datetime.now(UTC))
        except (CronlogError, TimeoutError) as exc:
            log.error("action=export_failed error=%s", exc)
            if args.once:
                return 1
        else:
            log.info(
                "action=exported days=%d rows=%d files=%d bytes=%d already=%d",
                len(report.days),
                report.rows,
                report.files,
                report.bytes,
                report.already,
            )
            if args.once:
                return 0
        if stop.wait(settings.archive_interval.total_seconds()):
            return 0


if __name__ == "__main__":
    sys.exit(main())
