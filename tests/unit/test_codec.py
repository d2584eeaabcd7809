"""The Avro codec: framing, error reasons, Confluent framing, and the schema evolution rule."""

from __future__ import annotations

import dataclasses
import io
import json
import shutil
import typing
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.read import SchemaResolutionError
from fastavro.schema import fingerprint, load_schema, to_parsing_canonical_form
from fastavro.utils import generate_many
from fastavro.validation import validate

from cronlog.commands import ClaimTask, Command, Envelope, PauseJob, RegisterJob
from cronlog.errors import CronlogError
from cronlog.events import Event, RunEvent, RunSucceeded, TaskReady
from cronlog.model import JobSpec, RetryPolicy, Schedule, ScheduleKind, main_task
from topology.wire.codec import (
    SCHEMA_DIR,
    Codec,
    DeadLetter,
    DecodeError,
    EncodeError,
    KafkaHeader,
    RegistryUnavailable,
    decode_command,
    decode_dead_letter,
    decode_event,
    decode_heartbeat,
    encode_command,
    encode_dead_letter,
    encode_event,
    encode_heartbeat,
    schema_fingerprint,
)
from topology.wire.heartbeats import HeldLease, WorkerHeartbeat

HISTORY = SCHEMA_DIR / "history"
NOW = datetime(2025, 3, 30, 1, 30, 0, 250_000, tzinfo=UTC)
SPEC = JobSpec(
    "nightly", Schedule(ScheduleKind.CRON, "0 2 * * *", "Europe/Paris"), main_task(("true",))
)
ENV = Envelope(idem_key="idem-1", job_id="job-1", command=RegisterJob(spec=SPEC))
EVENT = RunEvent(
    event_id="e1",
    job_id="job-1",
    at=NOW,
    idem_key="idem-1",
    index=0,
    event=TaskReady(run_id="r1", task="main", attempt=1, scheduled_for=NOW),
)
HEARTBEAT = WorkerHeartbeat(
    worker_id="host-1-42",
    host="host-1",
    pid=42,
    slots=4,
    free_slots=2,
    leases=(HeldLease("r1", "main", 1, 3), HeldLease("r2", "load", 2, 7)),
    started_at=NOW - timedelta(minutes=5),
    at=NOW,
    ttl=timedelta(seconds=6),
)


def _load(path: Path) -> typing.Any:
    """A schema file with the named types it refers to inlined (fastavro's load_schema)."""
    return load_schema(str(path))


def _current(name: str) -> typing.Any:
    return _load(SCHEMA_DIR / f"cronlog.{name}.avsc")


def _raw(path: Path) -> typing.Any:
    return json.loads(path.read_text())


def _read(
    body: bytes, writer: typing.Any, reader: typing.Any = None, return_record_name: bool = False
) -> typing.Any:
    return schemaless_reader(
        io.BytesIO(body), writer, reader, return_record_name=return_record_name
    )


def _avro_body(schema: typing.Any, datum: typing.Any) -> bytes:
    out = io.BytesIO()
    schemaless_writer(out, schema, datum)
    return out.getvalue()


# -- framing ---------------------------------------------------------------------------------


def _spec_crc64(data: bytes) -> int:
    """CRC-64-AVRO exactly as the Avro spec's reference code ("Schema Fingerprints")."""
    empty = 0xC15D213AA4D7A795
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (empty & -(fp & 1))
        table.append(fp)
    fp = empty
    for byte in data:
        fp = (fp >> 8) ^ table[(fp ^ byte) & 0xFF]
    return fp


def test_crc64_of_null_matches_the_avro_test_vector() -> None:
    # share/test/data/schema-tests.txt in the Avro repo: "null" -> 7195948357588979594.
    assert schema_fingerprint("null") == (7195948357588979594).to_bytes(8, "little")


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("Command", encode_command(ENV)),
        ("RunEvent", encode_event(EVENT)),
        ("DeadLetter", encode_dead_letter(DeadLetter("t", 0, 1, None, b"", "X", "y", NOW))),
    ],
)
def test_header_is_c301_and_little_endian_crc64_of_the_canonical_form(
    name: str, data: bytes
) -> None:
    canonical = to_parsing_canonical_form(_current(name))
    assert data[:2] == b"\xc3\x01"
    assert data[2:10] == bytes.fromhex(fingerprint(canonical, "CRC-64-AVRO"))
    assert data[2:10] == _spec_crc64(canonical.encode()).to_bytes(8, "little")


