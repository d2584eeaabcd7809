"""Invariant 4 (determinism) across restarts: a fold restarted from its stored records — as a
scheduler restarts from the changelog, or ``cronlog replay`` resumes — decides exactly what an
uninterrupted fold decides.

``test_invariants.check_determinism`` already folds a log twice and a prefix + rest in memory
with ``handle``. Here the state crosses ``state_codec`` (bytes, as in the table) at random
restart points, and at the adapter level the same random logs go through ``BatchFolder`` (via
``topology.snapshots.replay.Replayer``) with random batch boundaries and restarts that rebuild the
due index from the stored records, as the scheduler's ``on_recover`` does.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from cronlog import commands as cmd
from cronlog.job import JobState
from cronlog.model import JobSpec
from cronlog.time import to_ms
from tests.property.sequences import (
    COMMON,
    EXAMPLES,
    JOB,
    KINDS,
    MAX_STEPS,
    Driver,
    Step,
    cron_specs,
    fold_log,
    once_specs,
)
from topology.fold.folder import Record
from topology.kafka.config import KafkaSettings
from topology.kafka.partitioning import partition_for
from topology.kafka.topics import Topics
from topology.snapshots.replay import Replayer
from topology.wire.codec import Codec
from topology.wire.state_codec import dump_state, load_state

N = 3
TOPICS = Topics.of(KafkaSettings(partitions=N))
CODEC = Codec()


def _restarted(state: JobState | None) -> JobState | None:
    """The state as a restart sees it: written to the table as bytes, read back."""
    if state is None:
        return None
    stored = dump_state(state)
    back = load_state(stored)
    assert back == state, "state_codec lost something"
    assert dump_state(back) == stored, "state_codec is not byte-stable"
    return back


def _fold_with_restarts(log: list, cuts: list[int]) -> list[Step]:
    steps: list[Step] = []
    state: JobState | None = None
    for start, end in zip([0, *cuts], [*cuts, len(log)], strict=True):
        segment = fold_log(log[start:end], _restarted(state))
        steps += segment
        state = segment[-1].after if segment else state
    return steps


def _cuts(data: st.DataObject, n: int) -> list[int]:
    return sorted(data.draw(st.sets(st.integers(0, n), max_size=4)))


def _check_core(data: st.DataObject, spec: JobSpec, n_steps: int, kinds: list[str]) -> None:
    driver = Driver(data, spec, kinds)
    driver.run(n_steps)
    expected = [(s.after, s.events) for s in driver.steps]
    assert [(s.after, s.events) for s in fold_log(driver.log)] == expected  # from scratch
    assert [(s.after, s.events) for s in fold_log(driver.log)] == expected  # and again
    restarted = _fold_with_restarts(driver.log, _cuts(data, len(driver.log)))
    assert [(s.after, s.events) for s in restarted] == expected
    final = [s.after for s in restarted if s.after is not None]
    if final:  # bit for bit: the stored record a replay writes is the live one
        assert dump_state(final[-1]) == dump_state(driver.steps[-1].after)  # type: ignore[arg-type]


@COMMON
@given(data=st.data(), spec=cron_specs(), n_steps=st.integers(5, MAX_STEPS))
def test_cron_jobs_restarted_through_the_state_codec_decide_the_same(
    data: st.DataObject, spec: JobSpec, n_steps: int
) -> None:
    _check_core(data, spec, n_steps, [*KINDS, "delete", "register"])


@settings(COMMON, max_examples=max(10, EXAMPLES // 2))
@given(data=st.data(), spec=once_specs(), n_steps=st.integers(5, MAX_STEPS))
def test_once_jobs_restarted_through_the_state_codec_decide_the_same(
    data: st.DataObject, spec: JobSpec, n_steps: int
) -> None:
    _check_core(data, spec, n_steps, [*KINDS, "pause", "resume", "update"])


# --- the adapter: BatchFolder through Replayer ----------------------------------------------------


def _records(log: list) -> list[Record]:
    p = partition_for(JOB, N)
    return [
        Record(
            p,
            offset,
            to_ms(at),
            None if isinstance(env.command, cmd.Tick) else JOB.encode(),
            CODEC.encode_command(env),
        )
        for offset, (env, at) in enumerate(log)
    ]


def _recovered(store: dict[bytes, bytes]) -> Replayer:
    """A new process on the stored records: a fresh fold whose due index is rebuilt from the
    table (services/scheduler/app.py, ``rebuild_due_index``)."""
    replayer = Replayer(TOPICS, N, {k: dump_state(load_state(v)) for k, v in store.items()}, CODEC)
    for key, value in replayer.store.items():
        deadline = load_state(value).next_deadline()
        replayer.due.set(partition_for(key, N), key.decode(), to_ms(deadline) if deadline else None)
    return replayer


def _fold_records(
    records: list[Record], cuts: list[int], restarts: set[int]
) -> tuple[list[bytes], dict[bytes, bytes]]:
    replayer = Replayer(TOPICS, N, {}, CODEC)
    events: list[bytes] = []
    for start, end in zip([0, *cuts], [*cuts, len(records)], strict=True):
        if start in restarts:
            replayer = _recovered(dict(replayer.store))
        events += [s.value for s in replayer.fold(records[start:end])]
    return events, dict(replayer.store)


@settings(COMMON, max_examples=max(10, EXAMPLES // 2))
@given(
    data=st.data(), spec=st.one_of(cron_specs(), once_specs()), n_steps=st.integers(5, MAX_STEPS)
)
def test_batch_boundaries_and_restarts_do_not_change_the_adapters_fold(
    data: st.DataObject, spec: JobSpec, n_steps: int
) -> None:
    driver = Driver(data, spec, [*KINDS, "pause", "resume", "delete", "register"])
    driver.run(n_steps)
    records = _records(driver.log)
    whole = _fold_records(records, [], set())
    assert whole == _fold_records(records, [], set())  # twice from scratch
    assert whole[0], "a registration at least"
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(records) - 1)), max_size=8)))
    restarts = set(data.draw(st.sets(st.sampled_from(cuts), max_size=3))) if cuts else set()
    assert _fold_records(records, cuts, restarts) == whole
