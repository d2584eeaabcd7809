"""Replay without Kafka: the Replayer is the scheduler's fold, digests ignore order, the changelog
reads as a table, and the verify comparisons name the first difference."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.model import JobSpec, Schedule, ScheduleKind, main_task
from cronlog.vocabulary import CancelReason
from services.cli.main import app as cli
from services.cli.replay import ReplayError, prepare_state_dir
from tests.unit.fold_world import EVERY_2S, T0, TOPICS, N, fold_in_batches, record_at, sample_log
from topology.fold.due_index import DueIndex
from topology.fold.folder import BatchFolder, Record
from topology.kafka.config import KafkaSettings
from topology.kafka.topics import Topics
from topology.snapshots.replay import (
    Replayer,
    compare_events,
    describe_difference,
    first_state_difference,
    latest_values,
    state_digest,
)
from topology.wire.codec import Codec, decode_event
from topology.wire.state_codec import dump_state, load_state


def _replay(batch: int) -> tuple[Replayer, list[ev.RunEvent]]:
    store: dict[bytes, bytes] = {}
    replayer = Replayer(TOPICS, N, store)
    records, events = sample_log(), []
    for i in range(0, len(records), batch):
        events += [decode_event(s.value) for s in replayer.fold(records[i : i + batch])]
    return replayer, events


def test_replayer_reproduces_the_scheduler_folds_state_and_run_events() -> None:
    sends, table = fold_in_batches(sample_log(), 5)  # the scheduler's path: BatchFolder + a table
    replayer, events = _replay(3)
    assert {k.decode(): v for k, v in replayer.store.items()} == table
    assert events == [decode_event(s.value) for s in sends if s.topic == TOPICS.run_events]
    assert sum(len(keys) for keys in replayer.jobs.values()) == 3  # alpha, beta, gamma
    assert replayer.commands == len(sample_log())
    assert replayer.dead_letters == 0


def test_replayer_counts_dead_letters_and_keeps_going() -> None:
    replayer = Replayer(TOPICS, N, {})
    good = record_at(1, T0, "alpha", cmd.RegisterJob(spec=EVERY_2S))
    bad = replace(good, offset=0, value=b"garbage")
    events = replayer.fold([bad, good])
    assert replayer.dead_letters == 1
    assert [type(decode_event(e.value).event).__name__ for e in events] == ["JobRegistered"]


def test_state_digest_ignores_order_and_sees_every_byte() -> None:
    items = [(b"a", b"v1:1"), (b"b", b"v1:2")]
    assert state_digest(items) == state_digest(list(reversed(items)))
    assert state_digest(items) != state_digest([(b"a", b"v1:1"), (b"b", b"v1:3")])
    # length prefixes: moving a byte from key to value is a different table
    assert state_digest([(b"ab", b"c")]) != state_digest([(b"a", b"bc")])


def test_latest_values_keeps_the_last_value_and_honours_tombstones() -> None:
    log = [(b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"b", None), (None, b"x"), (b"c", b"1")]
    assert latest_values(log) == {b"a": b"2", b"c": b"1"}


def _events() -> list[ev.RunEvent]:
    return _replay(1000)[1]


def test_identical_events_with_redeliveries_verify() -> None:
    ours = _events()
    live = ours[:4] + ours[2:4] + ours[4:]  # a batch re-delivered after a crash
    verdict = compare_events(live, ours, acknowledged=len(ours))
    assert verdict.ok, verdict.detail
    assert (verdict.live, verdict.duplicates, verdict.replayed) == (len(ours), 2, len(ours))


def test_a_tail_not_yet_folded_live_is_a_note_not_a_failure() -> None:
    ours = _events()
    verdict = compare_events(ours[:-3], ours, acknowledged=len(ours) - 3)
    assert verdict.ok
    assert "3 more from commands not yet folded live" in verdict.detail


def test_events_missing_for_acknowledged_commands_fail() -> None:
    ours = _events()
    verdict = compare_events(ours[:-3], ours, acknowledged=len(ours))
    assert not verdict.ok
    assert f"lacks 3 events of acknowledged commands, from event #{len(ours) - 3}" in verdict.detail


def test_a_changed_event_is_named_with_its_field() -> None:
    ours = _events()
    live = list(ours)
    live[5] = replace(live[5], at=live[5].at + timedelta(seconds=1))
    verdict = compare_events(live, ours, acknowledged=len(ours))
    assert not verdict.ok
    assert verdict.detail.startswith(f"event #5 {ours[5].event_id}")
    assert "at: " in verdict.detail


def test_a_redelivery_with_other_content_fails() -> None:
    ours = _events()
    changed = replace(ours[1], index=ours[1].index + 7)
    verdict = compare_events([*ours[:2], changed, *ours[2:]], ours, acknowledged=0)
    assert not verdict.ok
    assert "re-delivery of" in verdict.detail and "index: " in verdict.detail


def test_live_events_the_replay_does_not_produce_fail() -> None:
    ours = _events()
    verdict = compare_events(ours, ours[:-1], acknowledged=0)
    assert not verdict.ok
    assert "live has 1 events the replay does not produce" in verdict.detail


def test_first_state_difference_names_the_job_and_field() -> None:
    replayer, _ = _replay(7)
    live = dict(replayer.store)
    assert first_state_difference(live, dict(replayer.store)) is None
    state = load_state(live[b"beta"])
    live[b"beta"] = dump_state(replace(state, clock=state.clock + timedelta(seconds=1)))
    detail = first_state_difference(live, dict(replayer.store))
    assert detail is not None and detail.startswith("job 'beta': clock: ")
    del live[b"alpha"]
    assert first_state_difference(live, dict(replayer.store)) == "job 'alpha': only in the replay"
    live[b"alpha"] = b"v9:junk"
    assert "unreadable record" in (first_state_difference(live, dict(replayer.store)) or "")


def test_describe_difference_walks_into_sequences() -> None:
    assert describe_difference((1, 2), (1, 3), "xs") == "xs[1]: 2 != 3"
    assert describe_difference((1,), (1, 2), "xs") == "xs: 1 items != 2 items"
    assert describe_difference("a", "a") == ""


def test_a_non_empty_state_dir_is_refused_unless_forced(tmp_path: Path) -> None:
    (tmp_path / "jobs").mkdir()
    (tmp_path / "replay.json").write_text("{}")
    (tmp_path / "keep.txt").write_text("mine")
    with pytest.raises(ReplayError, match="is not empty"):
        prepare_state_dir(tmp_path, force=False)
    assert prepare_state_dir(tmp_path, force=True) == tmp_path
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]  # only replay's own
    assert prepare_state_dir(tmp_path / "new", force=False).is_dir()
    with pytest.raises(ReplayError, match="not a directory"):
        prepare_state_dir(tmp_path / "keep.txt", force=True)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--until", "yesterday"], "--until: 'yesterday' is not an ISO-8601 instant"),
        (["--until", "2026-03-01T12:00:00"], "has no zone"),
        (["--verify", "--until", "2026-03-01T12:00:00Z"], "cannot be combined with --until"),
        (["--to-topic", "cronlog.run-events"], "is one of cronlog's live topics"),
        (["--batch-size", "0"], "--batch-size"),
    ],
)
def test_bad_replay_options_exit_2_naming_the_option(
    args: list[str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CRONLOG_TOPIC_PREFIX", raising=False)
    result = CliRunner().invoke(cli, ["replay", *args])
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())


def test_run_ends_written_before_they_carried_a_tenant_verify_and_other_tenants_do_not() -> None:
    first = _events()[0]
    bodies: list[ev.Event] = [
        ev.RunSucceeded(run_id="r0", tenant="default"),
        ev.RunFailed(run_id="r1", tenant="default"),
        ev.RunCancelled(run_id="r2", reason=CancelReason.USER, tenant="default"),
    ]
    ours = [replace(first, event_id=f"e{i}", event=body) for i, body in enumerate(bodies)]
    old = [replace(e, event=replace(e.event, tenant="")) for e in ours]
    assert compare_events(old, ours, acknowledged=3).ok  # a log from before v4 still verifies
    other = [replace(ours[0], event=replace(ours[0].event, tenant="team-b")), *ours[1:]]
    assert not compare_events(other, ours, acknowledged=3).ok


_SLICE_CODEC = Codec()
_SLICE_T0 = int(datetime(2026, 1, 1, 0, 0, 30, tzinfo=UTC).timestamp() * 1000)


def test_a_replay_folds_with_the_live_tick_slice() -> None:
    """Live folds with ``CRONLOG_TICK_SLICE``; a replay (and a snapshot) with another slice
    decides some jobs on another Tick (found by review): they pass the same slice."""
    topics = Topics.of(KafkaSettings(partitions=1))
    log: list[Record] = []
    for i in range(5):
        spec = JobSpec(
            name=f"j{i}",
            schedule=Schedule(kind=ScheduleKind.CRON, expression="* * * * *"),
            task_specs=main_task(("true",)),
        )
        env = cmd.Envelope(idem_key=f"reg{i}", job_id=f"j{i}", command=cmd.RegisterJob(spec=spec))
        log.append(
            Record(0, len(log), _SLICE_T0 + i, f"j{i}".encode(), _SLICE_CODEC.encode_command(env))
        )
    tick = cmd.Envelope(idem_key="tick-1", job_id="", command=cmd.Tick())
    log.append(Record(0, len(log), _SLICE_T0 + 31_000, None, _SLICE_CODEC.encode_command(tick)))

    # live: slice 2, the continuation Ticks it appends go into the log (as on the topic)
    store: dict[bytes, bytes] = {}
    due = DueIndex()
    due.reset([0])
    live = BatchFolder(
        topics, 1, lambda _p, j: store.get(j.encode()), due, _SLICE_CODEC, tick_slice=2
    )
    i = 0
    while i < len(log):
        rec = log[i]
        out = live.fold([rec])
        for j, w in out.writes.items():
            store[j.encode()] = w.value
        for s in out.sends:
            if s.topic == topics.commands:
                log.append(Record(0, len(log), rec.timestamp_ms + 5, s.key, s.value))
        i += 1

    same = Replayer(topics, 1, {}, _SLICE_CODEC, tick_slice=2)
    same.fold(log)
    assert dict(same.store) == store
    other = Replayer(topics, 1, {}, _SLICE_CODEC)  # the default slice: 250
    other.fold(log)
    assert state_digest(other.store.items()) != state_digest(store.items())


def test_replay_lines_are_not_broken_when_piped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 24: ``replay --verify | cat`` wrapped each partition's line at 80 columns."""
    from services.cli import broker_access
    from services.cli import replay as replay_mod

    long_note = "the log no longer holds offset 0 of partition 3: " + "x" * 150
    report = replay_mod.ReplayReport(
        state_dir=tmp_path,
        partitions=[replay_mod.PartitionResult(partition=0, end=12, jobs=1, digest="ab" * 32)],
        records=12,
        notes=[long_note],
    )
    monkeypatch.setattr(replay_mod, "run_replay", lambda *_args, **_kw: report)
    monkeypatch.setattr(broker_access, "use_local_credentials", lambda: None)
    monkeypatch.delenv("COLUMNS", raising=False)
    result = CliRunner().invoke(cli, ["replay", "--state-dir", str(tmp_path / "s")])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert f"note: {long_note}" in lines
    assert any(ln.startswith("replayed 12 records") and ln.endswith(str(tmp_path)) for ln in lines)