def test_body_is_plain_avro_any_reader_can_read() -> None:
    body = _read(encode_event(EVENT)[10:], _current("RunEvent"), return_record_name=True)
    assert body == {
        "event_id": "e1",
        "job_id": "job-1",
        "at": NOW,
        "idem_key": "idem-1",
        "index": 0,
        "body": (
            "cronlog.TaskReady",
            {"run_id": "r1", "task": "main", "attempt": 1, "scheduled_for": NOW},
        ),
    }


def test_timedeltas_travel_as_whole_milliseconds_in_ms_fields() -> None:
    body = _read(encode_command(ENV)[10:], _current("Command"))
    spec = body["body"]["spec"]
    assert spec["timeout_ms"] == 3_600_000
    assert spec["lease_ttl_ms"] == 60_000
    assert spec["schedule"]["catchup_window_ms"] == 86_400_000
    assert spec["schedule"]["kind"] == "cron"


def test_instants_are_floored_to_milliseconds_and_come_back_aware_utc() -> None:
    ev = RunEvent(
        event_id="e",
        job_id="j",
        at=datetime(2025, 1, 1, 0, 0, 0, 1_999, tzinfo=UTC),
        idem_key="k",
        index=0,
        event=RunSucceeded(run_id="r"),
    )
    out = decode_event(encode_event(ev))
    assert out.at == datetime(2025, 1, 1, 0, 0, 0, 1_000, tzinfo=UTC)
    assert out.at.utcoffset() == timedelta(0)


def test_round_trip_of_each_envelope_kind() -> None:
    assert decode_command(encode_command(ENV)) == ENV
    assert decode_command(
        encode_command(Envelope(idem_key="k", job_id="j", command=PauseJob()))
    ) == Envelope(idem_key="k", job_id="j", command=PauseJob())
    assert decode_event(encode_event(EVENT)) == EVENT
    dl = DeadLetter(
        "cronlog.commands",
        3,
        42,
        b"job-1",
        b"\x00junk",
        "DecodeError",
        "bad magic",
        NOW,
        NOW - timedelta(seconds=1),
        (KafkaHeader("trace", b"abc"), KafkaHeader("empty", None)),
    )
    assert decode_dead_letter(encode_dead_letter(dl)) == dl
    assert decode_heartbeat(encode_heartbeat(HEARTBEAT)) == HEARTBEAT
    idle = dataclasses.replace(HEARTBEAT, free_slots=4, leases=())
    assert decode_heartbeat(encode_heartbeat(idle)) == idle


# -- errors ----------------------------------------------------------------------------------


def _reason(decode: typing.Callable[[bytes], object], data: bytes) -> str:
    with pytest.raises(DecodeError) as info:
        decode(data)
    return info.value.reason


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", "bad magic (empty)"),
        (b'{"json": 1}', "bad magic 7b22"),
        (b"\xc3\x01\x00", "truncated header"),
        (b"\xc3\x01" + bytes(8), "unknown fingerprint 0000000000000000"),
        (b"\x00\x00\x00", "truncated Confluent header"),
        (b"\x00\x00\x00\x00\x07body", "no schema registry is configured"),
        (encode_event(EVENT), "record is a cronlog.RunEvent, expected a cronlog.Command"),
        (
            encode_heartbeat(HEARTBEAT),
            "record is a cronlog.WorkerHeartbeat, expected a cronlog.Command",
        ),
        (encode_command(ENV)[:-1], "truncated cronlog.Command body"),
        (encode_command(ENV) + b"\x00", "1 trailing bytes after the cronlog.Command body"),
    ],
)
def test_bad_bytes_are_a_decode_error_naming_the_problem(data: bytes, expected: str) -> None:
    assert expected in _reason(decode_command, data)


