"""A small simulated cronlog that records golden command logs.

Commands go through the real fold (``topology.snapshots.replay.Replayer``, the path ``cronlog
replay`` takes) as they are appended, so a scripted worker can react to the events: claim what is
ready, renew, complete, fail or die. Time is simulated: the log's record timestamps are
whatever the scenario says, and ticks are appended just after each job's next deadline, the
way the scheduler's ticker appends one just after each second.

Only ``tests/replay/record.py`` uses this, to write ``logs/*.jsonl`` once; the golden test
folds those files and never runs the simulator, so a change of behaviour cannot rewrite the
logs it is checked against.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.ids import claim_idem_key, complete_idem_key, renew_idem_key, tick_idem_key
from cronlog.time import from_ms, to_ms
from cronlog.vocabulary import FailureKind, TaskState
from topology.fold.folder import Record
from topology.kafka.config import KafkaSettings
from topology.kafka.partitioning import partition_for
from topology.kafka.topics import Topics
from topology.snapshots.replay import Replayer
from topology.wire.codec import Codec
from topology.wire.state_codec import is_ledger, load_state

TICK_DELAY_MS = 3
"""Ticks land this long after a deadline (the ticker sends just after each second)."""
CLAIM_DELAY_MS = 10
"""The scripted worker claims a ready task this long after it became ready."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the scripted worker does with one granted attempt.

    Attributes:
        after: how long the attempt runs before it completes (or the worker dies).
        exit_code: 0 succeeds; anything else fails as ``nonzero_exit``.
        die: the worker dies at ``after``: it stops renewing and never completes.
    """

    after: timedelta = timedelta(seconds=1)
    exit_code: int = 0
    die: bool = False


OK = Outcome()
Script = Callable[[str, str, int], Outcome]
"""(job_id, task, attempt) → what the worker does with that attempt."""


@dataclass
class Sim:
    """A log being recorded, with the fold's view of it.

    Attributes:
        partitions: partition count of the simulated commands topic.
        now_ms: the simulated time, epoch ms; each appended record is stamped with it
            (LogAppendTime) and it never moves back.
        script: the worker's behaviour; default: every attempt succeeds after 1 s.
    """

    partitions: int
    now_ms: int
    script: Script = field(default=lambda job, task, attempt: OK)
    records: list[Record] = field(default_factory=list)
    events: list[ev.RunEvent] = field(default_factory=list)
    codec: Codec = field(default_factory=Codec)
    encode: Callable[[cmd.Envelope], bytes] | None = None
    """Writes a command's record value; default: the current schemas (``codec``)."""
    _store: dict[bytes, bytes] = field(default_factory=dict)
    _offsets: dict[int, int] = field(default_factory=dict)
    _actions: list[tuple[int, int, Callable[[], None]]] = field(default_factory=list)
    _seq: itertools.count[int] = field(default_factory=itertools.count)
    _worker_up: bool = True

    def __post_init__(self) -> None:
        self.topics = Topics.of(KafkaSettings(partitions=self.partitions))
        self.replayer = Replayer(self.topics, self.partitions, self._store, self.codec)

    # -- the log ------------------------------------------------------------------------

    def append(self, partition: int, key: bytes | None, value: bytes) -> list[ev.RunEvent]:
        """Append one raw record at ``now_ms`` and fold it; return the events it caused."""
        offset = self._offsets.get(partition, 0)
        self._offsets[partition] = offset + 1
        rec = Record(partition, offset, self.now_ms, key, value)
        self.records.append(rec)
        out = [self.codec.decode_event(s.value) for s in self.replayer.fold([rec])]
        appended = self.replayer.appended
        self.events += out
        for e in out:
            self._react(e)
        for s in appended:  # what the fold appended to the log (the tenant ledger's commands)
            p = s.partition if s.partition is not None else partition_for(s.key, self.partitions)
            out += self.append(p, s.key, s.value)
        return out

    def send(
        self,
        job_id: str,
        command: cmd.Command,
        idem_key: str | None = None,
        tenant: str = "default",
    ) -> list[ev.RunEvent]:
        """Append ``command`` for ``job_id`` (idem_key: given, else a fresh one)."""
        key = idem_key or f"{type(command).__name__.lower()}:{job_id}:{next(self._seq)}"
        env = cmd.Envelope(idem_key=key, job_id=job_id, command=command, tenant=tenant)
        value = self._encode(env)
        return self.append(partition_for(job_id.encode(), self.partitions), job_id.encode(), value)

    def tick(self, partition: int) -> list[ev.RunEvent]:
        """Append a Tick to ``partition`` (as the scheduler's ticker does, key-less)."""
        env = cmd.Envelope(
            idem_key=tick_idem_key("golden", partition, next(self._seq)),
            job_id="",
            command=cmd.Tick(),
        )
        return self.append(partition, None, self._encode(env))

    def _encode(self, env: cmd.Envelope) -> bytes:
        return (self.encode or self.codec.encode_command)(env)

    # -- time ---------------------------------------------------------------------------

    def at(self, instant: datetime) -> None:
        """Move the clock to ``instant`` (never back), without ticking."""
        self.now_ms = max(self.now_ms, to_ms(instant))

    def run_until(self, instant: datetime, *, ticks: bool = True) -> None:
        """Advance to ``instant``: tick each partition just after each job deadline and run
        the worker's actions in time order. ``ticks=False``: the schedulers are down (no
        ticks; the worker still acts)."""
        end = to_ms(instant)
        while True:
            nxt_tick = self._next_deadline() if ticks else None
            nxt_act = self._actions[0][0] if self._actions else None
            candidates = [t for t in (nxt_tick, nxt_act) if t is not None and t <= end]
            if not candidates:
                break
            when = min(candidates)
            self.now_ms = max(self.now_ms, when)
            if nxt_act is not None and nxt_act == when:
                _, _, action = heapq.heappop(self._actions)
                action()
            else:
                before = self._deadlines()
                for p in self._due_partitions(when):
                    self.tick(p)
                if self._deadlines() == before and when == self.now_ms:
                    raise RuntimeError(f"a tick at {from_ms(when)} moved no deadline")
        self.now_ms = max(self.now_ms, end)

    def _deadlines(self) -> list[tuple[int, int]]:
        """(tick time, partition) of every job's next deadline."""
        out = []
        for key, raw in self._store.items():
            if is_ledger(raw):
                continue
            deadline = load_state(raw).next_deadline()
            if deadline is not None:
                out.append((to_ms(deadline) + TICK_DELAY_MS, partition_for(key, self.partitions)))
        return out

    def _next_deadline(self) -> int | None:
        return min((max(t, self.now_ms) for t, _ in self._deadlines()), default=None)

    def _due_partitions(self, when: int) -> list[int]:
        return sorted({p for t, p in self._deadlines() if t <= when})

    def later(self, delay_ms: int, action: Callable[[], None]) -> None:
        """Run ``action`` ``delay_ms`` after now (in ``run_until``)."""
        heapq.heappush(self._actions, (self.now_ms + delay_ms, next(self._seq), action))

    # -- the scripted worker ------------------------------------------------------------

    def worker_down(self) -> None:
        """The worker stops claiming (ready tasks wait)."""
        self._worker_up = False

    def _react(self, e: ev.RunEvent) -> None:
        match e.event:
            case ev.TaskReady(run_id=run_id, task=task, attempt=attempt):
                if self._worker_up:
                    self.later(CLAIM_DELAY_MS, lambda: self._claim(e.job_id, run_id, task, attempt))
            case ev.TenantSlotsReceived() if self._worker_up:
                state = load_state(self._store[e.job_id.encode()])
                for run in state.runs:
                    for ti in run.tasks:
                        if ti.state is TaskState.READY:
                            self.later(
                                CLAIM_DELAY_MS,
                                lambda r=run.run_id, t=ti.task, a=ti.attempt: self._claim(
                                    e.job_id, r, t, a
                                ),
                            )
            case ev.TaskClaimed() as claimed if claimed.worker_id == "w1":
                self._run(e.job_id, claimed)
            case _:
                pass

    def _claim(self, job_id: str, run_id: str, task: str, attempt: int) -> None:
        self.send(
            job_id,
            cmd.ClaimTask(run_id=run_id, task=task, attempt=attempt, worker_id="w1"),
            claim_idem_key(run_id, task, attempt, "w1", str(next(self._seq))),
        )

    def _run(self, job_id: str, c: ev.TaskClaimed) -> None:
        outcome = self.script(job_id, c.task, c.attempt)
        started = from_ms(self.now_ms)
        every = max(1, to_ms(from_ms(0) + c.lease_ttl) // 6)
        finish = to_ms(from_ms(0) + outcome.after)
        for n, t in enumerate(range(every, finish, every)):
            if outcome.die:
                break
            self.later(
                t,
                lambda n=n: self.send(
                    job_id,
                    cmd.RenewLease(
                        run_id=c.run_id,
                        task=c.task,
                        attempt=c.attempt,
                        epoch=c.epoch,
                        worker_id="w1",
                    ),
                    renew_idem_key(c.run_id, c.task, c.epoch, n),
                ),
            )
        if outcome.die:
            return

        def complete() -> None:
            ok = outcome.exit_code == 0
            self.send(
                job_id,
                cmd.CompleteTask(
                    run_id=c.run_id,
                    task=c.task,
                    attempt=c.attempt,
                    epoch=c.epoch,
                    worker_id="w1",
                    succeeded=ok,
                    exit_code=outcome.exit_code,
                    failure_kind=None if ok else FailureKind.NONZERO_EXIT,
                    output_tail="done" if ok else f"exit {outcome.exit_code}",
                    started_at=started,
                    finished_at=from_ms(self.now_ms),
                ),
                complete_idem_key(c.run_id, c.task, c.epoch),
            )

        self.later(finish, complete)
