"""Workers in the API: the latest heartbeat of each worker, and ``GET /api/v1/workers``.

``WorkerDirectory`` reads the compacted ``cronlog.workers`` topic from its beginning into an
in-memory map (worker_id → latest ``WorkerHeartbeat``), in a reader thread of its own with the
same broker-error handling as the other readers (``topology.kafka.retrying``). A tombstone removes a
worker. The topic is small (one live record per worker, kept a day), so nothing is stored.

A worker whose last heartbeat is older than its ttl (3 heartbeat intervals, carried in the
heartbeat) is ``lost``: it died without a tombstone, or cannot reach the broker. Lost workers
are left out of the listing unless ``include_lost=true`` asks for them. Ages compare the API's
clock with the worker's (``at``): hosts are expected to keep NTP time.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from typing import Annotated, Any, Literal

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from fastapi import APIRouter, Depends, HTTPException, Query, Request
from pydantic import BaseModel

from cronlog.time import iso
from services.api.access.auth import Caller, principal
from services.api.access.scope import sees_job
from services.api.readmodel.health import ReaderHealth
from services.api.shapes.responses import documented
from topology.kafka.config import KafkaSettings
from topology.kafka.retrying import (
    Liveness,
    Unavailable,
    call_with_retry,
    check_topic,
    record_ok,
)
from topology.kafka.topics import Topics
from topology.wire.codec import DecodeError, decode_heartbeat
from topology.wire.heartbeats import WorkerHeartbeat

log = logging.getLogger("cronlog.api.workers")
router = APIRouter(prefix="/api/v1", dependencies=[Depends(principal)])


class LeaseOut(BaseModel):
    """An attempt a worker holds a lease on."""

    run_id: str
    task: str
    attempt: int
    epoch: int


class WorkerOut(BaseModel):
    """A worker as its latest heartbeat shows it.

    Attributes:
        state: ``alive``, or ``lost`` once ``age_s`` exceeds ``ttl_s`` (listed only with
            ``include_lost=true``).
        slots / free_slots: attempts it runs at once, and those free at ``last_heartbeat_at``.
        leases: the attempts it held a lease on then.
        started_at / last_heartbeat_at: ISO UTC ``Z``, the worker's clock.
        age_s: seconds since its last heartbeat (the API's clock minus the worker's).
        ttl_s: how long a heartbeat vouches for it (3 heartbeat intervals).
    """

    worker_id: str
    host: str
    pid: int
    slots: int
    free_slots: int
    leases: list[LeaseOut]
    started_at: str
    last_heartbeat_at: str
    age_s: float
    ttl_s: float
    state: Literal["alive", "lost"]


class WorkerList(BaseModel):
    """``GET /api/v1/workers``: ordered by worker_id."""

    workers: list[WorkerOut]


def worker_view(hb: WorkerHeartbeat, now: datetime) -> dict[str, Any]:
    """Return the API shape (``WorkerOut``) of a worker's latest heartbeat at ``now``."""
    return {
        "worker_id": hb.worker_id,
        "host": hb.host,
        "pid": hb.pid,
        "slots": hb.slots,
        "free_slots": hb.free_slots,
        "leases": [
            {"run_id": le.run_id, "task": le.task, "attempt": le.attempt, "epoch": le.epoch}
            for le in hb.leases
        ],
        "started_at": iso(hb.started_at),
        "last_heartbeat_at": iso(hb.at),
        "age_s": round((now - hb.at).total_seconds(), 3),
        "ttl_s": hb.ttl.total_seconds(),
        "state": "lost" if hb.lost(now) else "alive",
    }


