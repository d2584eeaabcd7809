"""Golden replay logs: recorded command logs folded through ``cronlog replay``'s code path
must decide exactly the checked-in events (ids, fields and wire bytes) and job records.

A failure here means cronlog now decides something else for a log it already decided: a
breaking change. If it is intended, rewrite the expectations with
``python -m tests.replay.golden --regen`` and justify the diff of ``tests/replay/logs/``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import replace

import pytest
from fastavro.schema import load_schema

from cronlog import dag, progress, runs
from cronlog.dag import RuleOutcome, Upstream
from cronlog.model import TriggerRule
from tests.replay.golden import LOGS, Folded, expected, first_difference, fold, log_names, read_log
from topology.wire.codec import SCHEMA_DIR, SINGLE_OBJECT_MAGIC, schema_fingerprint

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
