"""Property tests of the Avro codec: every type round-trips; hostile bytes give DecodeError only;
a command the codec accepts never makes the fold send a message past the producers' limit."""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from enum import StrEnum

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cronlog import commands as cmd
from cronlog import limits
from cronlog.commands import Command, Envelope, Tick
from cronlog.events import Event, JobPaused, RunEvent
from cronlog.ids import run_id_for_trigger
from cronlog.limits import COMMAND_LIMITS
from cronlog.model import JobSpec, Schedule, ScheduleKind, TaskSpec
from cronlog.time import duration_ms, from_ms, ms_duration, to_ms
from topology.fold.due_index import DueIndex
from topology.fold.folder import BatchFolder, Record
from topology.kafka.config import KafkaSettings
from topology.kafka.partitioning import partition_for
from topology.kafka.topics import Topics
from topology.wire.avro_mapping import avro_name
from topology.wire.codec import (
    DeadLetter,
    DecodeError,
    decode_command,
    decode_dead_letter,
    decode_event,
    decode_heartbeat,
    default_codec,
    encode_command,
    encode_dead_letter,
    encode_event,
    encode_heartbeat,
)
from topology.wire.heartbeats import WorkerHeartbeat

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
INSTANTS = st.integers(
    min_value=to_ms(datetime.min.replace(tzinfo=UTC)),
    max_value=to_ms(datetime.max.replace(tzinfo=UTC)),
).map(from_ms)
"""Aware UTC datetimes at millisecond precision, over the whole range Python can hold."""
DURATIONS = st.integers(
    min_value=duration_ms(timedelta.min), max_value=duration_ms(timedelta.max)
).map(ms_duration)
"""Timedeltas in whole milliseconds, negative ones included."""
INT32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)


def _avro_int_fields() -> frozenset[tuple[str, str]]:
    """``(record, field)`` of every field the schemas declare ``int`` (32-bit) or nullable
    ``int``: their values come from validated definitions, within 32 bits."""
    import json as _json

    from topology.wire.codec import SCHEMA_DIR

    out = set()
    for path in SCHEMA_DIR.glob("*.avsc"):
        schema = _json.loads(path.read_text())
        for f in schema.get("fields", []):
            if f["type"] == "int" or f["type"] == ["null", "int"]:
                out.add((schema["name"], f["name"]))
    return frozenset(out)


AVRO_INTS = _avro_int_fields()
SCALARS: dict[object, st.SearchStrategy[typing.Any]] = {
    str: st.text(max_size=30),
    int: INT64,
    bool: st.booleans(),
    float: st.floats(allow_nan=False, allow_infinity=False),  # the codec refuses both
    bytes: st.binary(max_size=40),
    datetime: INSTANTS,
    timedelta: DURATIONS,
}