class WorkerDirectory(ReaderHealth):
    """The latest heartbeat of every worker, kept up to date by a daemon thread.

    ``apply`` takes one record (the thread's, or a test's); ``listing`` may be called from any
    thread.

    Args:
        settings: cluster and topic prefix.
        clock: the API's clock (tests pass a fixed one).
    """

    thread_name = "workers"

    def __init__(
        self, settings: KafkaSettings, clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    ) -> None:
        self.settings, self.clock = settings, clock
        self.topic = Topics.of(settings).workers
        self.liveness = Liveness(self.thread_name, log)
        self._latest: dict[str, WorkerHeartbeat] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        """Take one record of the workers topic: a heartbeat, or a tombstone (``value`` None).

        An older heartbeat than the one held (a record read out of order) changes nothing;
        undecodable records are logged and skipped.
        """
        if not key:
            return
        worker_id = key.decode("utf-8", "replace")
        if value is None:
            with self._lock:
                self._latest.pop(worker_id, None)
            return
        try:
            hb = decode_heartbeat(value)
        except DecodeError as exc:
            log.error("undecodable heartbeat of %s: %s", worker_id, exc)
            return
        with self._lock:
            held = self._latest.get(worker_id)
            if held is None or hb.at >= held.at:
                self._latest[worker_id] = hb

    def listing(self, include_lost: bool = False) -> list[dict[str, Any]]:
        """Return every worker (``WorkerOut`` shape) ordered by worker_id; lost ones only
        with ``include_lost``."""
        now = self.clock()
        with self._lock:
            latest = sorted(self._latest.items())
        views = [worker_view(hb, now) for _, hb in latest]
        return [v for v in views if include_lost or v["state"] == "alive"]

    # -- lifecycle: ReaderHealth's start and stop, as ReadModel's (for /healthz and /readyz) --
    def _run(self) -> None:
        consumer = Consumer(
            self.settings.consumer_config(
                f"{self.settings.topic_prefix}cronlog-api-workers-{uuid.uuid4().hex}",
                **{"enable.partition.eof": False, "error_cb": self.liveness.failed},
            )
        )
        try:
            partitions = call_with_retry(
                partial(self._partitions, consumer),
                what=f"listing {self.topic}",
                liveness=self.liveness,
                stop=self._stop,
            )
            consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in partitions])
            while not self._stop.is_set():
                self.liveness.beat()
                for msg in consumer.consume(200, timeout=0.2):
                    if record_ok(msg, self.liveness):
                        self.apply(msg.key(), msg.value())
                self.liveness.probe(lambda: check_topic(consumer, self.topic))
        finally:
            consumer.close()

    def _partitions(self, consumer: Consumer) -> list[int]:
        meta = consumer.list_topics(self.topic, timeout=10).topics.get(self.topic)
        if meta is None or meta.error is not None or not meta.partitions:
            raise Unavailable(f"topic {self.topic} does not exist (yet)")
        return sorted(meta.partitions)


@router.get("/workers", response_model=WorkerList, responses=documented(503))
def list_workers(
    request: Request,
    caller: Caller,
    include_lost: Annotated[bool, Query(description="also list lost workers")] = False,
) -> Any:
    """The workers that heartbeat: id, host, pid, slots, free slots, held leases, last
    heartbeat and its age, ordered by worker_id. A worker whose last heartbeat is older than
    its ttl (3 heartbeat intervals) is ``lost`` and listed only with ``include_lost=true``; a
    worker that stopped gracefully is not listed at all."""
    directory: WorkerDirectory | None = getattr(request.app.state, "workers", None)
    if directory is None:
        raise HTTPException(503, "the workers reader is not running")
    listing = directory.listing(include_lost)
    rm = request.app.state.read_model
    for w in listing:  # the fleet is shared; another tenant's leases are not shown
        w["leases"] = [le for le in w["leases"] if _sees_run(rm, caller, le["run_id"])]
    return {"workers": listing}


def _sees_run(rm: Any, caller: Caller, run_id: str) -> bool:
    if caller.tenant == "*":
        return True
    run = rm.run(run_id) if rm is not None else None
    return run is not None and sees_job(rm, caller, run["job_id"])
