"""The worker: pull ready task instances, claim, run under a renewed lease, complete.

Ready records come from a consumer group on the ready topic, polled only for free slots.
Answers (grants, renewals, refusals) come on the replies topic, keyed by worker_id; the worker
reads its one partition with manual assignment, so it never reads other workers' answers.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TypeVar

from confluent_kafka import (
    Consumer,
    KafkaException,
    Message,
    Producer,
)

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.errors import CronlogError
from cronlog.ids import (
    claim_idem_key,
    complete_idem_key,
    release_idem_key,
    renew_idem_key,
    task_idem_key,
)
from cronlog.time import iso
from cronlog.vocabulary import CommandKind
from services.worker.execute import Execution
from services.worker.heartbeat import Heartbeat
from services.worker.kinds import PythonPool, execution_for
from services.worker.logsink import AttemptRef, LogShipper, LogSink
from services.worker.replies import read_replies
from services.worker.settings import WorkerSettings
from topology.codec import DecodeError, decode_event, encode_command
from topology.heartbeats import HeldLease
from topology.retrying import Liveness, Stopped, check_topic, record_ok, start_thread
from topology.topics import Topics

log = logging.getLogger("cronlog.worker")
T = TypeVar("T")
Answer = ev.TaskClaimed | ev.LeaseRenewed | ev.CommandRejected
STOP_CLAIM_WAIT_S = 5.0
"""Once stopping, how long an unanswered claim is still waited for (a grant is released)."""


@dataclass
class Held:
    """An attempt this worker holds a lease on."""

    grant: ev.TaskClaimed
    job_id: str
    execution: Execution
    log: LogSink
    revoked: bool = False


@dataclass(frozen=True, slots=True)
class PendingClaim:
    """A ClaimTask sent and not yet answered: its ready record, the answer's future, when."""

    job_id: str
    ready: ev.TaskReady
    answer: Future[Answer]
    sent_at: float


