"""Schema evolution, guarded both ways (issue 17 part 5; schemas/README.md, "Evolution rule").

For every framed top-level type (``cronlog.Command``, ``cronlog.RunEvent``,
``cronlog.DeadLetter``, ``cronlog.WorkerHeartbeat``) and every shipped version under
``schemas/history/``, the current schemas must be

- **backward** compatible: a reader with the current schema reads every record the shipped
  version wrote (Avro schema resolution: Avro spec, "Schema Resolution");
- **forward** compatible: a reader still on the shipped version reads every record the current
  schema writes, except a record whose union branch that version does not have (rule 3 lets
  unions grow; old consumers meet such a branch as a DecodeError and must skip it).

Checked twice, by two libraries: the Avro project's own ``ReaderWriterCompatibilityChecker``
(the Java ``SchemaCompatibility`` ported to Python), and fastavro actually decoding records
written with one schema through the other, with generated records that take every branch of
every union and fill every field. A deliberately incompatible edit in a temp copy must fail.
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path
from typing import Any

import avro.schema
import pytest
from avro.compatibility import (
    ReaderWriterCompatibilityChecker,
    SchemaCompatibilityType,
)
from fastavro import parse_schema, schemaless_reader, schemaless_writer

from topology.wire.codec import SCHEMA_DIR
from topology.wire.registry import registered_schema

HISTORY = SCHEMA_DIR / "history"
SNAPSHOTS = sorted(p for p in HISTORY.iterdir() if p.is_dir())
FRAMED = ("cronlog.Command", "cronlog.RunEvent", "cronlog.DeadLetter", "cronlog.WorkerHeartbeat")
PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


# -- generated records: every union branch, every field ---------------------------------------


class _Names:
    """Named types of one self-contained schema, by full name (they are inlined once)."""

    def __init__(self, schema: Any) -> None:
        self.types: dict[str, Any] = {}
        self._walk(schema, "")

    def _walk(self, s: Any, ns: str) -> None:
        if isinstance(s, list):
            for b in s:
                self._walk(b, ns)
        elif isinstance(s, dict):
            kind = s.get("type")
            if kind in ("record", "enum", "fixed"):
                name = s["name"] if "." in s["name"] else f"{s.get('namespace', ns)}.{s['name']}"
                self.types[name] = s
                ns = name.rpartition(".")[0]
            for f in s.get("fields", ()):
                self._walk(f["type"], ns)
            for key in ("items", "values"):
                if key in s:
                    self._walk(s[key], ns)
            if isinstance(kind, dict | list):
                self._walk(kind, ns)

    def resolve(self, s: Any) -> Any:
        """The definition of a named reference; anything else as it is."""
        return self.types.get(s, s) if isinstance(s, str) and s not in PRIMITIVES else s


def _key(s: Any, names: _Names) -> str:
    """What a union branch is matched by: a named type's full name, else its type name."""
    if isinstance(s, str):
        return s
    if isinstance(s, dict) and s.get("type") in ("record", "enum", "fixed"):
        return next(n for n, d in names.types.items() if d is s)
    return s["type"] if isinstance(s, dict) and isinstance(s["type"], str) else "?"


