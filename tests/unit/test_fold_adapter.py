"""The fold adapter without Kafka: batch boundaries never change what is decided, bad records
become dead letters, and a replay from an empty store reproduces state and events."""

from __future__ import annotations

from datetime import timedelta

import pytest

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.model import JobSpec, Schedule, ScheduleKind, TaskSpec
from tests.unit.fold_world import EVERY_2S, T0, TOPICS, N, fold_in_batches, record_at, sample_log
from topology.fold.folder import Record
from topology.kafka.partitioning import partition_for
from topology.wire.codec import decode_dead_letter, decode_event, encode_command


@pytest.mark.parametrize("batch", [1, 2, 7, 1000])
def test_batch_boundaries_do_not_change_events_or_state(batch: int) -> None:
    assert fold_in_batches(sample_log(), batch) == fold_in_batches(sample_log(), 1)


def test_each_tick_fires_once_and_duplicate_ticks_add_nothing() -> None:
    sends, _ = fold_in_batches(sample_log(), 5)
    events = [decode_event(m.value) for m in sends if m.topic == TOPICS.run_events]
    fired = [
        (e.job_id, e.event.scheduled_for) for e in events if isinstance(e.event, ev.RunScheduled)
    ]
    assert len(fired) == len(set(fired))
    assert sorted(t for j, t in fired if j == "alpha") == [
        T0 + timedelta(seconds=s) for s in (2, 4, 6, 8)
    ]
    ready = [m for m in sends if m.topic == TOPICS.ready]
    assert len(ready) == len(fired)  # every TaskReady also goes to the ready topic
    replies = [decode_event(m.value) for m in sends if m.topic == TOPICS.replies]
    assert [type(r.event).__name__ for r in replies] == ["TaskClaimed"]
    assert [m.key for m in sends if m.topic == TOPICS.replies] == [b"w1"]


def test_bad_records_become_dead_letters_and_the_rest_is_folded() -> None:
    good = record_at(3, T0, "delta", cmd.RegisterJob(spec=EVERY_2S))
    wrong_p = record_at(
        4,
        T0,
        "epsilon",
        cmd.RegisterJob(spec=EVERY_2S),
        partition=(partition_for("epsilon", N) + 1) % N,
    )
    garbage = Record(0, 5, int(T0.timestamp() * 1000), b"junk", b"\x00not avro")
    key_mismatch = Record(
        partition_for("zeta", N),
        6,
        int(T0.timestamp() * 1000),
        b"zeta",
        encode_command(cmd.Envelope(idem_key="k", job_id="eta", command=cmd.PauseJob())),
    )
    sends, store = fold_in_batches([garbage, wrong_p, good, key_mismatch], 10)
    letters = [decode_dead_letter(m.value) for m in sends if m.topic == TOPICS.dead_letters]
    assert [d.offset for d in letters] == [5, 4, 6]
    assert letters[0].error_type == "DecodeError"
    assert "wrong_partition" in letters[1].reason
    assert "does not match job_id" in letters[2].reason
    assert all(d.source_topic == TOPICS.commands for d in letters)
    assert list(store) == ["delta"]


def test_already_applied_command_re_puts_the_record_and_emits_nothing() -> None:
    reg = record_at(0, T0, "alpha", cmd.RegisterJob(spec=EVERY_2S))
    pause = record_at(1, T0, "alpha", cmd.PauseJob())
    sends_once, store_once = fold_in_batches([reg, pause], 10)
    sends_twice, store_twice = fold_in_batches([reg, pause, pause, reg], 10)
    assert sends_twice == sends_once
    assert store_twice == store_once


def test_an_oversized_bad_record_is_dead_lettered_with_its_head() -> None:
    huge = b"\xc3\x01" + b"x" * 900_000
    sends, _ = fold_in_batches([Record(0, 9, int(T0.timestamp() * 1000), b"big", huge)], 10)
    [letter] = [decode_dead_letter(m.value) for m in sends if m.topic == TOPICS.dead_letters]
    assert letter.value == huge[: 256 * 1024]
    assert "truncated" in letter.reason and "900002" in letter.reason