def test_unknown_enum_value_names_the_field_and_the_allowed_values() -> None:
    schema = _current("Command")
    body = _avro_body(
        schema,
        {
            "idem_key": "k",
            "job_id": "j",
            "body": (
                "cronlog.RegisterJob",
                {
                    "spec": {
                        "name": "n",
                        "schedule": {
                            "kind": "hourly",
                            "expression": None,
                            "timezone": "UTC",
                            "run_at": None,
                            "catchup": "latest",
                            "catchup_window_ms": 1,
                        },
                        "command": ["true"],
                        "timeout_ms": 1,
                        "lease_ttl_ms": 1,
                        "tasks": ["main"],
                        "retry_policy": {
                            "max_attempts": 1,
                            "backoff_ms": 1,
                            "backoff_coefficient": 2.0,
                            "max_backoff_ms": 1,
                        },
                    }
                },
            ),
        },
    )
    reason = _reason(decode_command, encode_command(ENV)[:10] + body)
    assert reason == (
        "invalid value 'hourly' for Schedule.kind (allowed: cron, once, manual, every, after)"
    )


def test_invalid_utf8_is_a_decode_error() -> None:
    data = encode_event(EVENT)
    assert data[10:13] == b"\x04e1"  # event_id "e1": zigzag length 2, then the bytes
    bad = data[:11] + b"\xff" + data[12:]
    assert _reason(decode_event, bad) == "invalid UTF-8 in a string of the cronlog.RunEvent body"


def test_non_bytes_input_is_a_decode_error() -> None:
    assert "expected bytes" in _reason(decode_event, typing.cast(bytes, "text"))


def test_naive_datetime_is_an_encode_error_naming_the_field() -> None:
    naive = RunEvent(
        event_id="e",
        job_id="j",
        at=datetime(2025, 1, 1),
        idem_key="k",
        index=0,
        event=RunSucceeded(run_id="r"),
    )
    with pytest.raises(EncodeError, match=r"RunEvent\.at="):
        encode_event(naive)


def test_int_beyond_64_bits_is_an_encode_error() -> None:
    with pytest.raises(EncodeError):
        encode_command(
            Envelope(
                idem_key="k",
                job_id="j",
                command=ClaimTask(run_id="r", task="t", attempt=2**64, worker_id="w"),
            )
        )


def test_wrong_envelope_type_is_an_encode_error() -> None:
    with pytest.raises(EncodeError, match="expected Envelope"):
        encode_command(typing.cast(Envelope, EVENT))


def test_codec_refuses_a_schema_that_drifted_from_its_dataclass(tmp_path: Path) -> None:
    shutil.copytree(SCHEMA_DIR, tmp_path, dirs_exist_ok=True)
    path = tmp_path / "cronlog.TaskReady.avsc"
    raw = _raw(path)
    raw["fields"][1]["name"] = "task_name"
    path.write_text(json.dumps(raw))
    with pytest.raises(CronlogError, match=r"schema drift: cronlog\.TaskReady"):
        Codec(tmp_path)


# -- older writers: fingerprint -> writer schema, resolved against the current one ------------


def _without_fields(path: Path, *names: str) -> None:
    raw = _raw(path)
    raw["fields"] = [f for f in raw["fields"] if f["name"] not in names]
    path.write_text(json.dumps(raw))


