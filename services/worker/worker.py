"""The worker: pull ready task instances, claim them, run them under renewed leases, complete.

Ready records come from the ready topic (``services/worker/ready.py``), polled only for free
slots (slots minus running attempts minus claims in flight). Claims are pipelined: a polled
batch's claims are sent together, the records are acknowledged once the claims are durable on
the commands topic, and the loop polls again at once; answers (grants, renewals, refusals) come
on the replies topic, keyed by worker_id, read from this worker's one partition
(``replies.py``), and a grant starts its attempt from there (``attempts.py``).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass

from confluent_kafka import KafkaException, Message, Producer

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.errors import CronlogError
from cronlog.ids import claim_idem_key, is_claim_key
from cronlog.vocabulary import CommandKind
from services.worker.attempts import Attempts
from services.worker.heartbeat import Heartbeat
from services.worker.kinds import PythonPool
from services.worker.logsink import LogShipper
from services.worker.ready import ReadySource
from services.worker.replies import read_replies
from services.worker.settings import WorkerSettings
from topology.codec import DecodeError, decode_event, encode_command
from topology.heartbeats import HeldLease
from topology.retrying import Liveness, Stopped, record_ok, start_thread
from topology.topics import Topics

log = logging.getLogger("cronlog.worker")
STOP_CLAIM_WAIT_S = 5.0
"""Once stopping, how long claims in flight are still waited for (a grant is released)."""


@dataclass(frozen=True, slots=True)
class PendingClaim:
    """A ClaimTask sent and not yet answered."""

    job_id: str
    ready: ev.TaskReady
    sent_at: float


class Worker:
    """One worker process. ``run()`` blocks until ``stop()``."""

    def __init__(self, settings: WorkerSettings) -> None:
        self.settings = settings
        self.topics = Topics.of(settings)
        self.producer = Producer(settings.producer_config())
        self._producer_lock = threading.Lock()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._claims: dict[tuple[str, str], PendingClaim] = {}
        self._reserved: dict[str, float] = {}
        """Completions sent with claim_next 1, by idem_key: their slot stays taken until the
        fold answers (it may grant the run's next task to this worker at once)."""
        self._slot_freed = threading.Event()
        self._replies_ready = threading.Event()
        self.failure: str | None = None
        """Why a thread of this worker could not go on (the process then exits non-zero)."""
        self.replies_liveness = Liveness("replies", log)
        self.ready_liveness = Liveness("ready", log)
        self.python_pool = PythonPool(settings.slots)
        self.logs = LogShipper(
            settings,
            self.topics.logs,
            cap_bytes=settings.log_cap_bytes,
            flush_s=settings.log_flush_s,
        )
        self.attempts = Attempts(
            settings.worker_id,
            self._send,
            self.python_pool,
            self.logs,
            settings.log_cap_bytes,
            self._slot_freed.set,
            self._reserve,
        )

    def stop(self) -> None:
        """Ask the worker to stop pulling and drain (thread-safe)."""
        self._stop.set()
        self._slot_freed.set()

    def free_slots(self) -> int:
        """Return the slots neither running an attempt nor waiting for a claim's (or an eager
        completion's) answer."""
        with self._lock:
            busy = len(self.attempts) + len(self._claims) + len(self._reserved)
        return self.settings.slots - busy

    def _reserve(self, complete_key: str) -> int:
        """A successful attempt is about to complete: offer its slot to the run's next task
        (eager dispatch), unless stopping."""
        if self._stop.is_set():
            return 0
        with self._lock:
            self._reserved[complete_key] = time.monotonic()
        return 1

    def held_leases(self) -> list[HeldLease]:
        """Return the leases this worker holds now (its heartbeat's; any thread)."""
        return [
            HeldLease(h.grant.run_id, h.grant.task, h.grant.attempt, h.grant.epoch)
            for h in list(self.attempts.held.values())
        ]

    # -- answers -------------------------------------------------------------------------------
    def _replies_loop(self) -> None:
        try:
            read_replies(
                self.settings,
                self.topics.replies,
                self._replies_ready,
                lambda: not self._stop.is_set() or bool(self.attempts) or bool(self._claims),
                self._on_answer,
                liveness=self.replies_liveness,
                stop=self._stop,
            )
        except Stopped:
            return
        except Exception as exc:
            # Without answers the worker would claim work it can never run: stop pulling,
            # drain what runs, and exit non-zero (__main__).
            log.critical(
                "action=thread_failed thread=replies error=%s: stopping the worker",
                exc,
                exc_info=True,
            )
            self.failure = f"replies reader: {exc}"
            self._replies_ready.set()
            self.stop()

    def _on_answer(self, record: ev.RunEvent) -> None:
        job_id, event = record.job_id, record.event
        with self._lock:  # the first answer to an eager completion frees its reservation
            reserved = self._reserved.pop(record.idem_key, None) is not None
        if reserved:
            self._slot_freed.set()
        match event:
            case ev.TaskClaimed(worker_id=holder) if holder == self.settings.worker_id:
                with self._lock:
                    pending = self._claims.pop((event.run_id, event.task), None)
                self._slot_freed.set()
                if self.attempts.holds(event.run_id, event.task):
                    return  # a re-delivered grant of a lease already running here
                if self._stop.is_set():
                    self.attempts.release(job_id, event, "worker stopping: granted as it stopped")
                    return
                if pending is None and is_claim_key(record.idem_key):
                    # the wait gave up (a failover took longer): the lease is still ours
                    log.warning("late grant; running it", extra={"run_id": event.run_id})
                self.attempts.start(job_id, event)
            case ev.CommandRejected(command=command, run_id=run_id, task=task) if run_id and task:
                if command is CommandKind.CLAIM_TASK:
                    with self._lock:
                        self._claims.pop((run_id, task), None)
                    self._slot_freed.set()
                elif command is CommandKind.RENEW_LEASE:
                    self.attempts.revoke(run_id, task)
            case _:
                return

    # -- commands ------------------------------------------------------------------------------
    def _send(self, job_id: str, idem_key: str, command: cmd.Command) -> bool:
        """Queue a command on the producer; returns False (logged) when it could not be queued.

        Never raises: a worker thread that died here would hold its slot forever. A producer
        in a fatal state (librdkafka's idempotence can end in one after a broker outage) is
        replaced; commands are idempotent by idem_key, so a retried send is harmless.
        """
        value = encode_command(cmd.Envelope(idem_key=idem_key, job_id=job_id, command=command))
        for _ in range(50):
            try:
                with self._producer_lock:
                    producer = self.producer
                producer.produce(self.topics.commands, key=job_id.encode(), value=value)
                producer.poll(0)
                return True
            except BufferError:
                time.sleep(0.1)  # local queue full (broker unreachable): wait for room
            except KafkaException as exc:
                log.error("cannot send %s: %s", type(command).__name__, exc)
                if exc.args and exc.args[0].fatal():
                    self._replace_producer(producer)
                else:
                    return False
        return False

    def _replace_producer(self, broken: Producer) -> None:
        with self._producer_lock:
            if self.producer is broken:
                log.warning("producer is in a fatal state; replacing it")
                self.producer = Producer(self.settings.producer_config())

    # -- main loop -----------------------------------------------------------------------------
    def run(self) -> None:
        """Pull, claim and execute until stopped; then drain for ``drain_s`` seconds."""
        s = self.settings
        start_thread("replies", self._replies_loop)  # a bug in it ends the process
        while not self._replies_ready.wait(0.5) and not self._stop.is_set():
            pass  # the reader retries transient errors itself (logged once)
        if self.failure is not None:
            raise CronlogError(f"worker cannot read its replies partition: {self.failure}")
        source = ReadySource.open(s, self.topics.ready, self.ready_liveness)
        log.info("worker started", extra={"worker_id": s.worker_id, "slots": s.slots})
        heartbeat = Heartbeat(s, self.held_leases)
        heartbeat.start()
        try:
            while not self._stop.is_set():
                self.ready_liveness.beat()
                source.probe()
                self._expire_claims()
                free = self.free_slots()
                if free <= 0:
                    self._slot_freed.wait(0.05)
                    self._slot_freed.clear()
                    continue
                msgs = source.poll(free, 0.2)
                if not msgs:
                    continue
                for msg in msgs:
                    try:
                        self._send_claim(msg)
                    except Exception:  # one bad record must not stop pulling
                        log.exception("handling a ready record failed")
                # The claims are durable once flushed: the fold will answer each, so the
                # records are done with (a claim's grant to a worker that then dies comes
                # back through the lease expiring).
                self.producer.flush(5)
                source.done(msgs)
        finally:
            source.close()
            self._drain()
            heartbeat.stop()  # a tombstone: this worker is gone
            self.python_pool.shutdown()
            self.logs.close()
            self.producer.flush(10)

    def _expire_claims(self) -> None:
        cutoff = time.monotonic() - self.settings.claim_timeout_s
        with self._lock:
            stale = [k for k, p in self._claims.items() if p.sent_at < cutoff]
            for key in stale:
                del self._claims[key]
            for done in [k for k, at in self._reserved.items() if at < cutoff]:
                del self._reserved[done]
        for run_id, task in stale:  # a grant that still arrives is started by _on_answer
            log.warning("no answer to claim yet", extra={"run_id": run_id, "task": task})

    def _drain(self) -> None:
        """Give claims in flight a short wait and running attempts ``drain_s`` seconds, then
        release and kill the rest.

        A release makes the attempt ready again at once under a new epoch (not a failure),
        where killing it silently would leave it to the lease expiry.
        """
        deadline = time.monotonic() + STOP_CLAIM_WAIT_S
        while self._claims and time.monotonic() < deadline:
            time.sleep(0.05)  # a grant arriving now is released by _on_answer
        deadline = time.monotonic() + self.settings.drain_s
        while self.attempts and time.monotonic() < deadline:
            time.sleep(0.1)
        unfinished = self.attempts.release_all(
            f"worker draining: not finished within {self.settings.drain_s:g} s"
        )
        if unfinished:
            self.producer.flush(10)
            deadline = time.monotonic() + 5  # let attempt threads close their logs
            while self.attempts and time.monotonic() < deadline:
                time.sleep(0.05)
        self.attempts.stop()

    def _send_claim(self, msg: Message) -> None:
        """Send the ClaimTask a ready record asks for (nothing for a task instance this
        worker already holds or already claims).

        The idem_key carries a nonce: a claim sent again for the same attempt (its record
        re-delivered after the attempt ran here) must be answered — refused ``not_ready`` —
        not swallowed by the fold's dedupe, which would leave a slot waiting for nothing.
        """
        if not record_ok(msg, self.ready_liveness):
            return
        try:
            record = decode_event(msg.value() or b"")
        except DecodeError:
            log.exception("undecodable ready record")
            return
        ready = record.event
        if not isinstance(ready, ev.TaskReady):
            return
        key = (ready.run_id, ready.task)
        with self._lock:
            if key in self._claims or self.attempts.holds(*key):
                return
            self._claims[key] = PendingClaim(record.job_id, ready, time.monotonic())
        wid = self.settings.worker_id
        self._send(
            record.job_id,
            claim_idem_key(ready.run_id, ready.task, ready.attempt, wid, uuid.uuid4().hex[:8]),
            cmd.ClaimTask(
                run_id=ready.run_id, task=ready.task, attempt=ready.attempt, worker_id=wid
            ),
        )
