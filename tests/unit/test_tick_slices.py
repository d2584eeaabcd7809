"""Tick slices (topology.fold.folder): a Tick decides at most ``tick_slice`` due jobs and appends a
continuation Tick to its partition for the rest, as the runtime commits it; replaying the log
(continuations included) gives the same events and state, and those equal an unbounded fold's.

The runtime is simulated without Kafka (``Sim``): records are read in append order in batches,
and a batch's sends to the commands topic are appended to the log after what is already there,
stamped like LogAppendTime (never before the last record appended)."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.ids import continuation_idem_key
from cronlog.model import JobSpec, Schedule, ScheduleKind, TaskSpec, main_task
from cronlog.vocabulary import CommandKind, RejectReason
from topology.fold import folder as fold_module
from topology.fold.due_index import DueIndex
from topology.fold.folder import BatchFolder, Outgoing, Record
from topology.kafka.config import KafkaSettings
from topology.kafka.partitioning import partition_for
from topology.kafka.topics import Topics
from topology.wire.codec import Codec, decode_command, decode_event, encode_command

N = 4
P = 1
T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
TOPICS = Topics.of(KafkaSettings(partitions=N))
UNBOUNDED = 1_000_000


def _ms(at: datetime) -> int:
    return int(at.timestamp() * 1000)


def jobs_on(partition: int, count: int, prefix: str = "job") -> list[str]:
    """``count`` job ids whose key maps to ``partition``, in their (job_id) order."""
    out = [f"{prefix}{i:03d}" for i in range(400) if partition_for(f"{prefix}{i:03d}", N) == P]
    assert partition == P and len(out) >= count
    return sorted(out[:count])


def once(run_at: datetime, tasks: tuple[str, ...] = ("main",)) -> JobSpec:
    return JobSpec(
        name="once",
        schedule=Schedule(ScheduleKind.ONCE, run_at=run_at),
        task_specs=tuple(TaskSpec(t, ("true",)) for t in tasks),
    )


@dataclass(frozen=True)
class Input:
    """A command some client appends at ``at`` (a Tick when ``job_id`` is None)."""

    at: datetime
    job_id: str | None
    command: cmd.Command
    idem_key: str


@dataclass
class Sim:
    """A runtime without Kafka: one log of command records, folded batch by batch."""

    tick_slice: int
    batch: int = 4
    delay_ms: int = 0
    """How long after its batch's last record a continuation is appended (commit time)."""
    log: list[Record] = field(default_factory=list)
    sends: list[Outgoing] = field(default_factory=list)
    continuations: list[Record] = field(default_factory=list)
    store: dict[str, bytes] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.due = DueIndex()
        self.due.reset(range(N))
        self.folder = BatchFolder(
            TOPICS, N, lambda _, job_id: self.store.get(job_id), self.due, Codec(), self.tick_slice
        )
        self.offsets: dict[int, int] = defaultdict(int)

    def append(self, partition: int, at_ms: int, key: bytes | None, value: bytes) -> Record:
        at_ms = max([at_ms, *(r.timestamp_ms for r in self.log if r.partition == partition)])
        rec = Record(partition, self.offsets[partition], at_ms, key, value)
        self.offsets[partition] += 1
        self.log.append(rec)
        return rec

    def run(self, inputs: list[Input]) -> Sim:
        """Append ``inputs`` as their time comes; fold what is there; append continuations
        after what clients appended while their batch was committed."""
        pending, position = sorted(inputs, key=lambda i: i.at), 0
        while pending or position < len(self.log):
            if position == len(self.log):  # idle: the next client command arrives
                self._arrive(pending, _ms(pending[0].at))
            chunk = self.log[position : position + self.batch]
            position += len(chunk)
            self.due.begin()
            out = self.folder.fold(chunk)
            self.due.commit()
            commit_ms = max(r.timestamp_ms for r in chunk) + self.delay_ms
            self._arrive(pending, commit_ms)
            for s in out.sends:
                if s.topic == TOPICS.commands:
                    assert s.partition is not None and s.key is None
                    self.continuations.append(self.append(s.partition, commit_ms, None, s.value))
                else:
                    self.sends.append(s)
            self.store.update({job: w.value for job, w in out.writes.items()})
        return self

    def _arrive(self, pending: list[Input], now_ms: int) -> None:
        while pending and _ms(pending[0].at) <= now_ms:
            self._append_input(pending.pop(0))

    def _append_input(self, i: Input) -> None:
        job = i.job_id or ""
        p = P if i.job_id is None else partition_for(job, N)
        env = cmd.Envelope(idem_key=i.idem_key, job_id=job, command=i.command)
        self.append(p, _ms(i.at), i.job_id.encode() if i.job_id else None, encode_command(env))

    def replay(self, batch: int) -> Sim:
        """Fold this log as it stands (continuations included) into empty state."""
        again = Sim(self.tick_slice, batch)
        again.log = list(self.log)
        for start in range(0, len(again.log), batch):
            out = again.folder.fold(again.log[start : start + batch])
            again.sends += [s for s in out.sends if s.topic != TOPICS.commands]
            again.store.update({job: w.value for job, w in out.writes.items()})
        return again

    def events(self) -> list[ev.RunEvent]:
        return [decode_event(s.value) for s in self.sends if s.topic == TOPICS.run_events]

    def fired(self) -> list[tuple[str, datetime]]:
        """(job_id, scheduled_for) of every RunScheduled, in decision order."""
        return [
            (e.job_id, e.event.scheduled_for)
            for e in self.events()
            if isinstance(e.event, ev.RunScheduled)
        ]