class Worker:
    """One worker process. ``run()`` blocks until ``stop()``."""

    def __init__(self, settings: WorkerSettings) -> None:
        self.settings = settings
        self.topics = Topics.of(settings)
        self.producer = Producer(settings.producer_config())
        self._producer_lock = threading.Lock()
        self._stop = threading.Event()
        self._waiting: dict[tuple[str, str, str], Future[Answer]] = {}
        self._lock = threading.Lock()
        self._held: dict[tuple[str, str], Held] = {}
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

    def stop(self) -> None:
        """Ask the worker to stop pulling and drain (thread-safe)."""
        self._stop.set()

    def held_leases(self) -> list[HeldLease]:
        """Return the leases this worker holds now (its heartbeat's; any thread)."""
        return [
            HeldLease(h.grant.run_id, h.grant.task, h.grant.attempt, h.grant.epoch)
            for h in list(self._held.values())
        ]

    # -- answers -------------------------------------------------------------------------------
    def _expect(self, kind: str, run_id: str, task: str) -> Future[Answer]:
        fut: Future[Answer] = Future()
        with self._lock:
            self._waiting[(kind, run_id, task)] = fut
        return fut

    def _replies_loop(self) -> None:
        try:
            read_replies(
                self.settings,
                self.topics.replies,
                self._replies_ready,
                lambda: not self._stop.is_set() or bool(self._held),
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

    def _on_answer(self, job_id: str, event: ev.Event) -> None:
        match event:
            case ev.TaskClaimed():
                key = ("claim", event.run_id, event.task)
            case ev.LeaseRenewed():
                key = ("renew", event.run_id, event.task)
            case ev.CommandRejected(command=command, run_id=run_id, task=task) if run_id and task:
                key = ("claim" if command is CommandKind.CLAIM_TASK else "renew", run_id, task)
                if command is CommandKind.RENEW_LEASE:
                    self._revoke(run_id, task, event.detail)
            case _:
                return
        with self._lock:
            fut = self._waiting.pop(key, None)
            if fut is not None and not fut.done():
                fut.set_result(event)
                return
        if (
            isinstance(event, ev.TaskClaimed)
            and event.worker_id == self.settings.worker_id
            and (event.run_id, event.task) not in self._held
        ):
            # A grant that arrives after the claim wait gave up (a scheduler restart or
            # failover took longer): the lease is ours, so run it rather than let it expire
            # and fail an attempt that never ran (even if that oversubscribes a slot); when
            # stopping, give it back at once for the same reason.
            if self._stop.is_set():
                self._release(job_id, event, "worker stopping: granted after it stopped pulling")
            else:
                log.warning("late grant; running it", extra={"run_id": event.run_id})
                self._start(job_id, event)

    def _revoke(self, run_id: str, task: str, why: str) -> None:
        held = self._held.get((run_id, task))
        if held is not None:
            log.warning("lease revoked, killing", extra={"run_id": run_id, "task": task})
            held.revoked = True
            held.execution.kill()

    # -- commands ------------------------------------------------------------------------------
    def _send(self, job_id: str, idem_key: str, command: cmd.Command) -> bool:
        """Append a command; returns False (logged) when it could not be queued.

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
        ready = Consumer({**s.ready_consumer_config(), "error_cb": self.ready_liveness.failed})
        ready.subscribe([self.topics.ready])
        log.info("worker started", extra={"worker_id": s.worker_id, "slots": s.slots})
        heartbeat = Heartbeat(s, self.held_leases)
        heartbeat.start()
        try:
            while not self._stop.is_set():
                self.ready_liveness.beat()
                self.ready_liveness.probe(lambda: check_topic(ready, self.topics.ready))
                free = s.slots - len(self._held)
                if free <= 0:
                    time.sleep(0.05)
                    continue
                first = ready.poll(0.2)  # blocks for one; then take what is already buffered
                if first is None:
                    continue
                msgs = [first, *ready.consume(num_messages=free - 1, timeout=0)]
                # Claims of a batch go out together and their answers are awaited together:
                # one round trip per batch, not per task (the fold answers them in one pass).
                claims: list[tuple[Message, PendingClaim | None]] = []
                for msg in msgs:
                    if self._stop.is_set():
                        break  # uncommitted: the partition's next owner gets these
                    try:
                        claims.append((msg, self._send_claim(msg, claims)))
                    except Exception:  # one bad record must not stop pulling
                        log.exception("handling a ready record failed")
                        claims.append((msg, None))
                self.producer.flush(5)
                for msg, pending in claims:
                    try:
                        if pending is not None:
                            self._await_claim(pending)
                        ready.commit(message=msg, asynchronous=True)
                    except Exception:  # a failed start or commit must not stop pulling
                        log.exception("handling a ready record failed")
        finally:
            ready.close()
            self._drain()
            heartbeat.stop()  # a tombstone: this worker is gone
            self.python_pool.shutdown()
            self.logs.close()
            self.producer.flush(10)

    def _drain(self) -> None:
        """Give running attempts ``drain_s`` seconds, then release and kill the rest.

        A release makes the attempt ready again at once under a new epoch (not a failure),
        where killing it silently would leave it to the lease expiry and fail the attempt.
        """
        deadline = time.monotonic() + self.settings.drain_s
        while self._held and time.monotonic() < deadline:
            time.sleep(0.1)
        unfinished = list(self._held.values())
        for held in unfinished:
            held.revoked = True  # no completion and no renewal from here on
            self._release(
                held.job_id,
                held.grant,
                f"worker draining: not finished within {self.settings.drain_s:g} s",
            )
            held.execution.kill()
        if unfinished:
            self.producer.flush(10)
            deadline = time.monotonic() + 5  # let attempt threads close their logs
            while self._held and time.monotonic() < deadline:
                time.sleep(0.05)

    def _release(self, job_id: str, grant: ev.TaskClaimed, reason: str) -> None:
        """Give ``grant``'s lease back (ReleaseTask); idem_key ``release:run:task:epoch``."""
        log.warning(
            "releasing",
            extra={
                "run_id": grant.run_id,
                "task": grant.task,
                "attempt": grant.attempt,
                "epoch": grant.epoch,
            },
        )
        self._send(
            job_id,
            release_idem_key(grant.run_id, grant.task, grant.epoch),
            cmd.ReleaseTask(
                run_id=grant.run_id,
                task=grant.task,
                attempt=grant.attempt,
                epoch=grant.epoch,
                worker_id=self.settings.worker_id,
                reason=reason,
            ),
        )

    def _send_claim(
        self, msg: Message, batch: list[tuple[Message, PendingClaim | None]]
    ) -> PendingClaim | None:
        """Send the ClaimTask a ready record asks for; None when there is nothing to claim.

        Nothing is claimed for a task instance this worker already holds or already claims in
        this batch (a ready record re-delivered after a rebalance). The idem_key carries a
        nonce: a claim sent again for the same attempt (that record re-delivered after the
        attempt ran here) must be answered — refused ``not_ready`` — not swallowed by the
        fold's dedupe, which would leave this worker waiting ``claim_timeout_s`` for nothing.
        """
        if not record_ok(msg, self.ready_liveness):
            return None
        try:
            record = decode_event(msg.value() or b"")
        except DecodeError:
            log.exception("undecodable ready record")
            return None
        ready = record.event
        if not isinstance(ready, ev.TaskReady):
            return None
        key = (ready.run_id, ready.task)
        if key in self._held or any(
            p is not None and (p.ready.run_id, p.ready.task) == key for _, p in batch
        ):
            return None
        wid = self.settings.worker_id
        fut = self._expect("claim", ready.run_id, ready.task)
        nonce = uuid.uuid4().hex[:8]
        self._send(
            record.job_id,
            claim_idem_key(ready.run_id, ready.task, ready.attempt, wid, nonce),
            cmd.ClaimTask(
                run_id=ready.run_id, task=ready.task, attempt=ready.attempt, worker_id=wid
            ),
        )
        return PendingClaim(record.job_id, ready, fut, time.monotonic())

    def _await_claim(self, pending: PendingClaim) -> None:
        """Wait for the answer to a claim (at most ``claim_timeout_s`` from its send) and
        start the attempt when it is granted to this worker."""
        ready, fut, wid = pending.ready, pending.answer, self.settings.worker_id
        deadline = pending.sent_at + self.settings.claim_timeout_s
        while not fut.done() and time.monotonic() < deadline:
            if self._stop.is_set():  # a grant still gets a short wait: it is released, not lost
                deadline = min(deadline, time.monotonic() + STOP_CLAIM_WAIT_S)
            try:
                fut.result(timeout=0.2)
            except TimeoutError:
                continue
        with self._lock:
            if not fut.done():
                # Stop waiting; a grant that still arrives is started by _on_answer.
                self._waiting.pop(("claim", ready.run_id, ready.task), None)
                log.warning(
                    "no answer to claim yet", extra={"run_id": ready.run_id, "task": ready.task}
                )
                return
        answer = fut.result()
        if isinstance(answer, ev.TaskClaimed) and answer.worker_id == wid:
            if self._stop.is_set():
                self._release(pending.job_id, answer, "worker stopping: granted as it stopped")
            else:
                self._start(pending.job_id, answer)

    def _start(self, job_id: str, grant: ev.TaskClaimed) -> None:
        context = {
            "CRONLOG_JOB_ID": job_id,
            "CRONLOG_RUN_ID": grant.run_id,
            "CRONLOG_TASK": grant.task,
            "CRONLOG_ATTEMPT": str(grant.attempt),
            "CRONLOG_IDEM_KEY": task_idem_key(grant.run_id, grant.task),
            "CRONLOG_SCHEDULED_FOR": iso(grant.scheduled_for),
            "CRONLOG_EPOCH": str(grant.epoch),
            "CRONLOG_WORKER_ID": self.settings.worker_id,
        }
        sink = self.logs.open(
            AttemptRef(
                job_id,
                grant.run_id,
                grant.task,
                grant.attempt,
                grant.epoch,
                self.settings.worker_id,
            )
        )
        execution = execution_for(
            grant.action,
            grant.command,
            context,
            env={**os.environ, **context},
            timeout_s=grant.timeout.total_seconds(),
            grace_s=grant.grace.total_seconds(),
            pool=self.python_pool,
            output=sink,
            capture_bytes=self.settings.log_cap_bytes,
        )
        held = Held(grant, job_id, execution, sink)
        self._held[(grant.run_id, grant.task)] = held
        threading.Thread(
            target=self._attempt, args=(held,), daemon=True, name=f"attempt-{grant.run_id}"
        ).start()

    def _attempt(self, held: Held) -> None:
        try:
            self._run_attempt(held)
        except Exception:
            log.exception("attempt thread failed", extra={"run_id": held.grant.run_id})
        finally:
            # Whatever happened, the slot is free again: a lost completion is recovered by
            # the lease expiring on the fold's side.
            held.log.close()
            self._held.pop((held.grant.run_id, held.grant.task), None)

    def _run_attempt(self, held: Held) -> None:
        grant, wid = held.grant, self.settings.worker_id
        renew_every = max(grant.lease_ttl.total_seconds() / 6, 0.2)
        done = threading.Event()
        renewer = threading.Thread(
            target=self._renew_loop, args=(held, renew_every, done), daemon=True
        )
        renewer.start()
        try:
            outcome = held.execution.run()
        finally:
            done.set()
        held.log.close()  # the final chunk goes before the completion
        if held.revoked:
            return
        self._send(
            held.job_id,
            complete_idem_key(grant.run_id, grant.task, grant.epoch),
            cmd.CompleteTask(
                run_id=grant.run_id,
                task=grant.task,
                attempt=grant.attempt,
                epoch=grant.epoch,
                worker_id=wid,
                succeeded=outcome.failure_kind is None,
                exit_code=outcome.exit_code,
                failure_kind=outcome.failure_kind,
                output_tail=outcome.output_tail,
                started_at=outcome.started_at,
                finished_at=outcome.finished_at,
            ),
        )
        self.producer.flush(10)
        log.info(
            "attempt finished",
            extra={"run_id": grant.run_id, "task": grant.task, "exit_code": outcome.exit_code},
        )

    def _renew_loop(self, held: Held, every_s: float, done: threading.Event) -> None:
        grant, n = held.grant, 0
        while not done.wait(every_s) and not held.revoked:
            n += 1
            self._send(
                held.job_id,
                renew_idem_key(grant.run_id, grant.task, grant.epoch, n),
                cmd.RenewLease(
                    run_id=grant.run_id,
                    task=grant.task,
                    attempt=grant.attempt,
                    epoch=grant.epoch,
                    worker_id=self.settings.worker_id,
                ),
            )
