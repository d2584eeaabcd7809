"""The fold's place in the scheduler group: its consumer, and a new one when it is fenced.

A lone scheduler's static consumer can be fenced by its own stale join after a broker restart
or a coordinator stall: a join abandoned client-side but already delivered is processed later
and replaces the member that is folding ("Static consumer fenced by other consumer with same
group.instance.id"; KAFKA-20985, apache/kafka#23266; librdkafka raises it as a fatal consumer
error, librdkafka#2635). Kafka Streams shuts the application down on it; brod retries by
default (kafka4beam/brod#674). cronlog rejoins: the fenced consumer is closed, the partitions
it held are dropped as if lost, and a new consumer with the same group.instance.id joins (the
coordinator hands it the instance id). The transactional producer and its transactional.id
stay: zombie fencing by producer epoch is untouched, and the offsets of every later batch go
with the new consumer's group metadata (generation), so nothing the fenced member decided can
commit. More than ``REJOIN_LIMIT`` fences in a minute means another live process has this
instance id: that ends the process (exit 70), as a producer fenced too often does.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from services.scheduler.settings import SchedulerSettings
from services.scheduler.transaction import Fenced

log = logging.getLogger("cronlog.scheduler")
REJOIN_LIMIT = 3
"""Rejoins after a fenced consumer allowed per minute before the process gives up."""


class ConsumerFenced(Fenced):
    """The fold's consumer failed fatally (a static member fenced): a new one may rejoin."""


def fold_consumer_config(settings: SchedulerSettings, group: str) -> dict[str, object]:
    """Return the fold consumer's settings for ``group``.

    Cooperative-sticky assignment, the session timeout of ``settings`` (heartbeats at a third
    of it, at least 500 ms), offsets stored by the fold only, and static membership
    (``group.instance.id = instance_id``) unless turned off.
    """
    conf: dict[str, object] = {
        "partition.assignment.strategy": "cooperative-sticky",
        "session.timeout.ms": int(settings.session_timeout_s * 1000),
        "heartbeat.interval.ms": max(500, int(settings.session_timeout_s * 1000 / 3)),
        "max.poll.interval.ms": 300_000,
        "enable.auto.offset.store": False,
        "fetch.wait.max.ms": 50,
    }
    if settings.static_membership:
        conf["group.instance.id"] = settings.instance_id
    return settings.consumer_config(group, **conf)


class Rejoins:
    """How often the fold's consumer was replaced in the last minute.

    Args:
        clock: monotonic seconds (a parameter for the tests).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.at: list[float] = []

    def allow(self, reason: BaseException) -> None:
        """Count one more rejoin.

        Raises:
            Fenced: more than ``REJOIN_LIMIT`` within 60 s (another live process has this
                instance id; the process must end).
        """
        now = self.clock()
        self.at = [t for t in self.at if now - t < 60.0] + [now]
        if len(self.at) > REJOIN_LIMIT:
            raise Fenced(f"consumer fenced {len(self.at)} times in a minute: {reason}")
