"""An idem_key names one command (issue 11): a re-delivery of the same command is a no-op, another
command re-using the key is refused (``idempotency_conflict``) with event_ids of its own.

The rule of the IETF draft "The Idempotency-Key HTTP Header Field", which the HTTP API applies
to requests (``services/api/access/idempotency.py``), here for commands produced straight onto
Kafka.
"""

from __future__ import annotations

import json
from dataclasses import replace

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.decide import handle
from cronlog.dedupe import event_key
from cronlog.ids import command_digest, conflict_key, event_id, idem_marker, run_id_for_trigger
from cronlog.job import MAX_APPLIED_MARKERS, JobState
from cronlog.model import JobSpec, Schedule, ScheduleKind, main_task
from cronlog.vocabulary import CommandKind, RejectReason
from tests.builders import JOB, T0, at, given, registered, when
from topology.fold.due_index import DueIndex
from topology.fold.folder import BatchFolder, Record
from topology.kafka.config import KafkaSettings
from topology.kafka.partitioning import partition_for
from topology.kafka.topics import Topics
from topology.wire.codec import Codec, decode_event, encode_command
from topology.wire.state_codec import dump_state, load_state

PAUSE_DIGEST = command_digest(cmd.PauseJob())


def _conflict(command: cmd.Command, key: str, first: cmd.Command) -> ev.CommandRejected:
    return ev.CommandRejected(
        command=CommandKind(type(command).__name__),
        reason=RejectReason.IDEMPOTENCY_CONFLICT,
        detail=f"idem_key {key!r} was already used on job {JOB!r} by another command "
        f"(digest {command_digest(first)}; this {type(command).__name__}: "
        f"{command_digest(command)}); a key names one command, send a new key for a new one",
        run_id=getattr(command, "run_id", None),
        task=getattr(command, "task", None),
        worker_id=getattr(command, "worker_id", None),
        epoch=getattr(command, "epoch", None),
    )


def _paused_with(key: str) -> JobState:
    state, events = when(given(registered(), clock=T0), cmd.PauseJob(), at(minutes=1), key=key)
    assert [type(e) for e in events] == [ev.JobPaused]
    assert state is not None
    return state


# --- the core: handle ---------------------------------------------------------------------


def test_the_same_command_again_under_its_key_emits_nothing() -> None:
    state = _paused_with("k")
    again, events = when(state, cmd.PauseJob(), at(minutes=2), key="k")
    assert events == []
    assert again is state


def test_another_command_under_an_applied_key_is_refused_once() -> None:
    state = _paused_with("k")
    refused, events = when(state, cmd.ResumeJob(), at(minutes=2), key="k")
    assert events == [_conflict(cmd.ResumeJob(), "k", cmd.PauseJob())]
    assert refused is not None
    # nothing else changed: still paused, the same runs, the clock moved on
    assert refused.status is state.status and refused.runs == state.runs
    assert refused.clock == at(minutes=2)
    assert refused.applied_digest("k") == PAUSE_DIGEST  # the key still names the pause
    # the refusal is marked under its conflict key: a re-delivery of it is a no-op
    resume = command_digest(cmd.ResumeJob())
    assert refused.applied[-1] == idem_marker(conflict_key("k", resume))
    assert refused.applied_digest(conflict_key("k", resume)) == resume
    again, events = when(refused, cmd.ResumeJob(), at(minutes=3), key="k")
    assert events == [] and again is refused
    # a third content under the key is a conflict of its own
    _, events = when(refused, cmd.ResumeJob(catchup=True), at(minutes=3), key="k")
    assert events == [_conflict(cmd.ResumeJob(catchup=True), "k", cmd.PauseJob())]
    # and the original, re-delivered, is still a no-op
    _, events = when(refused, cmd.PauseJob(), at(minutes=3), key="k")
    assert events == []


