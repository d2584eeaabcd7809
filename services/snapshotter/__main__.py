"""``python -m services.snapshotter``: take a snapshot every ``CRONLOG_SNAPSHOT_INTERVAL_S``
seconds until SIGTERM (what ``cronlog up`` runs; ``cronlog snapshot`` takes one)."""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType

from pydantic import Field

from cronlog.errors import CronlogError
from services.logging_setup import configure_logging, log_settings
from services.snapshotter.take import take_snapshot
from topology.kafka.bootstrap import ensure_topics_retrying
from topology.kafka.config import KafkaSettings

log = logging.getLogger("cronlog.snapshotter")


class SnapshotterSettings(KafkaSettings):
    """Settings of the snapshotter (env prefix ``CRONLOG_``).

    Attributes:
        snapshot_interval_s: seconds between two snapshots. Default 3600; it must stay well
            under ``commands_retention_days`` (a snapshot is what lets retention delete the
            commands before it: docs/architecture.md, "Retention and snapshots").
    """

    snapshot_interval_s: float = Field(default=3600.0, gt=0, le=7 * 86_400)


def run(settings: SnapshotterSettings, stop: threading.Event) -> None:
    """Take a snapshot at once, then every ``snapshot_interval_s``, until ``stop`` is set.

    A failed snapshot is logged (``action=snapshot_failed``) and tried again at the next
    interval; it never stops the loop.
    """
    while not stop.is_set():
        try:
            taken = take_snapshot(settings)
            m = taken.manifest
            log.info(
                "snapshot taken",
                extra={
                    "action": "snapshot_written" if taken.written else "snapshot_unchanged",
                    "snapshot_id": m.snapshot_id if m else "-",
                    "folded": taken.folded,
                    "commands": m.commands if m else 0,
                },
            )
            for note in taken.notes:
                log.warning(note, extra={"action": "snapshot_note"})
        except CronlogError as exc:
            log.error("snapshot failed", extra={"action": "snapshot_failed", "error": exc})
        stop.wait(settings.snapshot_interval_s)


def main() -> None:
    """Run the snapshotter with settings from the environment until SIGTERM/SIGINT."""
    configure_logging("snapshotter")
    settings = SnapshotterSettings()
    log_settings(log, settings)
    ensure_topics_retrying(settings)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("stopping", extra={"action": "stopping", "signal": signum})
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    run(settings, stop)


if __name__ == "__main__":
    main()
