"""The attempts a worker holds: start them, renew their leases, complete or release them.

A thread per running attempt (its Execution blocks), taken from reused ones (``threads.py``:
no thread start per task), and ONE renewer thread for every lease this worker holds (a heap of
renewal times, each lease renewed every ``lease_ttl / 6``), not a thread per lease.
Completions go to the outbox and leave with its next batch (``outbox.py``), not flushed one by
one: a completion lost with a crashed worker is recovered by the lease expiring on the fold's
side (the attempt is given back, not failed).
"""

from __future__ import annotations

import functools
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from opentelemetry import context as otel_context
from opentelemetry.trace import Span, Status, StatusCode, Tracer

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.ids import complete_idem_key, release_idem_key, renew_idem_key, task_idem_key
from cronlog.time import iso
from cronlog.vocabulary import RejectReason
from services.worker import metrics, spans
from services.worker.execute import Execution
from services.worker.kinds import PythonPool, execution_for
from services.worker.logsink import AttemptRef, LogShipper, LogSink
from services.worker.reach import Reach
from services.worker.threads import Threads
from topology.fold.spans import safely

log = logging.getLogger("cronlog.worker")
Send = Callable[[str, str, cmd.Command], bool]
"""(job_id, idem_key, command) → queued; the worker's command sender."""


def log_task_started(job_id: str, grant: ev.TaskClaimed, worker_id: str) -> None:
    """Log the start of a granted attempt: ``action=task_started`` with its identity fields."""
    log.info(
        "task started",
        extra={
            "action": "task_started",
            "job_id": job_id,
            "run_id": grant.run_id,
            "task": grant.task,
            "attempt": grant.attempt,
            "epoch": grant.epoch,
            "worker_id": worker_id,
        },
    )


@dataclass
class Held:
    """An attempt this worker holds a lease on."""

    grant: ev.TaskClaimed
    job_id: str
    execution: Execution
    log: LogSink
    revoked: bool = False
    renewals: int = 0
    span: Span | None = None
    """Its ``task.execute`` span while it runs (the parent of its ``lease.renew`` spans)."""
    ended_as: metrics.Outcome = "lost"
    """How a revoked attempt ended (counted when its thread ends): lost unless told."""


