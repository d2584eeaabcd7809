"""Generates the job file reference from the API's own models: ``docs/job.schema.json`` (a
JSON Schema for editors) and ``docs/jobs-reference.md`` (one YAML example per feature, then
every field with its type, default and meaning).

Run ``python -m services.api.shapes.reference`` after changing ``definition.py``;
``--check`` exits 1 when the files on disk are stale (``tests/unit/test_jobs_reference.py``
fails then too). The schema is pydantic's ``model_json_schema`` of ``JobIn``; the fields'
descriptions come from the models' Google-style ``Attributes:`` sections (read with
``docstring_parser``), so the reference says what the code's docstrings say.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from services.api.shapes import definition
from services.api.shapes.reference_examples import EXAMPLES

ROOT = Path(__file__).resolve().parents[3]
SCHEMA_FILE = ROOT / "docs" / "job.schema.json"
REFERENCE_FILE = ROOT / "docs" / "jobs-reference.md"
MODELS: tuple[type[BaseModel], ...] = (
    definition.JobIn,
    definition.ScheduleIn,
    definition.RetryPolicyIn,
    definition.TaskIn,
    definition.HttpTaskIn,
    definition.ExclusionIn,
)
"""The models of a job file, in the order the reference lists their fields."""
SECTIONS = {
    "ScheduleIn": ("schedule", "schedule"),
    "RetryPolicyIn": ("retry_policy", "retry_policy"),
    "TaskIn": ("tasks[]", "tasks"),
    "HttpTaskIn": ("http", "http"),
    "ExclusionIn": ("schedule.exclusions[]", "scheduleexclusions"),
}
"""Each nested model's heading in the reference (where it sits in a job file) and its anchor."""
RUN_IN_S = {
    "anyOf": [{"type": "number", "minimum": 0}, {"type": "null"}],
    "default": None,
    "title": "Run In S",
    "description": "`cronlog jobs apply` only: a `once` job's run_at is now + this many "
    "seconds (the API takes run_at).",
}
"""``schedule.run_in_s``: the CLI turns it into ``run_at`` (``services/cli/client.py``)."""


def field_docs(model: type[BaseModel]) -> dict[str, str]:
    """Return each field's description from ``model``'s ``Attributes:`` docstring section.

    An entry may name several fields (``start_at / end_at: …``, ``shell, callable, http:
    …``): each gets the text. Fields the section does not name are absent; so are entries
    that name no field (``other fields``).
    """
    from docstring_parser import DocstringStyle, parse

    docs: dict[str, str] = {}
    for cls in reversed([c for c in model.__mro__ if issubclass(c, BaseModel)]):
        for param in parse(cls.__dict__.get("__doc__") or "", style=DocstringStyle.GOOGLE).params:
            for name in re.split(r"\s*[/,]\s*", param.arg_name):
                if name in model.model_fields:
                    docs[name] = _markdown(param.description or "")
    return docs


def _markdown(text: str) -> str:
    """A docstring's text on one line, its reST literals (````x````) as Markdown's (```x```)."""
    return " ".join(text.replace("``", "`").split())


def _summary(model: type[BaseModel]) -> str:
    if model is definition.JobIn:
        return "One job: its `job_id` and its definition (a document of a job file)."
    return _markdown((model.__doc__ or "").strip().split("\n\n")[0])


def schema() -> dict[str, Any]:
    """Return the JSON Schema (draft 2020-12) of one job file document.

    Returns:
        ``JobIn``'s schema, each property described from its model's docstring, plus the
        CLI's ``schedule.run_in_s``.
    """
    out = definition.JobIn.model_json_schema()
    by_name = {m.__name__: m for m in MODELS}
    for name, node in [("JobIn", out), *out["$defs"].items()]:
        model = by_name[name]
        node["description"] = _summary(model)
        for field, text in field_docs(model).items():
            node["properties"][field].setdefault("description", text)
    out["$defs"]["ScheduleIn"]["properties"]["run_in_s"] = RUN_IN_S
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://cronlog.invalid/job.schema.json",
        **out,
        "title": "cronlog job file",
    }


