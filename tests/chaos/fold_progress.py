"""How far the schedulers' folds have got on the commands topic, read from the broker.

A check of the chaos run judges what the fold decided, so it first waits, bounded, for the
fold to have read what the check is about (``wait_folded``); and the stuck-lease check judges
each lease against the fold's own clock, the time of the last Tick it folded
(``fold_clocks``), not the wall clock of the teardown.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

from cronlog import commands as cmd
from topology.kafka.config import KafkaSettings
from topology.kafka.log_reader import LogReadError, committed, read_partition, reader, watermarks
from topology.kafka.topics import Topics
from topology.wire.codec import Codec

LOOK_BACK = (64, 1024, 16384)
"""Records read back from a partition's committed offset to find its last Tick, widening."""


@dataclass
class Folded:
    """The outcome of one ``wait_folded``.

    Attributes:
        what: the moment it was asked for (``before the pause``, …).
        waited_s: seconds it waited.
        lagging: partition → records not folded yet when it gave up (empty: all folded;
            -1: the broker never answered).
    """

    what: str
    waited_s: float = 0.0
    lagging: dict[int, int] = field(default_factory=dict)

    def line(self) -> str:
        """One line for the report."""
        if not self.lagging:
            return f"{self.what}: every partition folded to the end after {self.waited_s:.1f} s"
        return (
            f"{self.what}: NOT folded to the end after {self.waited_s:.0f} s, records behind "
            f"per partition {dict(sorted(self.lagging.items()))}"
        )


def _group_offsets(settings: KafkaSettings, topics: Topics) -> dict[int, int]:
    found = committed(settings, topics.scheduler_app, topics.commands, settings.partitions)
    return {p: -1 if off is None else off for p, off in found.items()}


def wait_folded(settings: KafkaSettings, what: str, timeout_s: float) -> Folded:
    """Wait until the schedulers' group has committed every command partition up to its end
    offset as sampled now (what is in the log now has been folded), at most ``timeout_s``.

    The fold commits its consumed offsets in each batch's transaction; the ticker appends a
    Tick to each owned partition every second, so a partition whose last record is a commit
    marker still gets past the sampled end within a second of being caught up.

    Returns:
        How long it waited, and the partitions still behind (with how many records) if it
        gave up: a check that follows then judges a fold that had not read everything.
    """
    topics = Topics.of(settings)
    t0 = time.monotonic()
    ends: dict[int, int] | None = None
    lagging: dict[int, int] = dict.fromkeys(range(settings.partitions), -1)
    while time.monotonic() - t0 < timeout_s:
        try:  # a broker still coming back is "not yet": asked again until the bound
            if ends is None:
                consumer = reader(settings)
                try:
                    marks = watermarks(consumer, topics.commands, settings.partitions)
                finally:
                    consumer.close()
                ends = {p: hi for p, (_lo, hi) in marks.items()}
            done = _group_offsets(settings, topics)
        except LogReadError:
            time.sleep(1.0)
            continue
        lagging = {p: end - done.get(p, -1) for p, end in ends.items() if done.get(p, -1) < end}
        if not lagging:
            break
        time.sleep(0.5)
    return Folded(what, time.monotonic() - t0, lagging)


def fold_clocks(settings: KafkaSettings, codec: Codec | None = None) -> dict[int, datetime]:
    """Return partition → the time (LogAppendTime) of the last Tick the fold folded on it.

    A Tick folded at T expires every lease with ``lease_expires_at <= T`` (``cronlog.leases``),
    so a lease lapsed by then and not expired is stuck; one lapsed after it had no scheduler
    left to expire it. A partition with no committed offset, or no Tick in the last
    ``LOOK_BACK[-1]`` records before it, is left out.
    """
    codec = codec or Codec()
    topics = Topics.of(settings)
    done = _group_offsets(settings, topics)
    out: dict[int, datetime] = {}
    consumer = reader(settings)
    try:
        for p, end in done.items():
            for back in LOOK_BACK:
                last = _last_tick_ms(consumer, codec, topics.commands, p, max(0, end - back), end)
                if last is not None:
                    out[p] = datetime.fromtimestamp(last / 1000, UTC)
                    break
                if end - back <= 0:
                    break
    finally:
        consumer.close()
    return out


def _last_tick_ms(
    consumer: object, codec: Codec, topic: str, partition: int, start: int, end: int
) -> int | None:
    last = None
    for batch in read_partition(consumer, topic, partition, start, end):  # type: ignore[arg-type]
        for m in batch:
            try:
                env = codec.decode_command(m.value() or b"")
            except Exception:  # noqa: S112 - bad input of the run: not a Tick
                continue
            if isinstance(env.command, cmd.Tick):
                last = m.timestamp()[1]
    return last