def test_records_of_an_older_version_decode_with_current_defaults(tmp_path: Path) -> None:
    # A pretend "v0" lacking fields that v1 added with defaults.
    shutil.copytree(SCHEMA_DIR, tmp_path, dirs_exist_ok=True)
    v0 = tmp_path / "history" / "v0"
    v0.mkdir()
    for path in SCHEMA_DIR.glob("*.avsc"):
        shutil.copy(path, v0)
    _without_fields(v0 / "cronlog.JobSpec.avsc", "retry_policy", "tasks", "timeout_ms")
    _without_fields(v0 / "cronlog.Schedule.avsc", "catchup_window_ms", "catchup")
    _without_fields(v0 / "cronlog.DeadLetter.avsc", "headers", "source_record_at")
    _without_fields(v0 / "cronlog.WorkerHeartbeat.avsc", "leases")
    codec = Codec(tmp_path)

    old_cmd = _load(v0 / "cronlog.Command.avsc")
    spec = {
        "name": "n",
        "schedule": {"kind": "cron", "expression": "* * * * *", "timezone": "UTC", "run_at": None},
        "command": ["true"],
        "lease_ttl_ms": 5000,
    }
    data = (
        b"\xc3\x01"
        + schema_fingerprint(old_cmd)
        + _avro_body(
            old_cmd,
            {"idem_key": "k", "job_id": "j", "body": ("cronlog.RegisterJob", {"spec": spec})},
        )
    )
    expected = Envelope(
        idem_key="k",
        job_id="j",
        command=RegisterJob(
            spec=JobSpec(
                "n",
                Schedule(ScheduleKind.CRON, "* * * * *"),
                main_task(("true",)),
                lease_ttl=timedelta(seconds=5),
                retry_policy=RetryPolicy(),
            )
        ),
    )
    assert codec.decode_command(data) == expected
    assert codec.decode_command(data) == expected  # defaults are shared objects: not mutated

    old_dl = _load(v0 / "cronlog.DeadLetter.avsc")
    data = (
        b"\xc3\x01"
        + schema_fingerprint(old_dl)
        + _avro_body(
            old_dl,
            {
                "source_topic": "t",
                "partition": 1,
                "offset": 2,
                "key": None,
                "value": b"v",
                "error_type": "DecodeError",
                "reason": "r",
                "at": NOW,
            },
        )
    )
    assert codec.decode_dead_letter(data) == DeadLetter(
        "t", 1, 2, None, b"v", "DecodeError", "r", NOW, None, ()
    )

    old_hb = _load(v0 / "cronlog.WorkerHeartbeat.avsc")
    datum = {
        "worker_id": "w",
        "host": "h",
        "pid": 1,
        "slots": 2,
        "free_slots": 2,
        "started_at": NOW,
        "at": NOW,
        "ttl_ms": 6000,
    }
    data = b"\xc3\x01" + schema_fingerprint(old_hb) + _avro_body(old_hb, datum)
    assert codec.decode_heartbeat(data) == WorkerHeartbeat(
        "w", "h", 1, 2, 2, (), NOW, NOW, timedelta(seconds=6)
    )


# -- Confluent framing -----------------------------------------------------------------------


@dataclass
class _Registered:
    schema_str: str
    references: list[_Ref] = field(default_factory=list)


@dataclass
class _Ref:
    name: str
    subject: str
    version: int


@dataclass
class _Version:
    schema: _Registered


class _NotFound(Exception):
    http_status_code = 404


class _InMemoryRegistry:
    """The two SchemaRegistryClient calls the decoder makes, over a dict."""

    def __init__(self) -> None:
        self.by_id: dict[int, _Registered] = {}
        self.by_subject: dict[tuple[str, int], _Registered] = {}
        self.down = False

    def get_schema(self, schema_id: int) -> _Registered:
        if self.down:
            raise ConnectionError("registry unreachable")
        if schema_id not in self.by_id:
            raise _NotFound(f"schema {schema_id} not found")
        return self.by_id[schema_id]

    def get_version(self, subject_name: str, version: int) -> _Version:
        return _Version(self.by_subject[(subject_name, version)])


def _named_refs(schema: object) -> list[str]:
    """Full names a raw schema refers to (strings that are not primitives)."""
    if isinstance(schema, str):
        return [schema] if schema.startswith("cronlog.") else []
    if isinstance(schema, list):
        return [n for s in schema for n in _named_refs(s)]
    if isinstance(schema, dict):
        if schema.get("type") == "record":
            return [n for f in schema["fields"] for n in _named_refs(f["type"])]
        return _named_refs(schema.get("items") or schema.get("type"))
    return []


def _register_with_references(registry: _InMemoryRegistry, name: str) -> _Registered:
    """Register a type the Confluent way: each named type its own subject, linked by refs."""
    raw = (SCHEMA_DIR / f"{name}.avsc").read_text()
    refs = [_Ref(dep, dep, 1) for dep in dict.fromkeys(_named_refs(json.loads(raw)))]
    registered = _Registered(raw, refs)
    for ref in refs:
        registry.by_subject[(ref.subject, 1)] = _register_with_references(registry, ref.name)
    return registered


