"""The state dir and options checks of ``cronlog replay`` (``services/cli/replay.py``)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from cronlog.errors import CronlogError
from topology.kafka.topics import Topics

__all__ = ["MANIFEST", "TABLE_DIR", "ReplayError", "check_target", "prepare_state_dir"]

MANIFEST = "replay.json"
TABLE_DIR = "jobs"


class ReplayError(CronlogError):
    """The replay cannot run as asked (bad option, unusable state dir or log)."""


def prepare_state_dir(path: Path | None, force: bool) -> Path:
    """Return an empty state dir: a new temp dir, or ``path`` checked (and cleared if forced).

    Raises:
        ReplayError: ``path`` is a file, or is not empty and ``force`` is not set.
    """
    if path is None:
        return Path(tempfile.mkdtemp(prefix="cronlog-replay-"))
    if path.exists() and not path.is_dir():
        raise ReplayError(f"--state-dir {path} is not a directory")
    if path.exists() and any(path.iterdir()):
        if not force:
            raise ReplayError(
                f"--state-dir {path} is not empty; replay needs a fresh state "
                f"(use --force to replace its {TABLE_DIR}/ and {MANIFEST})"
            )
        shutil.rmtree(path / TABLE_DIR, ignore_errors=True)
        (path / MANIFEST).unlink(missing_ok=True)
    path.mkdir(parents=True, exist_ok=True)
    return path


def check_target(topics: Topics, target: str) -> None:
    """Refuse a ``--to-topic`` that is one of cronlog's own topics or not a topic name.

    Raises:
        ReplayError: naming why.
    """
    own = {
        topics.commands,
        topics.run_events,
        topics.ready,
        topics.replies,
        topics.dead_letters,
        topics.job_table_changelog,
        topics.snapshots,
    }
    if target in own:
        raise ReplayError(
            f"--to-topic {target!r} is one of cronlog's live topics; re-emitting "
            f"there would duplicate history for every consumer"
        )
    if not target or len(target) > 249:
        raise ReplayError(f"--to-topic {target!r} is not a valid topic name")
