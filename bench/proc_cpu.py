"""CPU seconds of whole process trees from ``/proc``, sampled while a benchmark runs
(``bench/compare.py``): every process of a system, each with the pool processes it forks.

A :class:`Poller` thread scans ``/proc/*/stat`` every ``every_s`` seconds and records, per
*unit*, the CPU seconds used so far. The units of one sample are:

- the root (the benchmark's driver, a process this program started): its own utime + stime
  only, since its children are the system's servers, each a unit of its own;
- each direct child of the root with all its descendants: their utime + stime, plus the
  cutime + cstime of every member but the child's parent (what their reaped children used,
  e.g. a pool process that was replaced);
- each extra pid (the broker, started elsewhere): the same, its descendants included.

:func:`window_cpu` interpolates each unit's curve at the start and at the end of a window
(linearly between the two samples around the instant) and returns the difference. A unit
born inside the window counts from zero; one that ended inside it counts to its last sample.

Field positions: proc(5), ``/proc/[pid]/stat``: after the ``(comm)`` field, which may hold
spaces and parentheses (hence the split at the *last* ``)``), the fields from ``state`` on;
ppid is field 4, utime/stime/cutime/cstime fields 14-17, in clock ticks (``SC_CLK_TCK``).
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class Stat:
    """The fields of one ``/proc/<pid>/stat`` line this module uses (times in seconds)."""

    pid: int
    comm: str
    ppid: int
    utime: float
    stime: float
    cutime: float
    cstime: float

    @property
    def own(self) -> float:
        """utime + stime: CPU seconds of the process itself, all its threads."""
        return self.utime + self.stime

    @property
    def reaped(self) -> float:
        """cutime + cstime: CPU seconds of its children that ended and were waited for."""
        return self.cutime + self.cstime


def parse_stat(line: str, tick_s: float = TICK_S) -> Stat:
    """Parse one ``/proc/<pid>/stat`` line.

    Raises:
        ValueError: not a stat line (fewer fields than proc(5) lists, or non-numbers).
    """
    head, sep, tail = line.rpartition(")")
    pid_text, open_paren, comm = head.partition(" (")
    fields = tail.split()
    if not sep or not open_paren or len(fields) < 15:
        raise ValueError(f"not a /proc/<pid>/stat line: {line[:80]!r}")
    # fields[0] is proc(5)'s field 3 (state): field k is fields[k - 3]
    utime, stime, cutime, cstime = (int(fields[k - 3]) * tick_s for k in (14, 15, 16, 17))
    return Stat(int(pid_text), comm, int(fields[1]), utime, stime, cutime, cstime)


def read_stat(pid: int) -> Stat | None:
    """The stat of ``pid``, or None when it has ended (or is not ours to read)."""
    try:
        return parse_stat(Path(f"/proc/{pid}/stat").read_text())
    except (OSError, ValueError):
        return None


def scan() -> dict[int, Stat]:
    """Every process's stat, by pid (those that end while the scan runs are left out)."""
    out = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            stat = read_stat(int(entry.name))
            if stat is not None:
                out[stat.pid] = stat
    return out


def cmdline(pid: int) -> list[str]:
    """The argv of ``pid`` (empty when it has ended or is a zombie)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return []
    return raw.rstrip("\0").split("\0") if raw else []


def environ(pid: int) -> dict[str, str]:
    """The environment ``pid`` was started with (empty when it has ended)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
    except OSError:
        return {}
    return dict(kv.split("=", 1) for kv in raw.split("\0") if "=" in kv)


def subtree_cpu(top: int, stats: dict[int, Stat]) -> float:
    """CPU seconds of ``top`` and its descendants in ``stats`` (own, plus what each reaped)."""
    kids: dict[int, list[int]] = {}
    for s in stats.values():
        kids.setdefault(s.ppid, []).append(s.pid)
    total, todo = 0.0, [top]
    while todo:
        pid = todo.pop()
        if pid in stats:
            total += stats[pid].own + stats[pid].reaped
            todo += kids.get(pid, [])
    return total


def units(root: int, extra: dict[str, int], stats: dict[int, Stat]) -> dict[int, float]:
    """One sample: CPU seconds so far per unit (keyed by the unit's top pid; see the module)."""
    out = {top: subtree_cpu(top, stats) for top in extra.values() if top in stats}
    if root in stats:
        out[root] = stats[root].own
        for s in stats.values():
            if s.ppid == root:
                out[s.pid] = subtree_cpu(s.pid, stats)
    return out


Sample = tuple[float, dict[int, float]]
"""(epoch seconds, CPU seconds so far per unit)."""


class Poller:
    """A thread sampling :func:`units` of ``root`` and ``extra`` every ``every_s`` seconds;
    ``names`` holds, per unit, what ``name_of(pid)`` last said while it ran."""

    def __init__(
        self,
        root: int,
        extra: dict[str, int],
        name_of: Callable[[int], str],
        every_s: float = 0.5,
    ) -> None:
        self.root, self.extra, self.name_of, self.every_s = root, extra, name_of, every_s
        self.samples: list[Sample] = []
        self.names: dict[int, str] = {pid: name for name, pid in extra.items()}
        self.names[root] = "driver"
        self._fixed = set(self.names)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-poller", daemon=True)

    def start(self) -> Poller:
        """Start sampling (one sample at once)."""
        self._thread.start()
        return self

    def _run(self) -> None:
        while True:
            now, got = time.time(), units(self.root, self.extra, scan())
            for pid in got:
                # asked again each time: right after the fork, before its exec, a child
                # still shows its parent's argv; a process that has ended shows none
                if pid not in self._fixed and (pid not in self.names or cmdline(pid)):
                    self.names[pid] = self.name_of(pid)
            self.samples.append((now, got))
            if self._stop.wait(self.every_s):
                return

    def stop(self) -> list[Sample]:
        """Stop sampling; return the samples."""
        self._stop.set()
        self._thread.join()
        return self.samples


def value_at(samples: list[Sample], unit: int, at: float) -> float:
    """A unit's CPU seconds at instant ``at``: interpolated between the samples around it;
    0 before its first sample, its last value after its last one."""
    points = [(t, got[unit]) for t, got in samples if unit in got]
    if not points or at < points[0][0]:
        return 0.0
    for (t0, v0), (t1, v1) in itertools.pairwise(points):
        if t0 <= at <= t1:
            return v0 + (v1 - v0) * (at - t0) / (t1 - t0) if t1 > t0 else v1
    return points[-1][1]


def window_cpu(samples: list[Sample], start: float, end: float) -> dict[int, float]:
    """CPU seconds each unit used in [start, end] (epoch seconds), by unit pid."""
    seen = {unit for _, got in samples for unit in got}
    return {u: value_at(samples, u, end) - value_at(samples, u, start) for u in sorted(seen)}