def test_a_command_that_would_outgrow_the_record_is_refused() -> None:
    from cronlog.vocabulary import RejectReason
    from topology.fold import folder as fold_module

    limit = fold_module.MAX_RECORD_BYTES
    # a tiny limit stands for a huge record: the definition (~5.7 KB) fits, a run of its 20
    # task instances (~4 KB more) does not
    fold_module.MAX_RECORD_BYTES = 6000
    try:
        many = JobSpec(
            name="many",
            schedule=Schedule(ScheduleKind.MANUAL),
            task_specs=tuple(TaskSpec(f"t{i}", ("true",)) for i in range(20)),
        )
        recs = [record_at(0, T0, "big", cmd.RegisterJob(spec=many))]
        recs += [record_at(i, T0, "big", cmd.TriggerJob()) for i in range(1, 4)]
        sends, store = fold_in_batches(recs, 10)
    finally:
        fold_module.MAX_RECORD_BYTES = limit
    events = [decode_event(m.value).event for m in sends if m.topic == TOPICS.run_events]
    rejected = [e for e in events if isinstance(e, ev.CommandRejected)]
    assert rejected and all(e.reason is RejectReason.RECORD_TOO_LARGE for e in rejected)
    assert len(store["big"]) <= 6000


def test_a_command_past_a_field_limit_is_dead_lettered_and_the_batch_goes_on() -> None:
    # Issue 11: the fold copied a 1,040,000-character idem_key into its events, could not
    # produce them, and the scheduler crash-looped; the commands behind it were never folded.
    register = record_at(0, T0, "alpha", cmd.RegisterJob(spec=EVERY_2S))
    poison = record_at(1, T0, "alpha", cmd.TriggerJob())
    poison = Record(
        poison.partition,
        1,
        poison.timestamp_ms,
        poison.key,
        encode_command(
            cmd.Envelope(idem_key="k" * 1_040_000, job_id="alpha", command=cmd.TriggerJob())
        ),
    )
    after = record_at(2, T0, "alpha", cmd.TriggerJob())
    sends, store = fold_in_batches([register, poison, after], 10)
    [letter] = [decode_dead_letter(m.value) for m in sends if m.topic == TOPICS.dead_letters]
    assert (letter.offset, letter.error_type) == (1, "DecodeError")
    assert letter.reason.startswith("Command.idem_key: 1040000 characters, at most 512")
    events = [decode_event(m.value) for m in sends if m.topic == TOPICS.run_events]
    assert [(e.idem_key, type(e.event).__name__) for e in events][:3] == [
        ("c0", "JobRegistered"),
        ("c2", "RunScheduled"),
        ("c2", "TaskReady"),
    ]
    assert all(len(m.value) + len(m.key or b"") < 1_000_000 for m in sends)
    assert "alpha" in store


def test_a_huge_record_key_is_cut_in_its_dead_letter() -> None:
    # A key that does not match the job_id is dead-lettered with the key: a 600 KB one, kept
    # whole in the body and as the record key, would be a dead letter no producer can send.
    key = b"k" * 600_000
    bad = Record(
        partition_for(key, N),
        7,
        int(T0.timestamp() * 1000),
        key,
        encode_command(cmd.Envelope(idem_key="k", job_id="eta", command=cmd.PauseJob())),
    )
    sends, _ = fold_in_batches([bad, record_at(8, T0, "delta", cmd.RegisterJob(spec=EVERY_2S))], 10)
    [message] = [m for m in sends if m.topic == TOPICS.dead_letters]
    letter = decode_dead_letter(message.value)
    assert message.key == letter.key == key[:1024]
    assert "(600000 bytes) does not match job_id 'eta'" in letter.reason
    assert letter.reason.endswith("(key truncated to its first 1024 of 600000 bytes)")
    assert len(message.value) < 10_000
    assert any(m.topic == TOPICS.run_events for m in sends)  # the next record was folded