def _registrations(job_ids: list[str], run_at: dict[str, datetime]) -> list[Input]:
    return [Input(T0, j, cmd.RegisterJob(spec=once(run_at[j])), f"register:{j}") for j in job_ids]


def _tick(at: datetime, name: str) -> Input:
    return Input(at, None, cmd.Tick(), f"tick:{name}")


def test_a_tick_decides_a_slice_and_its_continuations_decide_the_rest_in_order() -> None:
    jobs = jobs_on(P, 10)
    # two deadlines, so (deadline, job_id) order is not plain job_id order
    run_at = {j: T0 + timedelta(seconds=3 if i % 3 == 0 else 5) for i, j in enumerate(jobs)}
    tick_at = T0 + timedelta(seconds=6)
    sim = Sim(tick_slice=3).run([*_registrations(jobs, run_at), _tick(tick_at, "a")])

    expected = [j for _, j in sorted((run_at[j], j) for j in jobs)]
    assert [j for j, _ in sim.fired()] == expected  # each job once, in (deadline, job_id) order
    assert [t for _, t in sim.fired()] == sorted(run_at.values())
    # 10 due, slices of 3: the tick and three continuations decide 3 + 3 + 3 + 1
    assert len(sim.continuations) == 3
    keys = [decode_command(r.value).idem_key for r in sim.continuations]
    assert keys == ["tick:a+1", "tick:a+2", "tick:a+3"]
    assert keys[0] == continuation_idem_key("tick:a")
    assert all(r.partition == P for r in sim.continuations)
    assert all(isinstance(decode_command(r.value).command, cmd.Tick) for r in sim.continuations)
    by_key: dict[str, list[str]] = defaultdict(list)
    for e in sim.events():
        if isinstance(e.event, ev.RunScheduled):
            by_key[e.idem_key].append(e.job_id)
    assert [len(by_key[k]) for k in ("tick:a", *keys)] == [3, 3, 3, 1]


@pytest.mark.parametrize("due", [2, 3])
def test_a_slice_that_is_not_full_or_leaves_nothing_due_emits_no_continuation(due: int) -> None:
    jobs = jobs_on(P, due)
    run_at = dict.fromkeys(jobs, T0 + timedelta(seconds=2))
    sim = Sim(tick_slice=3).run(
        [*_registrations(jobs, run_at), _tick(T0 + timedelta(seconds=3), "a")]
    )
    assert sorted(j for j, _ in sim.fired()) == jobs
    assert sim.continuations == []


def _busy_log(jobs: list[str]) -> list[Input]:
    """Ten jobs on 2-second cron, seconds of ticks (some duplicated), each firing 10 jobs."""
    spec = JobSpec(
        name="e2",
        schedule=Schedule(ScheduleKind.CRON, "*/2 * * * * *"),
        task_specs=main_task(("true",)),
    )
    inputs = [Input(T0, j, cmd.RegisterJob(spec=spec), f"register:{j}") for j in jobs]
    for s in range(1, 9):
        inputs.append(_tick(T0 + timedelta(seconds=s, milliseconds=2), f"{s}"))
        if s % 3 == 0:
            inputs.append(_tick(T0 + timedelta(seconds=s, milliseconds=3), f"{s}-dup"))
    return inputs