def test_confluent_framing_decodes_through_the_registry_with_references() -> None:
    registry = _InMemoryRegistry()
    registry.by_id[7] = _register_with_references(registry, "cronlog.Command")
    assert registry.by_id[7].references  # really exercising references
    data = b"\x00" + (7).to_bytes(4, "big") + encode_command(ENV)[10:]
    assert Codec(registry=registry).decode_command(data) == ENV


def test_confluent_writer_with_an_unknown_branch_is_a_decode_error() -> None:
    registry = _InMemoryRegistry()
    writer = {
        "type": "record",
        "name": "cronlog.Command",
        "fields": [
            {"name": "idem_key", "type": "string"},
            {"name": "job_id", "type": "string"},
            {"name": "body", "type": [{"type": "record", "name": "cronlog.Explode", "fields": []}]},
        ],
    }
    registry.by_id[1] = _Registered(json.dumps(writer))
    data = (
        b"\x00"
        + (1).to_bytes(4, "big")
        + _avro_body(parse_schema(writer), {"idem_key": "k", "job_id": "j", "body": {}})
    )
    reason = _reason(Codec(registry=registry).decode_command, data)
    assert reason.startswith("writer schema cannot be read as the current cronlog.Command")


def test_confluent_unknown_schema_id_is_a_decode_error() -> None:
    codec = Codec(registry=_InMemoryRegistry())
    assert "schema id 9 is unknown" in _reason(codec.decode_command, b"\x00\x00\x00\x00\x09\x00")


def test_unreachable_registry_is_not_blamed_on_the_record() -> None:
    registry = _InMemoryRegistry()
    registry.down = True
    with pytest.raises(RegistryUnavailable):
        Codec(registry=registry).decode_command(b"\x00\x00\x00\x00\x09\x00")


def test_confluent_mock_registry_client_is_accepted() -> None:
    sr = pytest.importorskip(
        "confluent_kafka.schema_registry", reason="needs confluent-kafka[schemaregistry]"
    )
    client = sr.SchemaRegistryClient.new_client({"url": "mock://codec-test"})
    schema_str = json.dumps(_flat_command())
    schema_id = client.register_schema("cronlog.commands-value", sr.Schema(schema_str, "AVRO"))
    data = b"\x00" + schema_id.to_bytes(4, "big") + encode_command(ENV)[10:]
    assert Codec(registry=client).decode_command(data) == ENV


def _flat_command() -> dict[str, typing.Any]:
    """cronlog.Command with every named type inlined, without fastavro's private keys."""

    def clean(s: typing.Any) -> typing.Any:
        if isinstance(s, dict):
            return {k: clean(v) for k, v in s.items() if not k.startswith("__")}
        if isinstance(s, list):
            return [clean(v) for v in s]
        return s

    return typing.cast(dict[str, typing.Any], clean(_current("Command")))


# -- the evolution rule (schemas/README.md) ---------------------------------------------------

SCHEMA_FILES = sorted(SCHEMA_DIR.glob("*.avsc"))
SNAPSHOTS = sorted(p for p in HISTORY.iterdir() if p.is_dir())


def evolution_problems(old_dir: Path, new_dir: Path) -> list[str]:
    """Every way ``new_dir`` breaks the backward-compatibility rule against ``old_dir``."""
    problems = []
    for old_path in sorted(old_dir.glob("*.avsc")):
        new_path = new_dir / old_path.name
        if not new_path.exists():
            problems.append(f"{old_path.stem}: type removed")
            continue
        old, new = _raw(old_path), _raw(new_path)
        old_fields = {f["name"]: f for f in old["fields"]}
        new_fields = {f["name"]: f for f in new["fields"]}
        for name, f in old_fields.items():
            if name not in new_fields:
                problems.append(f"{old_path.stem}.{name}: field removed or renamed")
            elif isinstance(f["type"], list) and isinstance(new_fields[name]["type"], list):
                if gone := [b for b in f["type"] if b not in new_fields[name]["type"]]:
                    problems.append(f"{old_path.stem}.{name}: union branches removed {gone}")
            elif f["type"] != new_fields[name]["type"]:
                problems.append(f"{old_path.stem}.{name}: type changed")
        for name, f in new_fields.items():
            if name not in old_fields and "default" not in f:
                problems.append(f"{old_path.stem}.{name}: new field without a default")
    return problems


