"""Golden replay logs: recorded command logs folded through ``cronlog replay``'s code path
must decide exactly the checked-in events (ids, fields and wire bytes) and job records.

A failure here means cronlog now decides something else for a log it already decided: a
breaking change. If it is intended, rewrite the expectations with
``python -m tests.replay.golden --regen`` and justify the diff of ``tests/replay/logs/``.

Every log but ``definitions`` holds definitions in the old shape of issue 23 (a one-task job's
task at job level); ``definitions_old_shape`` is ``definitions`` written that way, and folds to
its expectations.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

import pytest
from fastavro.schema import load_schema

from cronlog import dag, progress, runs
from cronlog.dag import RuleOutcome, Upstream
from cronlog.model import TriggerRule
from tests.old_shape import old_shape_writer
from tests.replay.golden import (
    LOGS,
    Folded,
    expectations_of,
    expected,
    first_difference,
    fold,
    log_names,
    read_log,
)
from topology.wire.codec import (
    SCHEMA_DIR,
    SINGLE_OBJECT_MAGIC,
    DecodeError,
    decode_command,
    schema_fingerprint,
)

NAMES = log_names()


@pytest.mark.parametrize("name", NAMES)
def test_golden_log_folds_to_its_expectations(name: str) -> None:
    diff = first_difference(expected(name), fold(read_log(LOGS / f"{name}.jsonl")))
    assert diff is None, f"{name}: {diff}"


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("batch_size", [1, 7])
def test_the_state_cache_decides_the_same(name: str, batch_size: int) -> None:
    # The scheduler keeps the states it committed (topology/fold/state_cache.py) instead of decoding
    # them again; with it, in small batches (most reads from the cache), every log folds to
    # the same events and state as without it.
    log = read_log(LOGS / f"{name}.jsonl")
    diff = first_difference(expected(name), fold(log, cached=True, batch_size=batch_size))
    assert diff is None, f"{name} (cached, batches of {batch_size}): {diff}"


def _command_fingerprint(version: str) -> bytes:
    folder = SCHEMA_DIR / "history" / version
    if not (folder / "cronlog.Command.avsc").exists():
        folder = SCHEMA_DIR
    return schema_fingerprint(load_schema(str(folder / "cronlog.Command.avsc")))


def test_every_shipped_schema_version_has_a_log_written_in_its_bytes() -> None:
    versions = sorted(p.name for p in (SCHEMA_DIR / "history").iterdir() if p.is_dir())
    seen: dict[str, int] = {}
    for name in NAMES:
        log = read_log(LOGS / f"{name}.jsonl")
        version = log.header["schema_version"]
        header = SINGLE_OBJECT_MAGIC + _command_fingerprint(version)
        framed = [r for r in log.records if r.value[:2] == SINGLE_OBJECT_MAGIC]
        assert framed, name
        # every well-framed record of the log is written with its version's schema
        assert all(r.value.startswith(header) for r in framed), name
        seen[version] = seen.get(version, 0) + 1
    assert set(versions) <= set(seen), f"versions without a golden log: {set(versions) - set(seen)}"


def _schema_of(version: str) -> Path:
    folder = SCHEMA_DIR / "history" / version
    return (folder if folder.exists() else SCHEMA_DIR) / "cronlog.Command.avsc"


@pytest.mark.parametrize("name", [n for n in NAMES if n != "definitions"])
def test_a_log_of_the_old_shape_is_what_the_code_before_issue_23_wrote(name: str) -> None:
    # Every log but ``definitions`` was written before the one shape (or, for
    # ``definitions_old_shape``, as it was): each command, decoded (its definition upcast)
    # and written again the old way, gives back the recorded bytes. So the old-shape writer
    # is faithful, and these logs are the upcast's proof: they fold to their expectations.
    log = read_log(LOGS / f"{name}.jsonl")
    write = old_shape_writer(_schema_of(log.header["schema_version"]))
    commands, other = 0, []
    for record in log.records:
        try:
            env = decode_command(record.value)
        except DecodeError:  # the records the fold must dead-letter
            continue
        commands += 1
        if write(env) != record.value:
            other.append((env.job_id, env.idem_key))
    assert commands
    # the definitions scenario re-sends a registration in both shapes, on purpose
    assert other == ([("shell", "register:shell")] if name == "definitions_old_shape" else [])


def test_the_old_and_the_one_shape_of_a_log_hold_the_same_commands() -> None:
    # definitions_old_shape folds to the expectations of definitions (``same_as``): the same
    # commands, the definitions of one-task jobs written in the other shape.
    new, old = (read_log(LOGS / f"{n}.jsonl") for n in ("definitions", "definitions_old_shape"))
    assert expectations_of(old.name) == "definitions"
    assert len(new.records) == len(old.records)
    rewritten = 0
    for a, b in zip(new.records, old.records, strict=True):
        assert (a.partition, a.offset, a.timestamp_ms, a.key) == (
            b.partition,
            b.offset,
            b.timestamp_ms,
            b.key,
        )
        assert decode_command(a.value) == decode_command(b.value)
        rewritten += a.value != b.value
    assert rewritten == 7  # 4 registrations and 3 redefinitions of one-task jobs


def test_a_changed_outcome_fails_the_comparison() -> None:
    # The negative fixture: the dag log's expectations with one decision turned around (the
    # all_failed task 'audit' ran instead of being skipped).
    want = expected("dag")
    i = next(i for i, e in enumerate(want.events) if '"type": "TaskSkipped"' in e)
    turned = json.loads(want.events[i])
    turned["type"] = "TaskReady"
    tampered = replace(
        want, events=(*want.events[:i], json.dumps(turned, sort_keys=True), *want.events[i + 1 :])
    )
    diff = first_difference(tampered, fold(read_log(LOGS / "dag.jsonl")))
    assert diff is not None and diff.startswith(f"event #{i} differs")


def test_a_changed_state_fails_the_comparison() -> None:
    want = expected("rerun")
    state = json.loads(json.dumps(want.state))
    part = next(p for p in state["partitions"].values() if p["jobs"])
    job = next(iter(part["jobs"].values()))
    job["runs_fired"] += 1
    diff = first_difference(Folded(want.events, state), fold(read_log(LOGS / "rerun.jsonl")))
    assert diff is not None and "state differs" in diff


def _failing_logs() -> list[str]:
    return [
        name
        for name in NAMES
        if first_difference(expected(name), fold(read_log(LOGS / f"{name}.jsonl"))) is not None
    ]


def test_a_changed_trigger_rule_fails_a_golden_log(monkeypatch: pytest.MonkeyPatch) -> None:
    # all_failed read as all_done: the DAG's 'audit' (all_failed after a 'load' that
    # succeeded) would run instead of being skipped.
    real = dag.rule_outcome

    def drifted(rule: TriggerRule, upstream: Iterable[Upstream]) -> RuleOutcome:
        if rule is TriggerRule.ALL_FAILED:
            rule = TriggerRule.ALL_DONE
        return real(rule, upstream)

    monkeypatch.setattr(progress, "rule_outcome", drifted)
    assert "dag" in _failing_logs()


def test_a_changed_readiness_fails_golden_logs(monkeypatch: pytest.MonkeyPatch) -> None:
    # a new run readying every task, its DAG ignored
    monkeypatch.setattr(runs, "initially_ready", lambda spec, tasks: tuple(tasks))
    assert {"dag", "rerun", "cancel"} <= set(_failing_logs())
