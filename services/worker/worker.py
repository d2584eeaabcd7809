"""The worker: poll for ready task instances, run them under renewed leases, complete.

Dispatch by polls (docs/dispatch.md): notifications on the ready topic flag the commands
partitions that may have ready work (``ready.py``); a worker with free slots sends a PollTasks
to flagged partitions, and the fold grants what is ready there (the poll is the claim) and
answers. A completion asks for the slot it frees back (``claim_next``). Answers (grants,
renewals, refusals, poll answers) come on the replies topic, keyed by worker_id, read from this
worker's one partition (``replies.py``); a grant starts its attempt there (``attempts.py``).
Free slots = slots minus running attempts minus slots reserved by polls out and by
completions awaiting their answer.
"""

from __future__ import annotations

import functools
import logging
import secrets
import threading
import time

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.errors import CronlogError
from cronlog.ids import poll_idem_key
from cronlog.leases import lease_digest
from cronlog.vocabulary import CommandKind, RejectReason
from services.worker import metrics, spans
from services.worker.attempts import Attempts
from services.worker.heartbeat import Heartbeat
from services.worker.kinds import PythonPool
from services.worker.logsink import LogShipper
from services.worker.outbox import Outbox
from services.worker.ready import Polls, ReadyWatch
from services.worker.replies import read_replies
from services.worker.settings import STOP_POLL_WAIT_S, WorkerSettings
from topology.kafka.retrying import Liveness, Stopped, call_with_retry, start_thread
from topology.kafka.topics import Topics
from topology.wire.heartbeats import HeldLease

log = logging.getLogger("cronlog.worker")