def test_at_least_one_snapshot_exists() -> None:
    assert (HISTORY / "v1" / "cronlog.RunEvent.avsc").exists()


FRAMED = ("Command", "RunEvent", "DeadLetter", "WorkerHeartbeat")
"""The records framed on topics (WorkerHeartbeat from v4 on: older snapshots lack it)."""


def _fingerprints(folder: Path) -> tuple[str, ...]:
    return tuple(
        schema_fingerprint(load_schema(str(folder / f"cronlog.{name}.avsc"))).hex()
        for name in FRAMED
        if (folder / f"cronlog.{name}.avsc").exists()
    )


def test_each_shipped_version_is_kept_once_and_the_current_one_is_new() -> None:
    # One canonical copy per shipped version: two snapshots with the same framed schemas would
    # be one version kept twice, and a snapshot equal to the current schemas a version that
    # was never changed after it shipped (the current schemas are the next, unshipped one).
    versions = [_fingerprints(p) for p in SNAPSHOTS] + [_fingerprints(SCHEMA_DIR)]
    assert len(set(versions)) == len(versions), [p.name for p in SNAPSHOTS]


@pytest.mark.parametrize("snapshot", SNAPSHOTS, ids=lambda p: p.name)
def test_current_schemas_follow_the_evolution_rule(snapshot: Path) -> None:
    assert evolution_problems(snapshot, SCHEMA_DIR) == []


def test_rule_check_catches_a_new_field_without_default(tmp_path: Path) -> None:
    shutil.copytree(SCHEMA_DIR, tmp_path, dirs_exist_ok=True)
    path = tmp_path / "cronlog.TaskReady.avsc"
    raw = _raw(path)
    raw["fields"].append({"name": "priority", "type": "long", "doc": "higher first"})
    path.write_text(json.dumps(raw))
    assert evolution_problems(HISTORY / "v1", tmp_path) == [
        "cronlog.TaskReady.priority: new field without a default"
    ]
    # ...and the reason is real: fastavro cannot read v1 data with it.
    old = _load(HISTORY / "v1" / "cronlog.TaskReady.avsc")
    body = _avro_body(old, {"run_id": "r", "task": "t", "attempt": 1, "scheduled_for": NOW})
    with pytest.raises(SchemaResolutionError):
        _read(body, old, _load(path))
    raw["fields"][-1]["default"] = 0
    path.write_text(json.dumps(raw))
    assert evolution_problems(HISTORY / "v1", tmp_path) == []


def test_rule_check_catches_removed_retyped_fields_and_branches(tmp_path: Path) -> None:
    shutil.copytree(SCHEMA_DIR, tmp_path, dirs_exist_ok=True)
    _without_fields(tmp_path / "cronlog.RunFailed.avsc", "run_id")
    path = tmp_path / "cronlog.TaskReady.avsc"
    raw = _raw(path)
    raw["fields"][2]["type"] = "string"
    path.write_text(json.dumps(raw))
    path = tmp_path / "cronlog.RunEvent.avsc"
    raw = _raw(path)
    raw["fields"][-1]["type"].remove("cronlog.RunFailed")
    path.write_text(json.dumps(raw))
    assert evolution_problems(HISTORY / "v1", tmp_path) == [
        "cronlog.RunEvent.body: union branches removed ['cronlog.RunFailed']",
        "cronlog.RunFailed.run_id: field removed or renamed",
        "cronlog.TaskReady.attempt: type changed",
    ]


def _old_and_new(snapshot: Path, path: Path) -> tuple[typing.Any, typing.Any]:
    return _load(path), _load(SCHEMA_DIR / path.name)


@pytest.mark.parametrize(
    "path",
    [p for s in SNAPSHOTS for p in sorted(s.glob("*.avsc"))],
    ids=lambda p: f"{p.parent.name}/{p.stem}",
)
def test_current_schema_reads_data_written_with_the_snapshot(path: Path) -> None:
    old, new = _old_and_new(path.parent, path)
    for datum in generate_many(old, 20):
        assert _read(_avro_body(old, datum), old, new) is not None


