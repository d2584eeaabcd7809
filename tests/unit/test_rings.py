"""The rings (STYLE.md): imports point inward only, and the core stays pure.

- ``cronlog/``, the pure core, imports only the standard library's pure modules, croniter and
  itself: no I/O, no clock, no Kafka, no adapter. The client SDK is a package of its own,
  ``cronlog_client/`` (docs/client.md), which no core module imports.
- ``topology/`` never imports ``services/`` nor the SDK; the SDK imports no service;
  ``services/archive`` never imports ``services/api``.
- No import cycle between packages (every folder with an ``__init__.py`` is one; function-local
  imports count).
- No module of ``tests/`` or ``bench/`` imports a test module: shared helpers live in
  ``tests/builders.py``, a ``conftest.py`` fixture or a helper module.

Each check is also run on a planted breach, so that it is known to fail when it should.
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


# --- the rings between packages ------------------------------------------------------------

TOPS = ("cronlog", "cronlog_client", "topology", "services")
"""The top-level packages of the product; tests, benchmarks and examples may import any."""
FORBIDDEN = (
    ("cronlog", ("topology", "services", "cronlog_client"), "the core imports no adapter"),
    ("topology", ("services", "cronlog_client"), "topology never imports a service"),
    ("cronlog_client", ("services",), "the SDK imports no service"),
    ("services.archive", ("services.api",), "the archive never imports the API"),
)
"""(importer, what it may not import, the rule's words): each by package prefix."""


def _modules(root: Path) -> dict[str, tuple[Path, str]]:
    """Every product module under ``root``: dotted name -> (file, dotted name of its package)."""
    found = {}
    for top in TOPS:
        for path in sorted((root / top).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = (path, ".".join(parts[:-1]))
    return found


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def package_edges(root: Path) -> dict[str, set[str]]:
    """Package -> the other product packages its modules import (function-local imports too)."""
    modules = _modules(root)

    def package_of(name: str) -> str | None:
        parts = name.split(".")
        for end in range(len(parts), 0, -1):
            hit = modules.get(".".join(parts[:end]))
            if hit is not None:
                return hit[1]
        return None

    edges: dict[str, set[str]] = {}
    for path, package in modules.values():
        for _line, name in _imports(ast.parse(path.read_text(), str(path))):
            target = package_of(name)
            if target is not None and target != package:
                edges.setdefault(package, set()).add(target)
    return edges


def ring_breaches(root: Path) -> list[str]:
    """Every import between packages that a rule of ``FORBIDDEN`` refuses, as ``a -> b: rule``."""
    problems = []
    for package, targets in sorted(package_edges(root).items()):
        for importer, refused, rule in FORBIDDEN:
            if not _under(package, importer):
                continue
            problems += [
                f"{package} -> {target}: {rule}"
                for target in sorted(targets)
                if any(_under(target, r) for r in refused)
            ]
    return problems


def package_cycles(root: Path) -> list[list[str]]:
    """The import cycles between packages (strongly connected components of two or more)."""
    edges = package_edges(root)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(edges.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return cycles


ROOT = CORE.parent


def test_no_package_imports_across_a_ring() -> None:
    assert ring_breaches(ROOT) == []


def test_no_import_cycle_between_packages() -> None:
    assert package_cycles(ROOT) == []


def test_the_ring_check_catches_a_planted_upward_import(tmp_path: Path) -> None:
    def write(rel: str, text: str = "") -> None:
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    for package in (
        "cronlog",
        "cronlog_client",
        "topology",
        "topology/fold",
        "services",
        "services/api",
        "services/api/routes",
        "services/archive",
    ):
        write(f"{package}/__init__.py")
    write("topology/fold/folder.py", "from cronlog.job import JobState\n")
    write("services/api/routes/jobs.py", "from topology.fold.folder import BatchFolder\n")
    assert ring_breaches(tmp_path) == []
    assert package_cycles(tmp_path) == []
    write("cronlog/job.py", "def f():\n    from topology.fold import folder\n")
    write("topology/fold/spans.py", "from services.api.routes import jobs\n")
    write("services/archive/lookup.py", "import services.api.routes.jobs\n")
    write("cronlog_client/events.py", "from services.api import app\n")
    assert ring_breaches(tmp_path) == [
        "cronlog -> topology.fold: the core imports no adapter",
        "cronlog_client -> services.api: the SDK imports no service",
        "services.archive -> services.api.routes: the archive never imports the API",
        "topology.fold -> services.api.routes: topology never imports a service",
    ]
    assert package_cycles(tmp_path) == [["cronlog", "services.api.routes", "topology.fold"]]


# --- test modules share helpers, never import each other ----------------------------------

SCANNED = ("tests", "bench")
"""Where no module imports a test module: helpers live in tests/builders.py, a conftest.py
fixture or a helper module (docs/contributing.md)."""


def imports_of_test_modules(root: Path) -> list[str]:
    """Every import of a ``test_*`` module (or of a ``test_*`` name, which pytest would collect
    a second time) under ``SCANNED``, as ``path:line: imports name``."""
    problems = []
    for folder in SCANNED:
        for path in sorted((root / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and (node.level or node.module):
                    module = "." * node.level + (node.module or "")
                    sep = "" if module.endswith(".") else "."
                    names = [f"{module}{sep}{alias.name}" for alias in node.names]
                else:
                    continue
                problems += [
                    f"{path.relative_to(root)}:{node.lineno}: imports {name}"
                    for name in names
                    if name.startswith((".", "tests."))
                    and any(part.startswith("test_") for part in name.split("."))
                ]
    return problems


def test_no_module_imports_a_test_module() -> None:
    assert imports_of_test_modules(ROOT) == []


def test_the_test_import_check_catches_a_planted_one(tmp_path: Path) -> None:
    unit = tmp_path / "tests" / "unit"
    unit.mkdir(parents=True)
    (tmp_path / "bench").mkdir()
    (tmp_path / "tests" / "builders.py").write_text("def given(): ...\n")
    (unit / "test_b.py").write_text(
        "from tests.builders import given\nfrom tests.unit.authed import authed\n"
        "from hypothesis import strategies\nfrom . import helpers\n"
    )
    assert imports_of_test_modules(tmp_path) == []
    (unit / "test_a.py").write_text(
        "from tests.unit.test_b import given\nimport tests.unit.test_b\n"
        "from tests.unit import test_b\nfrom .test_b import x\n"
        "def f():\n    from tests.builders import test_given\n"
    )
    (tmp_path / "bench" / "fold.py").write_text("from tests.unit.test_b import given\n")
    assert imports_of_test_modules(tmp_path) == [
        "tests/unit/test_a.py:1: imports tests.unit.test_b.given",
        "tests/unit/test_a.py:2: imports tests.unit.test_b",
        "tests/unit/test_a.py:3: imports tests.unit.test_b",
        "tests/unit/test_a.py:4: imports .test_b.x",
        "tests/unit/test_a.py:6: imports tests.builders.test_given",
        "bench/fold.py:1: imports tests.unit.test_b.given",
    ]