def test_the_refusal_carries_the_ids_the_sender_needs() -> None:
    """A CancelRun under a TriggerJob's key: the refusal names the key, the job and the run."""
    state, _ = when(given(registered(), clock=T0), cmd.TriggerJob(), at(minutes=1), key="t")
    run_id = run_id_for_trigger(JOB, "t")
    cancel = cmd.CancelRun(run_id=run_id, task="main")
    _, events = when(state, cancel, at(minutes=2), key="t")
    [refusal] = events
    assert isinstance(refusal, ev.CommandRejected)
    assert refusal.reason is RejectReason.IDEMPOTENCY_CONFLICT
    assert (refusal.command, refusal.run_id, refusal.task) == (
        CommandKind.CANCEL_RUN,
        run_id,
        "main",
    )
    assert "idem_key 't'" in refusal.detail and repr(JOB) in refusal.detail
    assert command_digest(cmd.TriggerJob()) in refusal.detail


def test_worker_commands_keep_markers_without_digests() -> None:
    """Workers make their keys from the lease: a re-used worker key stays a plain no-op."""
    state, _ = when(given(registered(), clock=T0), cmd.TriggerJob(), at(minutes=1), key="t")
    run_id = run_id_for_trigger(JOB, "t")
    claim = cmd.ClaimTask(run_id=run_id, task="main", attempt=1, worker_id="w1")
    state, events = when(state, claim, at(minutes=2), key="claim-1")
    assert [type(e) for e in events] == [ev.TaskClaimed]
    assert state is not None and state.renewals[-1] == idem_marker("claim-1")
    assert len(state.applied) == len(state.applied_digests)  # no digest went to the worker window
    other = replace(claim, worker_id="w2")
    again, events = when(state, other, at(minutes=3), key="claim-1")
    assert events == [] and again is state
    # a user command under a worker's key, and a worker command under a user's key: no-ops
    again, events = when(state, cmd.PauseJob(), at(minutes=3), key="claim-1")
    assert events == [] and again is state
    again, events = when(state, other, at(minutes=3), key="t")
    assert events == [] and again is state


def test_markers_of_a_record_written_before_digests_get_no_conflict_check() -> None:
    state = _paused_with("old")
    stored = json.loads(dump_state(state)[len(b"v2:") :])
    del stored["applied_digests"]  # the record as the first version wrote it: raw idem_keys
    stored["applied"] = ["old"]
    old = load_state(b"v1:" + json.dumps(stored).encode())
    assert old.applied == state.applied == (idem_marker("old"),) and old.applied_digests == ()
    assert old.applied_digest("old") is None
    again, events = when(old, cmd.ResumeJob(), at(minutes=2), key="old")
    assert events == [] and again is old  # unknown content: treated as a re-delivery
    # a command applied after the upgrade has its digest, aligned with the end of applied
    new, _ = when(old, cmd.ResumeJob(), at(minutes=2), key="new")
    assert new is not None
    assert new.applied == (idem_marker("old"), idem_marker("new")) and new.applied_digests == (
        command_digest(cmd.ResumeJob()),
    )
    assert new.applied_digest("old") is None
    _, events = when(new, cmd.PauseJob(), at(minutes=3), key="old")
    assert events == []
    _, events = when(new, cmd.PauseJob(), at(minutes=3), key="new")
    assert events == [_conflict(cmd.PauseJob(), "new", cmd.ResumeJob())]


def test_digests_stay_aligned_when_a_full_old_window_rolls_over() -> None:
    old = replace(
        given(registered(), clock=T0),
        applied=tuple(idem_marker(f"old-{i}") for i in range(MAX_APPLIED_MARKERS)),
        applied_digests=(),
    )
    state: JobState | None = old
    for i in range(3):
        command = cmd.PauseJob() if i % 2 == 0 else cmd.ResumeJob()
        state, _ = when(state, command, at(minutes=1), key=f"new-{i}")
    assert state is not None
    assert len(state.applied) == MAX_APPLIED_MARKERS
    assert state.applied[:2] == (idem_marker("old-3"), idem_marker("old-4"))
    assert state.applied[-1] == idem_marker("new-2")
    assert state.applied_digests == (
        PAUSE_DIGEST,
        command_digest(cmd.ResumeJob()),
        PAUSE_DIGEST,
    )
    assert state.applied_digest("new-1") == command_digest(cmd.ResumeJob())
    assert state.applied_digest("old-127") is None