def _type(node: dict[str, Any]) -> str:
    """A property's type as a reader says it: ``string``, ``list of TaskIn``, ``one of: …``."""
    if "$ref" in node:
        heading, anchor = SECTIONS[str(node["$ref"]).rsplit("/", 1)[1]]
        return f"[`{heading}`](#{anchor})"
    if "enum" in node:
        return "one of " + ", ".join(f"`{v}`" for v in node["enum"])
    if "const" in node:
        return f"`{node['const']}`"
    if "anyOf" in node:
        kinds = [_type(n) for n in node["anyOf"] if n.get("type") != "null"]
        return " or ".join(kinds) + (" or null" if len(kinds) < len(node["anyOf"]) else "")
    if node.get("type") == "array":
        return "list of " + _type(node.get("items", {}))
    if node.get("type") == "object":
        return "mapping"
    return str(node.get("format") or node.get("type") or "any")


def _default(node: dict[str, Any], required: bool) -> str:
    if required:
        return "**required**"
    if "default" not in node:
        return ""
    value = node["default"]
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"`{json.dumps(value)}`"


def _fields(name: str, node: dict[str, Any]) -> list[str]:
    """The Markdown table of one model's fields."""
    required = set(node.get("required", []))
    lines = [f"### `{name}`", "", node["description"], "", "| field | type | default | meaning |"]
    lines.append("|---|---|---|---|")
    first = ["job_id", "tenant"] if name == "job" else []
    for field in [*first, *(f for f in node["properties"] if f not in first)]:
        prop = node["properties"][field]
        text = str(prop.get("description", "")).replace("|", "\\|")
        kind = _type(prop).replace("|", "\\|")
        lines.append(f"| `{field}` | {kind} | {_default(prop, field in required)} | {text} |")
    return [*lines, ""]


HEADER = """\
# Job files: a reference

Generated from the API's models (`services/api/shapes/definition.py`) by `python -m
services.api.shapes.reference`; do not edit by hand. A job file is YAML, one job per document
(`---` between them), applied with `cronlog jobs apply -f FILE` (again after an edit: the job
becomes what the file says); the API's `POST /api/v1/jobs` takes the same fields as JSON. A
field the models do not know is refused naming it (`tasks[1].depends_on: …`).

For editors: [`job.schema.json`](job.schema.json) is the JSON Schema of one document (VS Code's
YAML extension: `# yaml-language-server: $schema=…/docs/job.schema.json` on a file's first
line). Durations are seconds (`*_s`), instants ISO 8601 with a zone. How these behave:
[jobs.md](jobs.md) (task kinds, retries, leases, DAGs, run states) and
[schedules.md](schedules.md) (cron dialect, time zones, DST, catch-up, overlap).

## Examples, one per feature
"""


def markdown(schema_: dict[str, Any]) -> str:
    """Return docs/jobs-reference.md: the examples, then every model's fields."""
    lines = [HEADER]
    for ex in EXAMPLES:
        lines += [f"### {ex.title}", "", ex.text, "", "```yaml", ex.yaml.rstrip("\n"), "```", ""]
    lines += ["## Every field", ""]
    lines += _fields("job", schema_)
    for name, (heading, _anchor) in SECTIONS.items():
        lines += _fields(heading, schema_["$defs"][name])
    return "\n".join(lines).rstrip("\n") + "\n"


def example_jobs() -> list[dict[str, Any]]:
    """Return every job document of the examples, parsed from their YAML."""
    return [doc for ex in EXAMPLES for doc in yaml.safe_load_all(ex.yaml) if doc is not None]


def check_examples() -> None:
    """Validate each example with the API's model (``tests/unit/test_jobs_reference.py`` also
    checks them against the generated schema, with jsonschema).

    Raises:
        pydantic.ValidationError: an example is not a valid job.
    """
    for job in example_jobs():
        schedule = {k: v for k, v in job["schedule"].items() if k != "run_in_s"}
        definition.JobIn.model_validate({**job, "schedule": schedule})


def rendered() -> dict[Path, str]:
    """Return the two generated files' paths and texts (the examples checked first)."""
    schema_ = schema()
    check_examples()
    return {
        SCHEMA_FILE: json.dumps(schema_, indent=2, ensure_ascii=False) + "\n",
        REFERENCE_FILE: markdown(schema_),
    }


def main(argv: list[str]) -> int:
    """Write the files (or with ``--check``, say which are stale); return the exit status."""
    stale = [p for p, text in rendered().items() if not p.exists() or p.read_text() != text]
    if "--check" in argv:
        for path in stale:
            print(f"stale: {path.relative_to(ROOT)} (python -m services.api.shapes.reference)")
        return 1 if stale else 0
    for path, text in rendered().items():
        path.write_text(text)
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