class _Generator:
    """Records of ``writer``, sample ``i`` taking branch ``i mod n`` of every union of ``n``
    branches the reader knows too (all of them when there is no reader or none is shared)."""

    def __init__(self, writer: Any, reader: Any | None) -> None:
        self.w, self.r = _Names(writer), _Names(reader) if reader is not None else None
        self.writer, self.reader = writer, reader

    def sample(self, i: int) -> Any:
        return self._gen(self.writer, self.reader, i, 0)

    def _gen(self, w: Any, r: Any | None, i: int, depth: int) -> Any:
        w = self.w.resolve(w)
        r = self.r.resolve(r) if self.r is not None and r is not None else r
        if isinstance(w, list):
            return self._union(w, r, i, depth)
        kind = w if isinstance(w, str) else w["type"]
        if isinstance(kind, dict | list):
            return self._gen(kind, r, i, depth)
        rd = r if isinstance(r, dict) else {}
        if kind == "record":
            rfields = {f["name"]: f["type"] for f in rd.get("fields", ())}
            return {
                f["name"]: self._gen(f["type"], rfields.get(f["name"]), i + k, depth + 1)
                for k, f in enumerate(w["fields"])
            }
        if kind == "array":
            n = 1 if depth > 4 else 2
            return [self._gen(w["items"], rd.get("items"), i + j, depth + 1) for j in range(n)]
        if kind == "map":
            return {"k": self._gen(w["values"], rd.get("values"), i, depth + 1)}
        if kind == "enum":
            return w["symbols"][i % len(w["symbols"])]
        if kind == "fixed":
            return bytes(w["size"])
        return {
            "null": None,
            "boolean": i % 2 == 0,
            "int": i,
            "long": 1_700_000_000_000 + i,
            "float": i + 0.5,
            "double": i + 0.25,
            "bytes": bytes([i % 256]),
            "string": f"s{i}",
        }[kind]

    def _union(self, w: list[Any], r: Any | None, i: int, depth: int) -> Any:
        branches = w
        if r is not None and self.r is not None:
            known = {_key(b, self.r) for b in (r if isinstance(r, list) else [r])}
            branches = [b for b in w if _key(b, self.w) in known] or w
        branch = branches[i % len(branches)]
        reader_branch = None
        if r is not None and self.r is not None:
            by_key = {_key(b, self.r): b for b in (r if isinstance(r, list) else [r])}
            reader_branch = by_key.get(_key(branch, self.w))
        value = self._gen(branch, reader_branch, i // len(branches) + i, depth)
        resolved = self.w.resolve(branch)
        if isinstance(resolved, dict) and resolved.get("type") == "record":
            return (_key(branch, self.w), value)  # fastavro's tuple notation: exact branch
        return value


def _union_width(schema: Any) -> int:
    widths = [len(schema)] if isinstance(schema, list) else [1]
    children: list[Any] = []
    if isinstance(schema, list):
        children = schema
    elif isinstance(schema, dict):
        children = [f["type"] for f in schema.get("fields", ())]
        children += [schema[k] for k in ("items", "values") if k in schema]
        if isinstance(schema["type"], dict | list):
            children.append(schema["type"])
    return max(widths + [_union_width(c) for c in children])


# -- the check ----------------------------------------------------------------------------------


def _decode_problems(name: str, writer: Any, reader: Any, direction: str) -> list[str]:
    # backward: every branch the old version could write; forward: those old readers know
    gen = _Generator(writer, reader if direction == "forward" else None)
    w, r = parse_schema(writer), parse_schema(reader)
    problems = []
    for i in range(_union_width(writer) * 2):
        out = io.BytesIO()
        datum = gen.sample(i)
        try:
            schemaless_writer(out, w, datum)
        except Exception as exc:  # a generator bug, not a compatibility problem
            raise AssertionError(f"{name} sample {i} cannot be written: {exc}") from exc
        out.seek(0)
        try:
            schemaless_reader(out, w, r)
        except Exception as exc:
            problems.append(f"{name} {direction}: fastavro: cannot read sample {i}: {exc!s:.200}")
            break
    return problems


def _known_branches_only(schema: Any, known: set[str]) -> Any:
    """``schema`` without the union branches that name a type outside ``known``."""
    if isinstance(schema, list):
        kept = [b for b in schema if _branch_name(b) in known or _branch_name(b) is None]
        return [_known_branches_only(b, known) for b in kept]
    if isinstance(schema, dict):
        out = dict(schema)
        if "fields" in out:
            out["fields"] = [
                {**f, "type": _known_branches_only(f["type"], known)} for f in out["fields"]
            ]
        for key in ("items", "values", "type"):
            if isinstance(out.get(key), dict | list):
                out[key] = _known_branches_only(out[key], known)
        return out
    return schema


def _branch_name(branch: Any) -> str | None:
    """A union branch's named type (full name), or None for a primitive or an array."""
    if isinstance(branch, str):
        return None if branch in PRIMITIVES else branch
    if isinstance(branch, dict) and branch.get("type") in ("record", "enum", "fixed"):
        name = str(branch["name"])
        return name if "." in name else f"{branch.get('namespace', 'cronlog')}.{name}"
    return None


def _checker_problems(name: str, writer: Any, reader: Any, direction: str) -> list[str]:
    if direction == "forward":
        # Old readers cannot know branches added since (rule 3): everything else must resolve.
        writer = _known_branches_only(writer, set(_Names(reader).types))
    result = ReaderWriterCompatibilityChecker().get_compatibility(
        avro.schema.parse(json.dumps(reader)), avro.schema.parse(json.dumps(writer))
    )
    if result.compatibility == SchemaCompatibilityType.compatible:
        return []
    # The Python port pairs no message with its incompatibility: all of them are quoted.
    where = f"{sorted(result.messages)} at {sorted(result.locations)}"
    kinds = ", ".join(k.name.upper() for k in dict.fromkeys(result.incompatibilities))
    return [f"{name} {direction}: avro checker: {kinds}: {where:.300}"]


def compatibility_problems(shipped: Path, current: Path) -> list[str]:
    """Every way the schemas in ``current`` break backward or forward compatibility with the
    version in ``shipped`` (both directories of ``.avsc`` files), one line each."""
    problems = []
    for name in FRAMED:
        if not (shipped / f"{name}.avsc").exists():
            continue  # a framed type newer than that version
        if not (current / f"{name}.avsc").exists():
            problems.append(f"{name}: framed type removed")
            continue
        old = json.loads(registered_schema(name, shipped))
        new = json.loads(registered_schema(name, current))
        problems += _checker_problems(name, old, new, "backward")
        problems += _checker_problems(name, new, old, "forward")
        problems += _decode_problems(name, old, new, "backward")
        problems += _decode_problems(name, new, old, "forward")
    return problems


@pytest.mark.parametrize("snapshot", SNAPSHOTS, ids=lambda p: p.name)
def test_current_schemas_are_backward_and_forward_compatible(snapshot: Path) -> None:
    assert compatibility_problems(snapshot, SCHEMA_DIR) == []


def test_the_generator_takes_every_branch_of_the_body_unions() -> None:
    for name in ("cronlog.Command", "cronlog.RunEvent"):
        schema = json.loads(registered_schema(name))
        gen = _Generator(schema, None)
        branches = {gen.sample(i)["body"][0] for i in range(_union_width(schema) * 2)}
        body = next(f["type"] for f in schema["fields"] if f["name"] == "body")
        assert branches == {_key(b, gen.w) for b in body}


# -- a deliberately incompatible edit must fail ------------------------------------------------


def _edit(folder: Path, name: str, change: Any) -> None:
    path = folder / f"{name}.avsc"
    raw = json.loads(path.read_text())
    change(raw)
    path.write_text(json.dumps(raw))


def _field(raw: Any, name: str) -> Any:
    return next(f for f in raw["fields"] if f["name"] == name)


def _copy(tmp_path: Path) -> Path:
    shutil.copytree(SCHEMA_DIR, tmp_path / "schemas", ignore=shutil.ignore_patterns("history"))
    return tmp_path / "schemas"


def test_a_new_field_without_a_default_breaks_backward(tmp_path: Path) -> None:
    schemas = _copy(tmp_path)
    _edit(
        schemas,
        "cronlog.TaskReady",
        lambda r: r["fields"].append({"name": "lane", "type": "string", "doc": "x"}),
    )
    problems = compatibility_problems(HISTORY / "v3", schemas)
    assert [p.split(": ")[:2] for p in problems] == [
        ["cronlog.RunEvent backward", "avro checker"],
        ["cronlog.RunEvent backward", "fastavro"],
    ]  # not forward: old readers skip the new field
    assert "No default value for field lane in cronlog.TaskReady" in problems[1]


def test_a_removed_union_branch_breaks_backward(tmp_path: Path) -> None:
    schemas = _copy(tmp_path)
    _edit(
        schemas, "cronlog.RunEvent", lambda r: _field(r, "body")["type"].remove("cronlog.RunFailed")
    )
    problems = compatibility_problems(HISTORY / "v3", schemas)
    assert [p.split(": ")[:2] for p in problems] == [
        ["cronlog.RunEvent backward", "avro checker"],
        ["cronlog.RunEvent backward", "fastavro"],
    ]
    assert "MISSING_UNION_BRANCH" in problems[0]


def test_a_changed_type_breaks_both_ways(tmp_path: Path) -> None:
    schemas = _copy(tmp_path)
    _edit(schemas, "cronlog.TaskReady", lambda r: _field(r, "attempt").update(type="string"))
    problems = compatibility_problems(HISTORY / "v3", schemas)
    assert [p.split(": ")[:2] for p in problems] == [
        ["cronlog.RunEvent backward", "avro checker"],
        ["cronlog.RunEvent forward", "avro checker"],
        ["cronlog.RunEvent backward", "fastavro"],
        ["cronlog.RunEvent forward", "fastavro"],
    ]
    assert "Schema mismatch: string is not long" in problems[3]


def test_a_removed_field_without_a_default_breaks_forward_only(tmp_path: Path) -> None:
    # The current reader ignores the field in old records; a v3 reader needs it in new ones.
    schemas = _copy(tmp_path)
    _edit(
        schemas,
        "cronlog.RunFailed",
        lambda r: r["fields"].remove(_field(r, "run_id")),
    )
    problems = compatibility_problems(HISTORY / "v3", schemas)
    assert [p.split(": ")[:2] for p in problems] == [
        ["cronlog.RunEvent forward", "avro checker"],
        ["cronlog.RunEvent forward", "fastavro"],
    ]
    assert "No default value for field run_id in cronlog.RunFailed" in problems[1]