# --- the adapter: event ids ---------------------------------------------------------------

N = 4
TOPICS = Topics.of(KafkaSettings(partitions=N))
MANUAL = JobSpec(name="m", schedule=Schedule(ScheduleKind.MANUAL), task_specs=main_task(("true",)))


def _record(offset: int, key: str, command: cmd.Command) -> Record:
    value = encode_command(cmd.Envelope(idem_key=key, job_id=JOB, command=command))
    return Record(partition_for(JOB, N), offset, int(T0.timestamp() * 1000), JOB.encode(), value)


def test_the_adapter_gives_the_refusal_event_ids_of_its_own() -> None:
    store: dict[str, bytes] = {}
    due = DueIndex()
    due.reset(range(N))
    folder = BatchFolder(TOPICS, N, lambda _, job_id: store.get(job_id), due, Codec())
    run_id = run_id_for_trigger(JOB, "t")
    cancel = cmd.CancelRun(run_id=run_id)
    records = [
        _record(0, "reg", cmd.RegisterJob(spec=MANUAL)),
        _record(1, "t", cmd.TriggerJob()),
        _record(2, "t", cancel),  # re-uses the trigger's key
        _record(3, "t", cancel),  # the same conflicting command again
        _record(4, "t", cmd.TriggerJob()),  # the trigger again
    ]
    out = folder.fold(records)
    events = [decode_event(m.value) for m in out.sends if m.topic == TOPICS.run_events]
    by_key = [(e.idem_key, e.index, type(e.event).__name__) for e in events]
    assert by_key == [
        ("reg", 0, "JobRegistered"),
        ("t", 0, "RunScheduled"),
        ("t", 1, "TaskReady"),
        ("t", 0, "CommandRejected"),
    ]
    refusal = events[-1]
    conflict = conflict_key("t", command_digest(cancel))
    assert refusal.event_id == event_id(conflict, JOB, 0)
    assert refusal.event_id != event_id("t", JOB, 0) == events[1].event_id
    assert len({e.event_id for e in events}) == len(events)
    assert refusal.job_id == JOB
    assert isinstance(refusal.event, ev.CommandRejected)
    assert refusal.event.reason is RejectReason.IDEMPOTENCY_CONFLICT
    assert refusal.event.run_id == run_id
    stored = load_state(out.writes[JOB].value)
    assert stored.run(run_id) is not None  # the run the trigger started is untouched


def test_event_key_is_the_idem_key_for_every_other_event() -> None:
    env = cmd.Envelope(idem_key="k", job_id=JOB, command=cmd.PauseJob())
    assert event_key(env, ev.JobPaused()) == "k"
    other = ev.CommandRejected(
        command=CommandKind.PAUSE_JOB, reason=RejectReason.ALREADY_IN_STATE, detail="paused"
    )
    assert event_key(env, other) == "k"
    conflict = replace(other, reason=RejectReason.IDEMPOTENCY_CONFLICT)
    assert event_key(env, conflict) == conflict_key("k", PAUSE_DIGEST)


def test_a_refusal_is_deterministic() -> None:
    """Invariant 4: the same state and command fold to the same refusal (state and events)."""
    state = _paused_with("k")
    first = handle(state, cmd.Envelope(idem_key="k", job_id=JOB, command=cmd.ResumeJob()), T0)
    second = handle(state, cmd.Envelope(idem_key="k", job_id=JOB, command=cmd.ResumeJob()), T0)
    assert first == second