def strategy_for(tp: object) -> st.SearchStrategy[typing.Any]:
    """A strategy for any type the codec maps, built from the type hint alone."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (types.UnionType, typing.Union):
        return st.one_of([strategy_for(a) for a in args])
    if tp is type(None):
        return st.none()
    if tp in SCALARS:
        return SCALARS[tp]
    if isinstance(tp, type) and issubclass(tp, StrEnum):
        return st.sampled_from(list(tp))
    if origin is tuple:
        return st.lists(strategy_for(args[0]), max_size=4).map(tuple)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        record = avro_name(tp).rpartition(".")[2] if _mapped(tp) else ""
        return st.builds(
            tp,
            **{
                f.name: (
                    _int32(hints[f.name])
                    if (record, f.name) in AVRO_INTS
                    else strategy_for(hints[f.name])
                )
                for f in dataclasses.fields(tp)
            },
        )
    raise TypeError(f"no strategy for {tp!r}")


def _mapped(tp: type) -> bool:
    try:
        avro_name(tp)
    except Exception:  # a dataclass the codec names otherwise
        return False
    return True


def _int32(tp: object) -> st.SearchStrategy[typing.Any]:
    return INT32 if tp is int else st.one_of(st.none(), INT32)


def command_strategy_for(
    tp: object, key: str = "", *, big: bool = False
) -> st.SearchStrategy[typing.Any]:
    """A strategy for a command type whose values keep to ``cronlog/limits.py``.

    Args:
        tp: a type hint of a command record or field.
        key: the field's ``"<Avro record>.<field>"`` key in ``COMMAND_LIMITS``.
        big: strings and arrays are often exactly at their limits (strings of 1- to 4-byte
            characters); else short, as in ``strategy_for``.
    """
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (types.UnionType, typing.Union):
        return st.one_of([command_strategy_for(a, key, big=big) for a in args])
    limit = COMMAND_LIMITS.get(key, limits.Limit())
    if tp is str and limit.token:
        return _token(typing.cast(int, limit.chars), big, limit.empty)
    if tp is str:
        return _text(typing.cast(int, limit.chars), big)
    if tp is int:
        return st.integers(limit.low, limit.high)
    if tp is datetime:
        return st.integers(limits.EARLIEST_MS, limits.LATEST_MS).map(from_ms)
    if tp is timedelta:
        return st.integers(0, limits.MAX_DURATION_MS).map(ms_duration)
    if origin is tuple:
        return _array(args[0], limit, big)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        record = avro_name(tp).rpartition(".")[2]
        hints = typing.get_type_hints(tp)
        return st.builds(
            tp,
            **{
                f.name: command_strategy_for(hints[f.name], f"{record}.{f.name}", big=big)
                for f in dataclasses.fields(tp)
            },
        )
    return strategy_for(tp)  # None, bool, float, enums: bounded by their type


WIDTHS = ["a", "é", "\u20ac", "\U0001f600", "\U000e0001"]
"""Characters of 1 to 4 UTF-8 bytes (the last one printed by repr() as 10 characters)."""


def _text(cap: int, big: bool) -> st.SearchStrategy[str]:
    short = st.text(max_size=min(cap, 30))
    return st.one_of(short, st.sampled_from(WIDTHS).map(lambda c: c * cap)) if big else short


ID_ALPHABET = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) not in '"\\')
"""``cronlog.limits.ID_CHARS``: what an identifier field may hold."""


def _token(cap: int, big: bool, empty: bool) -> st.SearchStrategy[str]:
    short = st.text(ID_ALPHABET, min_size=0 if empty else 1, max_size=min(cap, 30))
    return st.one_of(short, st.sampled_from("!~0Z").map(lambda c: c * cap)) if big else short


def _array(
    item: object, limit: limits.Limit, big: bool
) -> st.SearchStrategy[tuple[typing.Any, ...]]:
    cap = typing.cast(int, limit.items)
    items: st.SearchStrategy[typing.Any]
    repeated: st.SearchStrategy[typing.Any]
    if item is str:
        items = repeated = _text(limit.chars or (limit.total_chars or 0) // cap, big)
    elif item is int:
        items = repeated = st.integers(limit.low, limit.high)
    else:  # records, enums, instants: a full array repeats a small item (else ~100 MB records)
        items, repeated = command_strategy_for(item, big=big), command_strategy_for(item)
    short = st.lists(items, max_size=min(cap, 4)).map(tuple)
    if not big:
        return short
    full = repeated.map(lambda x: (x,) * cap)
    if limit.total_chars is None:
        return st.one_of(short, full)
    return st.one_of(short, full, _text(limit.total_chars, big).map(lambda x: (x,)))


def assert_identical(got: object, want: object, path: str = "") -> None:
    """Equality, plus same types all the way down (a str is not a StrEnum, a list not a tuple)."""
    assert type(got) is type(want), f"{path}: {type(got).__name__} != {type(want).__name__}"
    if dataclasses.is_dataclass(want):
        for f in dataclasses.fields(want):
            assert_identical(getattr(got, f.name), getattr(want, f.name), f"{path}.{f.name}")
    elif isinstance(want, tuple):
        assert len(typing.cast(tuple[object, ...], got)) == len(want), path
        for i, (g, w) in enumerate(zip(typing.cast(tuple[object, ...], got), want, strict=True)):
            assert_identical(g, w, f"{path}[{i}]")
    elif isinstance(want, datetime):
        assert typing.cast(datetime, got).utcoffset() == timedelta(0), path
        assert got == want, path
    else:
        assert got == want, path


COMMAND_TYPES = typing.get_args(Command)
EVENT_TYPES = typing.get_args(Event)
TEXT = st.text(max_size=30)


def envelopes(body: st.SearchStrategy[typing.Any]) -> st.SearchStrategy[Envelope]:
    return st.builds(
        Envelope, idem_key=TEXT, job_id=st.text(ID_ALPHABET, max_size=30), command=body
    )


def run_events(body: st.SearchStrategy[typing.Any]) -> st.SearchStrategy[RunEvent]:
    return st.builds(
        RunEvent, event_id=TEXT, job_id=TEXT, at=INSTANTS, idem_key=TEXT, index=INT64, event=body
    )


@pytest.fixture(scope="module", autouse=True)
def _warm_codec() -> None:
    default_codec()  # load the schemas once, outside hypothesis' deadline


# -- round trips -----------------------------------------------------------------------------


@pytest.mark.parametrize("cls", COMMAND_TYPES, ids=lambda c: c.__name__)
@given(data=st.data())
def test_every_command_round_trips(cls: type, data: st.DataObject) -> None:
    env = data.draw(envelopes(command_strategy_for(cls)))
    assert_identical(decode_command(encode_command(env)), env)


@pytest.mark.parametrize("cls", EVENT_TYPES, ids=lambda c: c.__name__)
@given(data=st.data())
def test_every_event_round_trips(cls: type, data: st.DataObject) -> None:
    ev = data.draw(run_events(strategy_for(cls)))
    assert_identical(decode_event(encode_event(ev)), ev)


@given(dl=strategy_for(DeadLetter))
def test_dead_letter_round_trips(dl: DeadLetter) -> None:
    assert_identical(decode_dead_letter(encode_dead_letter(dl)), dl)


@given(hb=strategy_for(WorkerHeartbeat))
def test_worker_heartbeat_round_trips(hb: WorkerHeartbeat) -> None:
    assert_identical(decode_heartbeat(encode_heartbeat(hb)), hb)


# -- fuzz: anything but a valid record is a DecodeError, never another exception --------------

DECODERS: dict[str, Callable[[bytes], object]] = {
    "command": decode_command,
    "event": decode_event,
    "dead_letter": decode_dead_letter,
    "heartbeat": decode_heartbeat,
}
HEADERS = [  # magic + fingerprint of each current schema: fuzz reaches the Avro body reader
    encode_command(Envelope(idem_key="k", job_id="j", command=Tick()))[:10],
    encode_event(
        RunEvent(event_id="e", job_id="j", at=from_ms(0), idem_key="k", index=0, event=JobPaused())
    )[:10],
    encode_dead_letter(DeadLetter("t", 0, 0, None, b"", "E", "r", from_ms(0)))[:10],
    encode_heartbeat(
        WorkerHeartbeat("w", "h", 1, 1, 1, (), from_ms(0), from_ms(0), timedelta(seconds=6))
    )[:10],
]
VALID = st.one_of(
    envelopes(command_strategy_for(Command)).map(encode_command),
    run_events(strategy_for(Event)).map(encode_event),
    strategy_for(DeadLetter).map(encode_dead_letter),
    strategy_for(WorkerHeartbeat).map(encode_heartbeat),
)
FUZZ = settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])


def decodes_or_refuses(decode: Callable[[bytes], object], data: bytes) -> object | None:
    """Return the decoded value, or None after a DecodeError; any other exception fails."""
    try:
        return decode(data)
    except DecodeError as exc:
        assert exc.reason
        return None


@FUZZ
@given(data=st.binary(max_size=200))
def test_random_bytes_are_a_decode_error(data: bytes) -> None:
    for decode in DECODERS.values():
        decodes_or_refuses(decode, data)


@FUZZ
@given(header=st.sampled_from(HEADERS), body=st.binary(max_size=200))
def test_a_valid_header_with_random_body_decodes_or_is_a_decode_error(
    header: bytes, body: bytes
) -> None:
    for decode in DECODERS.values():
        decodes_or_refuses(decode, header + body)


@FUZZ
@given(data=VALID, st_cut=st.data())
def test_every_truncation_of_a_valid_record_is_a_decode_error(
    data: bytes, st_cut: st.DataObject
) -> None:
    cut = st_cut.draw(st.integers(min_value=0, max_value=len(data) - 1))
    for decode in DECODERS.values():
        with pytest.raises(DecodeError):
            decode(data[:cut])


@FUZZ
@given(data=VALID, st_flip=st.data())
def test_a_bit_flip_decodes_to_something_encodable_or_is_a_decode_error(
    data: bytes, st_flip: st.DataObject
) -> None:
    bit = st_flip.draw(st.integers(min_value=0, max_value=len(data) * 8 - 1))
    flipped = bytearray(data)
    flipped[bit // 8] ^= 1 << (bit % 8)
    encoders: dict[str, Callable[[typing.Any], bytes]] = {
        "command": encode_command,
        "event": encode_event,
        "dead_letter": encode_dead_letter,
        "heartbeat": encode_heartbeat,
    }
    for kind, decode in DECODERS.items():
        value = decodes_or_refuses(decode, bytes(flipped))
        if value is not None:  # Avro has no checksum: a flip may yield another valid record
            assert decode(encoders[kind](value)) == value


# -- a command the codec accepts never makes the fold send a message too large (issue 11) -------

BUDGET = 900_000
"""Largest message the fold may send, bytes (value + key): well under message.max.bytes."""
N = 4
TOPICS = Topics.of(KafkaSettings(partitions=N))
JOB = "\U0001f600" * limits.MAX_JOB_ID_CHARS


@functools.cache
def _world() -> dict[str, bytes]:
    """The store after registering a DAG job, triggering a run and claiming its first task."""
    spec = JobSpec(
        "dag",
        Schedule(ScheduleKind.MANUAL),
        task_specs=(TaskSpec("a", ("true",)), TaskSpec("b", ("true",), depends_on=("a",))),
    )
    run = run_id_for_trigger(JOB, "t")
    store: dict[str, bytes] = {}
    steps: list[tuple[str, Command]] = [
        ("r", cmd.RegisterJob(spec=spec)),
        ("t", cmd.TriggerJob()),
        ("c", cmd.ClaimTask(run_id=run, task="a", attempt=1, worker_id="w")),
    ]
    for i, (key, command) in enumerate(steps):
        env = Envelope(idem_key=key, job_id=JOB, command=command)
        out = _folder(store).fold([_record(i, env)])
        store.update({j: w.value for j, w in out.writes.items()})
    return store


def _folder(store: dict[str, bytes]) -> BatchFolder:
    due = DueIndex()
    due.reset(range(N))
    return BatchFolder(TOPICS, N, lambda _p, job: store.get(job), due, default_codec())


def _record(offset: int, env: Envelope) -> Record:
    key = env.job_id.encode()
    return Record(partition_for(key, N), offset, 1_772_366_400_000, key, encode_command(env))


SIZES = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.mark.parametrize("cls", COMMAND_TYPES, ids=lambda c: c.__name__)
@SIZES
@given(data=st.data())
def test_a_command_the_codec_accepts_folds_to_messages_under_the_size(
    cls: type, data: st.DataObject
) -> None:
    idem_key = data.draw(_text(limits.MAX_IDEM_KEY_CHARS, big=True))
    body: Command = data.draw(command_strategy_for(cls, big=True))
    env = Envelope(idem_key=idem_key, job_id=JOB, command=body)
    world = dict(_world())
    out = _folder(world).fold([_record(9, env)])
    letters = [m for m in out.sends if m.topic == TOPICS.dead_letters]
    assert out.commands == 1 or letters  # decoded and decided, or refused by the codec
    for message in out.sends:
        assert len(message.value) + len(message.key or b"") < BUDGET, message.topic