class Worker:
    """One worker process. ``run()`` blocks until ``stop()``."""

    def __init__(self, settings: WorkerSettings) -> None:
        self.settings = settings
        self.topics = Topics.of(settings)
        self.outbox = Outbox(settings, self.topics.commands)
        """Every command this worker sends (polls, renewals, completions, releases)."""
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.polls = Polls(settings.partitions, settings.poll_sweep_s)
        self._reserved: dict[str, float] = {}
        """Completions sent with claim_next 1, by idem_key: their slot stays taken until the
        fold answers the completion's poll (it may grant this worker a task at once)."""
        self._slot_freed = threading.Event()
        self._replies_ready = threading.Event()
        self.failure: str | None = None
        """Why a thread of this worker could not go on (the process then exits non-zero)."""
        self.replies_liveness = Liveness("replies", log)
        self.ready_liveness = Liveness("ready", log)
        self.reach = reach = settings.reach()
        """What tasks may reach; its attempt directories are removed at the end of ``run``."""
        self.lease_token = secrets.token_urlsafe(32)
        self._lease_digest = lease_digest(self.lease_token)
        """This process's lease secret (``cronlog.leases.lease_digest``): never logged or
        shown; a restarted worker has a new one (its old leases were the dead process's)."""
        self.python_pool = PythonPool(settings.slots, reach)
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
            reach,
            self.lease_token,
        )
        metrics.configure(settings.slots, lambda: len(self.attempts))

    def stop(self) -> None:
        """Ask the worker to stop pulling and drain (thread-safe)."""
        self._stop.set()
        self._slot_freed.set()

    def free_slots(self) -> int:
        """Return the slots neither running an attempt nor reserved by a poll out (or by a
        completion awaiting its answer)."""
        with self._lock:
            busy = len(self.attempts) + len(self._reserved)
        return self.settings.slots - busy - self.polls.reserved()

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
                lambda: not self._stop.is_set() or bool(self.attempts) or bool(self.polls.out()),
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
                "stopping the worker",
                exc_info=True,
                extra={"action": "thread_failed", "thread_": "replies", "error": exc},
            )
            self.failure = f"replies reader: {exc}"
            self._replies_ready.set()
            self.stop()

    def _on_answer(self, record: ev.RunEvent) -> None:
        job_id, event = record.job_id, record.event
        match event:
            case ev.TaskClaimed(worker_id=holder) if holder == self.settings.worker_id:
                if self.attempts.holds(event.run_id, event.task):
                    return  # a re-delivered grant of a lease already running here
                if event.lease_token_digest not in ("", self._lease_digest):
                    # granted to another process under this worker id (a predecessor's late
                    # poll, or a forged poll): its commands cannot be ours; the lease lapses.
                    # "" is a grant of a scheduler from before lease tokens: run it
                    log.warning(
                        "ignoring a grant made for another lease secret",
                        extra={"run_id": event.run_id, "task": event.task, "epoch": event.epoch},
                    )
                    return
                if self._stop.is_set():
                    self.attempts.release(job_id, event, "worker stopping: granted as it stopped")
                    return
                if len(self.attempts) >= self.settings.slots:  # a late answer to an expired poll
                    self.attempts.release(job_id, event, "no free slot: granted after its poll")
                    return
                with spans.claim(self.attempts.tracer, job_id, event):  # parent of its run
                    self.attempts.start(job_id, event)
            case ev.PollAnswered(poll_id=poll_id, granted=granted):
                with self._lock:  # a completion's poll frees the slot it reserved
                    sent_at = self._reserved.pop(poll_id, None)
                poll = self.polls.answered(poll_id, granted)
                if poll is not None:
                    sent_at = poll.sent_at
                if sent_at is not None and granted:
                    metrics.claimed(time.monotonic() - sent_at, granted)
                self._slot_freed.set()
            case ev.LeaseRenewed(worker_id=holder) if holder == self.settings.worker_id:
                metrics.renewal("ok")
            case ev.CommandRejected(command=CommandKind.RENEW_LEASE, run_id=run_id, task=task):
                # this worker's own renewal is never refused not_holder (its id and secret
                # are the grant's): such a refusal answers someone else's forged renewal
                if run_id and task and event.reason is not RejectReason.NOT_HOLDER:
                    metrics.renewal("refused")
                    self.attempts.revoke(run_id, task, event.epoch, event.reason)
            case _:
                return

    # -- commands ------------------------------------------------------------------------------
    def _send(self, job_id: str, idem_key: str, command: cmd.Command) -> bool:
        """Queue a command for the outbox's next batch (``outbox.py``); False once closed."""
        return self.outbox.send(job_id, idem_key, command)

    # -- main loop -----------------------------------------------------------------------------
    def run(self) -> None:
        """Poll, execute and complete until stopped; then drain for ``drain_s`` seconds."""
        s = self.settings
        start_thread("replies", self._replies_loop)  # a bug in it ends the process
        while not self._replies_ready.wait(0.5) and not self._stop.is_set():
            pass  # the reader retries transient errors itself (logged once)
        if self.failure is not None:
            raise CronlogError(f"worker cannot read its replies partition: {self.failure}")
        watch = call_with_retry(
            lambda: ReadyWatch.open(s, self.topics.ready, self.ready_liveness),
            what="opening the ready topic",
            liveness=self.ready_liveness,
            stop=self._stop,
        )
        log.info(
            "worker started",
            extra={"action": "worker_started", "worker_id": s.worker_id, "slots": s.slots},
        )
        heartbeat = Heartbeat(s, self.held_leases)
        heartbeat.start()
        try:
            while not self._stop.is_set():
                self.ready_liveness.beat()
                watch.probe()
                self._expire()
                sent = self._send_polls()
                # notifications flag partitions; a freed slot or an answer wakes the loop
                self.polls.notify(watch.poll(0.0 if sent else 0.02))
                if not sent and self.free_slots() <= 0:
                    self._slot_freed.wait(0.05)
                    self._slot_freed.clear()
        finally:
            watch.close()
            self._drain()
            heartbeat.stop()  # a tombstone: this worker is gone
            self.python_pool.shutdown()
            if self.reach.dirs is not None:
                self.reach.dirs.close()
            self.logs.close()
            self.outbox.close(10)

    def _send_polls(self) -> int:
        """Send a PollTasks to flagged partitions for the free slots; return how many."""
        free = self.free_slots()
        if free <= 0:
            return 0
        wid = self.settings.worker_id
        polls = self.polls.plan(free, time.monotonic())
        for poll_id, partition, slots in polls:
            poll = cmd.PollTasks(
                worker_id=wid, slots=slots, poll_id=poll_id, lease_token=self.lease_token
            )
            # not sent: its slots are free again
            unsent = functools.partial(self.polls.answered, poll_id, 0)
            if not self.outbox.send("", poll_idem_key(wid, poll_id), poll, partition, unsent):
                unsent()
        return len(polls)

    def _expire(self) -> None:
        """Forget polls and completion reservations the fold has not answered in
        ``claim_timeout_s`` (a failover took longer); a grant still arriving is run if a slot
        is free, else released."""
        now = time.monotonic()
        for poll in self.polls.expire(now, self.settings.claim_timeout_s):
            log.warning("no answer to a poll", extra={"partition": poll.partition})
        cutoff = now - self.settings.claim_timeout_s
        with self._lock:
            for done in [k for k, at in self._reserved.items() if at < cutoff]:
                del self._reserved[done]

    def _drain(self) -> None:
        """Give polls out a short wait and running attempts ``drain_s`` seconds, then
        release and kill the rest.

        A release makes the attempt ready again at once under a new epoch (not a failure),
        where killing it silently would leave it to the lease expiry.
        """
        deadline = time.monotonic() + STOP_POLL_WAIT_S
        while self.polls.out() and time.monotonic() < deadline:
            time.sleep(0.05)  # a grant arriving now is released by _on_answer
        deadline = time.monotonic() + self.settings.drain_s
        while self.attempts and time.monotonic() < deadline:
            time.sleep(0.1)
        unfinished = self.attempts.release_all(
            f"worker draining: not finished within {self.settings.drain_s:g} s"
        )
        if unfinished:
            self.outbox.drain(10)
            deadline = time.monotonic() + 5  # let attempt threads close their logs
            while self.attempts and time.monotonic() < deadline:
                time.sleep(0.05)
        self.attempts.stop()
