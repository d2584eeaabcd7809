"""The pure core stays pure (STYLE.md, "Rings"): no I/O, no clock, no Kafka, no client SDK.

``cronlog/`` imports only the standard library's pure modules, croniter and itself; the client
SDK is a package of its own, ``cronlog_client/`` (docs/client.md), which no core module imports.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "cronlog"
CLIENT = "cronlog_client"
"""The client SDK, a package of its own beside the core: it does I/O."""
THIRD_PARTY = {"croniter"}
"""Libraries the core may import (pure computation)."""
IMPURE_STDLIB = {
    "asyncio",
    "http",
    "io",
    "multiprocessing",
    "os",
    "pathlib",
    "random",
    "secrets",
    "select",
    "shutil",
    "signal",
    "socket",
    "sqlite3",
    "subprocess",
    "sys",
    "tempfile",
    "threading",
    "time",
    "uuid",
}
"""Standard modules that do I/O, read a clock or draw randomness."""
CLOCK_CALLS = {"now", "utcnow", "today", "monotonic", "perf_counter", "time_ns"}
"""Attribute calls that read a clock (``datetime.now()``, ``date.today()``, ...); the
``time`` module itself is refused as an import (``datetime.time()`` is a wall time, allowed)."""


def _imports(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def impurities(core: Path) -> list[str]:
    """Every import or clock call of a core module that breaks the rule, as ``path:line: what``."""
    problems = []
    for path in sorted(core.rglob("*.py")):
        rel = path.relative_to(core)
        tree = ast.parse(path.read_text(), str(path))
        for line, name in _imports(tree):
            top = name.split(".")[0]
            where = f"cronlog/{rel}:{line}"
            if top == CLIENT:
                problems.append(f"{where}: imports the client SDK {name}")
            elif top == "cronlog" or top == "__future__" or top in THIRD_PARTY:
                continue
            elif top in IMPURE_STDLIB:
                problems.append(f"{where}: imports {name} (I/O, clock or randomness)")
            elif top not in sys.stdlib_module_names:
                problems.append(f"{where}: imports the library {name}")
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in CLOCK_CALLS
                and not node.args
            ):
                problems.append(f"cronlog/{rel}:{node.lineno}: calls .{node.func.attr}()")
    return problems


def test_the_core_is_pure_and_never_imports_the_client_sdk() -> None:
    assert impurities(CORE) == []


def test_the_client_sdk_is_where_the_rule_says() -> None:
    assert (CORE.parent / CLIENT / "__init__.py").exists()
    assert not (CORE / "client").exists()


def test_the_check_catches_each_kind_of_breach(tmp_path: Path) -> None:
    core = tmp_path / "cronlog"
    core.mkdir()
    (core / "good.py").write_text(
        "from __future__ import annotations\nimport re\nfrom croniter import croniter\n"
        "from cronlog.model import JobSpec\n"
    )
    (core / "bad.py").write_text(
        "import confluent_kafka\nfrom cronlog_client import CommandProducer\n"
        "import time\nfrom datetime import datetime\nx = datetime.now()\n"
    )
    assert impurities(core) == [
        "cronlog/bad.py:1: imports the library confluent_kafka",
        "cronlog/bad.py:2: imports the client SDK cronlog_client",
        "cronlog/bad.py:2: imports the client SDK cronlog_client.CommandProducer",
        "cronlog/bad.py:3: imports time (I/O, clock or randomness)",
        "cronlog/bad.py:5: calls .now()",
    ]