@pytest.mark.parametrize(
    ("snapshot", "envelope"),
    [(s, e) for s in SNAPSHOTS for e in ("Command", "RunEvent")],
    ids=lambda v: getattr(v, "name", v),
)
def test_every_old_body_branch_resolves_into_the_current_envelope(
    snapshot: Path, envelope: str
) -> None:
    old, new = _old_and_new(snapshot, snapshot / f"cronlog.{envelope}.avsc")
    for branch in _raw(snapshot / f"cronlog.{envelope}.avsc")["fields"][-1]["type"]:
        body = next(generate_many(_load(snapshot / f"{branch}.avsc"), 1))
        datum = {**next(generate_many(old, 1)), "body": (branch, body)}
        read = _read(_avro_body(old, datum), old, new, return_record_name=True)
        assert read["body"][0] == branch


# -- the files themselves ---------------------------------------------------------------------


@pytest.mark.parametrize("path", SCHEMA_FILES, ids=lambda p: p.stem)
def test_schema_file_is_one_documented_cronlog_record(path: Path) -> None:
    raw = _raw(path)
    assert raw["type"] == "record"
    assert raw["namespace"] == "cronlog"
    assert path.name == f"cronlog.{raw['name']}.avsc"
    assert raw["doc"].strip()
    for f in raw["fields"]:
        assert f.get("doc", "").strip(), f"{path.stem}.{f['name']} has no doc"


@pytest.mark.parametrize("path", SCHEMA_FILES, ids=lambda p: p.stem)
def test_defaults_are_valid_values_of_their_field_type(path: Path) -> None:
    full = _load(path)
    for f in full["fields"]:
        if "default" in f:
            # Avro spec: a union's default belongs to its first branch.
            type_ = f["type"][0] if isinstance(f["type"], list) else f["type"]
            if f["default"] == [] and isinstance(type_, dict) and type_["type"] == "array":
                continue  # valid for any array; parsing a fragment that inlines a record
                # referring to a type defined earlier in the file trips fastavro (UnknownType)
            parsed = parse_schema(type_, named_schemas=dict(full["__named_schemas"]))
            assert validate(f["default"], parsed, strict=True), f["name"]


def test_every_body_type_has_a_schema_and_a_union_branch() -> None:
    for union, envelope in ((Command, "Command"), (Event, "RunEvent")):
        branches = _raw(SCHEMA_DIR / f"cronlog.{envelope}.avsc")["fields"][-1]["type"]
        assert branches == [f"cronlog.{cls.__name__}" for cls in typing.get_args(union)]


def _zero_byte_items(schema: typing.Any, named: dict[str, typing.Any]) -> list[str]:
    if isinstance(schema, str):
        return []
    if isinstance(schema, list):
        return [n for s in schema for n in _zero_byte_items(s, named)]
    if schema.get("type") == "array":
        items = schema["items"]
        items = named.get(items, items) if isinstance(items, str) else items
        if isinstance(items, dict) and items.get("type") == "record" and not items["fields"]:
            return [items["name"]]
        return _zero_byte_items(items, named)
    if schema.get("type") == "record":
        return [n for f in schema["fields"] for n in _zero_byte_items(f["type"], named)]
    return []


@pytest.mark.parametrize("name", FRAMED)
def test_no_array_of_items_that_encode_to_zero_bytes(name: str) -> None:
    full = _current(name)
    assert _zero_byte_items(full, full["__named_schemas"]) == []


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_a_non_finite_number_is_a_decode_error_naming_the_field(bad: float) -> None:
    # Avro doubles can carry NaN/inf (a flipped bit, a foreign producer); no cronlog number
    # may be one: a NaN backoff_coefficient would pass `< 1.0` checks and crash the fold.
    policy = dataclasses.replace(SPEC.retry_policy, jitter=bad)
    data = encode_command(
        Envelope(
            idem_key="k",
            job_id="j",
            command=RegisterJob(spec=dataclasses.replace(SPEC, retry_policy=policy)),
        )
    )
    assert _reason(decode_command, data) == f"non-finite number {bad!r} for RetryPolicy.jitter"
