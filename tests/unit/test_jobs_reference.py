"""The job file reference (issue 24, item 5): docs/job.schema.json and docs/jobs-reference.md
are what ``python -m services.api.shapes.reference`` makes of the API's models today, every
example is a job the API takes, and the schema refuses what the API refuses."""

from __future__ import annotations

from pathlib import Path

import jsonschema
import pytest
from fastapi.testclient import TestClient

from services.api.shapes import reference
from services.cli.client import load_job_file

STALE = "stale: run `python -m services.api.shapes.reference` and commit the result"


def test_the_generated_files_are_current() -> None:
    for path, text in reference.rendered().items():
        assert path.read_text() == text, f"{path.name} {STALE}"
    assert reference.main(["--check"]) == 0


def test_every_field_of_every_model_is_described() -> None:
    schema = reference.schema()
    for name, node in [("job", schema), *schema["$defs"].items()]:
        undescribed = [f for f, p in node["properties"].items() if not p.get("description")]
        assert undescribed == [], f"{name}: describe them in its docstring's Attributes:"


def test_each_example_is_applied_as_the_cli_reads_it_and_the_api_takes_it(
    offline: TestClient, tmp_path: Path
) -> None:
    """Through the CLI's file reader and the API's whole validation (the core's too): a job
    that passed every check reaches the command producer, whose broker never answers (503)."""
    seen = 0
    for i, example in enumerate(reference.EXAMPLES):
        path = tmp_path / f"example-{i}.yaml"
        path.write_text(example.yaml)
        for body in load_job_file(path):
            answer = offline.post("/api/v1/jobs", json=body)
            assert answer.status_code == 503, (example.title, answer.text)
            seen += 1
    assert seen == len(reference.example_jobs()) >= len(reference.EXAMPLES)


@pytest.mark.parametrize(
    ("job", "where"),
    [
        ({"name": "x"}, "'schedule' is a required property"),
        ({"name": "x", "schedule": {"type": "hourly"}}, "'hourly' is not one of"),
        ({"name": "x", "schedule": {"type": "manual"}, "comand": ["true"]}, "'comand'"),
        (
            {"name": "x", "schedule": {"type": "manual"}, "retry_policy": {"max_attempts": 0}},
            "0 is less than the minimum of 1",
        ),
    ],
)
def test_the_schema_refuses_what_the_api_refuses(job: dict[str, object], where: str) -> None:
    with pytest.raises(jsonschema.ValidationError, match=where):
        jsonschema.Draft202012Validator(reference.schema()).validate(job)


def test_the_schema_takes_the_clis_run_in_s() -> None:
    job = {"name": "soon", "schedule": {"type": "once", "run_in_s": 15}, "command": ["true"]}
    jsonschema.Draft202012Validator(reference.schema()).validate(job)


def test_the_reference_and_the_shipped_examples_match_the_schema() -> None:
    validator = jsonschema.Draft202012Validator(reference.schema())
    for job in reference.example_jobs():
        validator.validate(job)
    files = sorted((reference.ROOT / "examples").glob("*.yaml"))
    assert files
    for path in files:
        for body in load_job_file(path):
            validator.validate(body)
