"""Every producer cronlog creates writes with acks=all (docs/operations.md, "A replicated
cluster"): the one builder sets it and refuses anything else, and every ``Producer(`` of the
services and the topology layer is built by it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from topology.kafka.config import KafkaSettings

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION_CODE = ("topology", "services", "cronlog")


def _is_producer_config(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "producer_config"
    )


def _producer_calls() -> list[tuple[str, ast.expr | None]]:
    """Every ``Producer(...)`` call in the production code, with where it is, and the
    ``producer_config(...)`` call its config comes from (``Producer(x.producer_config(...))``,
    or ``conf = x.producer_config(...)`` in the same function then ``Producer(conf)``)."""
    found = []
    for top in PRODUCTION_CODE:
        for path in sorted((ROOT / top).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            for node in ast.walk(tree):
                if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                assigned = {
                    t.id: a.value
                    for a in ast.walk(node)
                    if isinstance(a, ast.Assign) and _is_producer_config(a.value)
                    for t in a.targets
                    if isinstance(t, ast.Name)
                }
                for call in ast.walk(node):
                    if isinstance(call, ast.Call) and (
                        (isinstance(call.func, ast.Name) and call.func.id == "Producer")
                        or (isinstance(call.func, ast.Attribute) and call.func.attr == "Producer")
                    ):
                        where = f"{path.relative_to(ROOT)}:{call.lineno}"
                        arg = call.args[0] if call.args else None
                        if isinstance(arg, ast.Name) and arg.id in assigned:
                            arg = assigned[arg.id]
                        found.append((where, arg))
    return found


def _acks_given(call: ast.Call) -> list[object]:
    """The ``acks`` values a ``producer_config(...)`` call passes (keywords and ``**{...}``)."""
    out: list[object] = []
    for kw in call.keywords:
        if kw.arg in ("acks", "request.required.acks"):
            out.append(ast.literal_eval(kw.value))
        elif kw.arg is None and isinstance(kw.value, ast.Dict):
            for k, v in zip(kw.value.keys, kw.value.values, strict=True):
                if isinstance(k, ast.Constant) and k.value in ("acks", "request.required.acks"):
                    out.append(ast.literal_eval(v))
    return out


def test_the_producer_config_builder_sets_acks_all_and_idempotence() -> None:
    conf = KafkaSettings(bootstrap="b:1").producer_config()
    assert conf["acks"] == "all"
    assert conf["enable.idempotence"] is True
    assert KafkaSettings(bootstrap="b:1").producer_config(**{"linger.ms": 20})["acks"] == "all"


@pytest.mark.parametrize("acks", ["1", "0", 1, 0])
@pytest.mark.parametrize("key", ["acks", "request.required.acks"])
def test_the_producer_config_builder_refuses_weaker_acks(key: str, acks: object) -> None:
    with pytest.raises(ValueError, match="acks=all"):
        KafkaSettings(bootstrap="b:1").producer_config(**{key: acks})


@pytest.mark.parametrize("acks", ["all", "-1", -1])
def test_the_producer_config_builder_accepts_acks_all_said_again(acks: object) -> None:
    assert KafkaSettings(bootstrap="b:1").producer_config(acks=acks)["acks"] == acks


def test_every_producer_of_the_code_is_built_by_producer_config_with_acks_all() -> None:
    calls = _producer_calls()
    # the scheduler's transactional producer, its ticker, the worker's (task results, logs,
    # heartbeats), the API's, replay's and the after-relay's at least
    assert len(calls) >= 8, [where for where, _ in calls]
    for where, conf in calls:
        assert conf is not None and _is_producer_config(conf), (
            f"{where}: a Producer not built by KafkaSettings.producer_config (acks=all)"
        )
        assert isinstance(conf, ast.Call)
        for acks in _acks_given(conf):
            assert str(acks) in ("all", "-1"), f"{where}: acks={acks!r}"