@pytest.mark.parametrize("batch", [1, 3, 50])
def test_a_replay_of_the_log_with_its_continuations_reproduces_events_and_state(
    batch: int,
) -> None:
    jobs = jobs_on(P, 10)
    # commits take 7 ms: the duplicate Ticks and a pause arrive before the continuations
    pause = Input(T0 + timedelta(seconds=4, milliseconds=4), jobs[-1], cmd.PauseJob(), "pause")
    live = Sim(tick_slice=3, batch=batch, delay_ms=7).run([*_busy_log(jobs), pause])
    order = [decode_command(r.value).idem_key for r in live.log]
    assert order.index("tick:4") < order.index("pause") < order.index("tick:4+1")
    assert live.continuations  # the slices were used
    again = live.replay(batch=5)
    assert again.sends == live.sends  # bytes, event_ids included
    assert again.store == live.store


def _normalised(events: list[ev.RunEvent]) -> dict[str, list[ev.RunEvent]]:
    """Each job's events without what names the deciding Tick (its idem_key, event_id)."""
    out: dict[str, list[ev.RunEvent]] = defaultdict(list)
    for e in events:
        out[e.job_id].append(dataclasses.replace(e, event_id="", idem_key=""))
    return dict(out)


def test_sliced_events_and_state_equal_an_unbounded_fold_of_the_same_log() -> None:
    jobs = jobs_on(P, 10)
    # continuations stamped in the same millisecond as their Tick: the clocks agree too
    sliced = Sim(tick_slice=3, batch=4).run(_busy_log(jobs))
    whole = Sim(tick_slice=UNBOUNDED, batch=4).run(_busy_log(jobs))
    assert sliced.continuations and not whole.continuations
    assert sorted(sliced.fired()) == sorted(whole.fired())
    assert len(sliced.fired()) == len(set(sliced.fired())) == 10 * 4  # ticks 2, 4, 6, 8
    assert _normalised(sliced.events()) == _normalised(whole.events())
    assert sliced.store == whole.store


# -- record_too_large on a Tick ------------------------------------------------------------

WIDE = tuple(f"t{i}" for i in range(20))


def test_a_tick_refused_as_too_large_is_retried_a_minute_later_and_never_loops(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    jobs = jobs_on(P, 2, prefix="big")
    spec = JobSpec(
        name="wide",
        schedule=Schedule(ScheduleKind.CRON, "* * * * * *"),
        task_specs=tuple(TaskSpec(t, ("true",)) for t in WIDE),
    )
    registered = Sim(tick_slice=1).run(
        [Input(T0, j, cmd.RegisterJob(spec=spec), f"register:{j}") for j in jobs]
    )
    # the records fit; a run of 20 task instances does not
    monkeypatch.setattr(
        fold_module, "MAX_RECORD_BYTES", max(map(len, registered.store.values())) + 64
    )
    ticks = [_tick(T0 + timedelta(seconds=s, milliseconds=2), f"{s}") for s in range(1, 63)]
    sim = Sim(tick_slice=1).run(
        [Input(T0, j, cmd.RegisterJob(spec=spec), f"register:{j}") for j in jobs] + ticks
    )
    rejected = [e for e in sim.events() if isinstance(e.event, ev.CommandRejected)]
    assert all(e.event.reason is RejectReason.RECORD_TOO_LARGE for e in rejected)
    assert all(e.event.command is CommandKind.TICK for e in rejected)
    assert sim.fired() == []
    # each job is refused at the first Tick (T0+1 s), then nothing until TOO_LARGE_RETRY_MS
    # later (the Tick of T0+61 s), never at once again
    assert fold_module.TOO_LARGE_RETRY_MS == 60_000
    assert sorted((e.job_id, e.idem_key) for e in rejected) == [
        (jobs[0], "tick:1"),
        (jobs[0], "tick:61"),
        (jobs[1], "tick:1+1"),
        (jobs[1], "tick:61+1"),
    ]
    # one continuation per Tick that had both jobs due (slice 1), none of their own
    assert [decode_command(r.value).idem_key for r in sim.continuations] == [
        "tick:1+1",
        "tick:61+1",
    ]
    assert registered.store == sim.store  # nothing was written for a refused decision
