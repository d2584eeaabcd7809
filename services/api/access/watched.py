"""A configuration file the API re-reads when it changes (the tokens file, the tenants file)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

from cronlog.errors import CronlogError

log = logging.getLogger("cronlog.api")
T = TypeVar("T")


class WatchedFile(Generic[T]):
    """The parsed contents of ``path``, re-read when its mtime or size changes; thread-safe.

    A missing file (or no path) is ``empty``. A file that cannot be parsed (half-written,
    broken by hand) keeps what was read before and is logged once per change, so a careless
    edit never turns every request into an error.

    Args:
        path: the file, or None.
        parse: path → contents; raises CronlogError, OSError or ValueError (pydantic's
            ValidationError is one) for a bad file.
        empty: the contents of a missing file.
        what: the file's name in log lines (``tokens``, ``tenants``).
    """

    def __init__(self, path: Path | None, parse: Callable[[Path], T], empty: T, what: str) -> None:
        self.path, self._parse, self._empty, self._what = path, parse, empty, what
        self._lock = threading.Lock()
        self._value: T = empty
        self._version: tuple[int, int] | None = None

    def get(self) -> T:
        """Return the contents as of the file's current version."""
        if self.path is None:
            return self._empty
        with self._lock:
            try:
                st = self.path.stat()
            except FileNotFoundError:
                self._value, self._version = self._empty, None
                return self._value
            version = (st.st_mtime_ns, st.st_size)
            if version != self._version:
                self._version = version
                try:
                    self._value = self._parse(self.path)
                except (CronlogError, OSError, ValueError) as exc:
                    log.error(
                        "the %s file cannot be read; keeping the %d %s read before: %s",
                        self._what,
                        len(self._value) if hasattr(self._value, "__len__") else 0,
                        self._what,
                        exc,
                        extra={"action": f"api.{self._what}_unreadable"},
                    )
            return self._value
