"""Telling a run-event's event from its first bytes (``Codec.event_name``), every schema version."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastavro import schemaless_writer
from fastavro.schema import load_schema
from fastavro.utils import generate_many

from cronlog import events as ev
from topology.wire.codec import SCHEMA_DIR, SINGLE_OBJECT_MAGIC, Codec, schema_fingerprint
from topology.wire.peek import body_branches, body_index

EVENT = ev.RunEvent(
    event_id="e1",
    job_id="job-1",
    at=datetime(2025, 3, 30, 1, 30, tzinfo=UTC),
    idem_key="idem-1",
    index=0,
    event=ev.TaskReady(
        run_id="r1", task="main", attempt=1, scheduled_for=datetime(2025, 3, 30, 1, 30, tzinfo=UTC)
    ),
)

VERSIONS = [SCHEMA_DIR, *sorted(p for p in (SCHEMA_DIR / "history").iterdir() if p.is_dir())]
CODEC = Codec()


def _framed(schema: object, datum: object) -> bytes:
    out = io.BytesIO(SINGLE_OBJECT_MAGIC + schema_fingerprint(schema))
    out.seek(0, io.SEEK_END)
    schemaless_writer(out, schema, datum)
    return out.getvalue()


@pytest.mark.parametrize("version", VERSIONS, ids=lambda p: p.name)
def test_every_body_branch_of_every_version_is_named_without_decoding(version: Path) -> None:
    path = version / "cronlog.RunEvent.avsc"
    schema = load_schema(str(path))
    branches = json.loads(path.read_text())["fields"][-1]["type"]
    for branch in branches:
        body = next(generate_many(load_schema(str(version / f"{branch}.avsc")), 1))
        for datum in generate_many(schema, 3):  # random ids and lengths before the body
            data = _framed(schema, {**datum, "body": (branch, body)})
            assert CODEC.event_name(data) == branch


def test_the_current_encoding_of_an_event_is_named_as_its_class() -> None:
    data = CODEC.encode_event(EVENT)
    assert CODEC.event_name(data) == f"cronlog.{type(EVENT.event).__name__}"
    assert isinstance(CODEC.decode_event(data).event, ev.Event)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00\x00\x00\x00\x07" + b"\x02a",  # Confluent framing: only a decode can tell
        SINGLE_OBJECT_MAGIC + b"\x01" * 8 + b"\x02a",  # unknown fingerprint
        CODEC.encode_event(EVENT)[:14],  # truncated before the union index
    ],
    ids=["empty", "confluent", "unknown-fingerprint", "truncated"],
)
def test_records_that_cannot_be_told_cheaply_are_left_to_the_decoder(data: bytes) -> None:
    assert CODEC.event_name(data) is None


def test_a_negative_string_length_is_not_peeked() -> None:
    assert body_index(b"\x01", 0) is None  # zig-zag 1 == -1


def test_a_schema_of_another_layout_is_not_peekable() -> None:
    schema = {"type": "record", "name": "X", "fields": [{"name": "a", "type": "int"}]}
    assert body_branches(schema) is None