class Attempts:
    """The leases this worker holds and the attempts running under them.

    Args:
        worker_id: this worker (the lease holder).
        send: queues a command on the worker's producer.
        pool: the python tasks' process pool.
        logs: ships task output to the logs topic.
        log_cap_bytes: output kept per attempt.
        on_free: called whenever a slot frees (an attempt ended).
        claim_next: called with a completion's idem_key as it is sent; returns how many of
            the tasks it readies the worker takes at once (CompleteTask.claim_next).
        reach: what tasks may reach (environment, user, python modules, http destinations).
        lease_token: this worker's lease secret, sent with every renewal, completion and
            release (``cronlog.leases.lease_digest``); "" sends none.
        tracer: makes the ``task.execute`` and ``lease.renew`` spans (``spans.py``); default:
            the global provider's.
    """

    def __init__(
        self,
        worker_id: str,
        send: Send,
        pool: PythonPool,
        logs: LogShipper,
        log_cap_bytes: int,
        on_free: Callable[[], None],
        claim_next: Callable[[str], int] = lambda _key: 0,
        reach: Reach | None = None,
        lease_token: str = "",
        tracer: Tracer | None = None,
    ) -> None:
        self.tracer = spans.worker_tracer(tracer)
        self.reach = reach or Reach()
        self.lease_token = lease_token
        self.worker_id = worker_id
        self.send = send
        self.pool = pool
        self.logs = logs
        self.log_cap_bytes = log_cap_bytes
        self.on_free = on_free
        self.claim_next = claim_next
        self.held: dict[tuple[str, str], Held] = {}
        self._lock = threading.Lock()
        self._renewals: list[tuple[float, int, tuple[str, str]]] = []
        self._seq = itertools.count()
        self._wake = threading.Condition(self._lock)
        self._stopped = False
        self.threads = Threads("attempt")
        """The attempts' threads, and those of ``isolation: thread`` calls."""
        self._renewer = threading.Thread(target=self._renew_loop, daemon=True, name="renewer")
        self._renewer.start()

    def __len__(self) -> int:
        return len(self.held)

    def holds(self, run_id: str, task: str) -> bool:
        """Return whether this worker holds (or runs) ``run_id``/``task``."""
        return (run_id, task) in self.held

    def start(self, job_id: str, grant: ev.TaskClaimed) -> None:
        """Run a granted attempt in a thread of its own, under a renewed lease."""
        context = {
            "CRONLOG_JOB_ID": job_id,
            "CRONLOG_RUN_ID": grant.run_id,
            "CRONLOG_TASK": grant.task,
            "CRONLOG_ATTEMPT": str(grant.attempt),
            "CRONLOG_IDEM_KEY": task_idem_key(grant.run_id, grant.task),
            "CRONLOG_SCHEDULED_FOR": iso(grant.scheduled_for),
            "CRONLOG_EPOCH": str(grant.epoch),
            "CRONLOG_WORKER_ID": self.worker_id,
        }
        sink = self.logs.open(
            AttemptRef(job_id, grant.run_id, grant.task, grant.attempt, grant.epoch, self.worker_id)
        )
        execution = execution_for(
            grant.action,
            grant.command,
            context,
            reach=self.reach,
            timeout_s=grant.timeout.total_seconds(),
            grace_s=grant.grace.total_seconds(),
            pool=self.pool,
            output=sink,
            capture_bytes=self.log_cap_bytes,
            threads=self.threads,
        )
        held = Held(grant, job_id, execution, sink)
        log_task_started(job_id, grant, self.worker_id)
        key = (grant.run_id, grant.task)
        every = max(grant.lease_ttl.total_seconds() / 6, 0.2)
        with self._lock:
            self.held[key] = held
            heapq.heappush(self._renewals, (time.monotonic() + every, next(self._seq), key))
            self._wake.notify()
        # the claim span's context: the trace goes on in the attempt's thread
        self.threads.submit(self._attempt, held, otel_context.get_current())

    def revoke(
        self, run_id: str, task: str, epoch: int | None = None, reason: RejectReason | None = None
    ) -> None:
        """A renewal was refused: the lease is gone; kill the attempt, never complete it.

        ``epoch``: the refused renewal's (``CommandRejected.epoch``); a refusal of another
        epoch than the one held (a forged renewal naming an old lease) changes nothing.
        ``reason``: the refusal's, which tells a cancelled task from a lost lease (metrics).
        """
        held = self.held.get((run_id, task))
        if held is not None and (epoch is None or epoch == held.grant.epoch):
            log.warning(
                "lease revoked, killing",
                extra={
                    "action": "lease_revoked",
                    "job_id": held.job_id,
                    "run_id": run_id,
                    "task": task,
                    "attempt": held.grant.attempt,
                    "epoch": held.grant.epoch,
                },
            )
            held.ended_as = metrics.refused_as(reason) if reason is not None else "lost"
            held.revoked = True
            held.execution.kill()

    def release(self, job_id: str, grant: ev.TaskClaimed, reason: str) -> None:
        """Give ``grant``'s lease back (ReleaseTask): ready again at once, not a failure."""
        log.warning(
            "releasing",
            extra={
                "action": "task_released",
                "job_id": job_id,
                "run_id": grant.run_id,
                "task": grant.task,
                "attempt": grant.attempt,
                "epoch": grant.epoch,
                "reason": reason,
            },
        )
        metrics.ended("released")
        self.send(
            job_id,
            release_idem_key(grant.run_id, grant.task, grant.epoch),
            cmd.ReleaseTask(
                run_id=grant.run_id,
                task=grant.task,
                attempt=grant.attempt,
                epoch=grant.epoch,
                worker_id=self.worker_id,
                reason=reason,
                lease_token=self.lease_token,
            ),
        )

    def release_all(self, reason: str) -> int:
        """Release and kill every running attempt (the end of a drain); return how many."""
        unfinished = list(self.held.values())
        for held in unfinished:
            held.ended_as = "released"  # counted by release()
            held.revoked = True  # no completion and no renewal from here on
            self.release(held.job_id, held.grant, reason)
            held.execution.kill()
        return len(unfinished)

    def stop(self) -> None:
        """End the renewer (after the drain)."""
        with self._lock:
            self._stopped = True
            self._wake.notify()

    def _attempt(self, held: Held, parent: otel_context.Context | None = None) -> None:
        try:
            with spans.executing(self.tracer, held.job_id, held.grant, parent) as span:
                held.span = span
                outcome = held.execution.run()
                spans.ended(span, outcome, held.revoked)
            # the final chunk goes before the completion; an attempt that completes with no
            # output at all sends none (its completion's empty output_tail says so)
            held.log.close(skip_if_empty=not held.revoked and outcome.output_tail == "")
            if not held.revoked:
                grant = held.grant
                key = complete_idem_key(grant.run_id, grant.task, grant.epoch)
                self.send(
                    held.job_id,
                    key,
                    cmd.CompleteTask(
                        run_id=grant.run_id,
                        task=grant.task,
                        attempt=grant.attempt,
                        epoch=grant.epoch,
                        worker_id=self.worker_id,
                        succeeded=outcome.failure_kind is None,
                        exit_code=outcome.exit_code,
                        failure_kind=outcome.failure_kind,
                        output_tail=outcome.output_tail,
                        started_at=outcome.started_at,
                        finished_at=outcome.finished_at,
                        claim_next=self.claim_next(key) if outcome.failure_kind is None else 0,
                        lease_token=self.lease_token,
                    ),
                )
                metrics.completed(outcome.failure_kind)
            elif held.ended_as != "released":
                metrics.ended(held.ended_as)
        except Exception:
            log.exception("attempt thread failed", extra={"run_id": held.grant.run_id})
        finally:
            # Whatever happened, the slot is free again: a lost completion is recovered by
            # the lease expiring on the fold's side.
            held.log.close()
            with self._lock:
                self.held.pop((held.grant.run_id, held.grant.task), None)
            self.on_free()

    def _renew_loop(self) -> None:
        while True:
            with self._lock:
                while not self._stopped and (
                    not self._renewals or self._renewals[0][0] > time.monotonic()
                ):
                    timeout = self._renewals[0][0] - time.monotonic() if self._renewals else None
                    self._wake.wait(timeout)
                if self._stopped:
                    return
                _, _, key = heapq.heappop(self._renewals)
                held = self.held.get(key)
                if held is None or held.revoked:
                    continue
                every = max(held.grant.lease_ttl.total_seconds() / 6, 0.2)
                heapq.heappush(self._renewals, (time.monotonic() + every, next(self._seq), key))
                held.renewals += 1
                n = held.renewals
            with spans.renewing(self.tracer, held.job_id, held.grant, n, held.span) as span:
                if not self._renew(held, n) and span is not None:
                    failed = Status(StatusCode.ERROR, "renewal not queued")
                    safely("lease.renew", functools.partial(span.set_status, failed))

    def _renew(self, held: Held, n: int) -> bool:
        """Queue renewal ``n`` of ``held``'s lease; return whether it was queued."""
        grant = held.grant
        return self.send(
            held.job_id,
            renew_idem_key(grant.run_id, grant.task, grant.epoch, n),
            cmd.RenewLease(
                run_id=grant.run_id,
                task=grant.task,
                attempt=grant.attempt,
                epoch=grant.epoch,
                worker_id=self.worker_id,
                lease_token=self.lease_token,
            ),
        )
