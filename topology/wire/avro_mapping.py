"""Frozen cronlog dataclasses <-> Avro datums (dicts as fastavro reads and writes them).

Plans are computed once per class by introspection (type hints), then run on the hot path;
``check_plan`` fails fast when a dataclass and its ``.avsc`` record disagree on field names.
Bounded plans (commands) also check ``cronlog/limits.py`` (``topology/wire/avro_limits.py``).
Unit conventions (``x_ms`` timedeltas, timestamp-millis instants, StrEnums as strings):
``schemas/README.md``. Framing and schema resolution live in ``topology/wire/codec.py``.
"""

from __future__ import annotations

import dataclasses
import math
import operator
import types
import typing
from collections.abc import Callable
from datetime import datetime, timedelta
from enum import StrEnum
from functools import cache, partial
from typing import Any

from cronlog import time as ctime
from cronlog.commands import Envelope
from cronlog.errors import CronlogError
from cronlog.events import RunEvent
from cronlog.job_level import JobLevelTask, upcast, written
from cronlog.model import JobSpec
from topology.wire import avro_limits
from topology.wire.avro_limits import OverLimit, RecordBounds

NAMESPACE = "cronlog"
Datum = Any  # an Avro datum as fastavro reads/writes it (dict, list, str, int, ...)
Converter = Callable[[Any], Any]


class DecodeError(CronlogError):
    """Bytes that are not a record this codec can read; ``reason`` says what is wrong."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class EncodeError(CronlogError):
    """A dataclass that cannot be written (naive datetime, int beyond 64 bits, ...): a bug."""


# -- the mapping --------------------------------------------------------------

_RENAMES = {(Envelope, "command"): "body", (RunEvent, "event"): "body"}
"""Envelope fields whose Avro name differs from the attribute (timedeltas get ``_ms`` apart)."""


_NAMES: dict[object, str] = {
    Envelope: f"{NAMESPACE}.Command",
    JobLevelTask: f"{NAMESPACE}.JobSpec",  # the old shape's fields of the same record
}
"""Dataclasses whose Avro record is not ``cronlog.<class name>``."""


def avro_name(tp: object) -> str:
    """Return the Avro full name of a mapped dataclass (``cronlog.<class name>`` by default)."""
    return _NAMES.get(tp) or f"{NAMESPACE}.{typing.cast(type, tp).__name__}"


class Plan:
    """How one dataclass maps to one Avro record, precomputed once per class.

    Hot path: attribute reads and dict building run in C (attrgetter, zip, itemgetter); Python
    code runs only for the fields that need a conversion.
    """

    __slots__ = (
        "attrs",
        "bounds",
        "check",
        "cls",
        "decoders",
        "encoders",
        "fields",
        "getter",
        "names",
        "picker",
    )

    def __init__(
        self,
        cls: type,
        fields: tuple[tuple[str, str, Converter | None, Converter | None], ...],
        bounds: RecordBounds | None = None,
    ) -> None:
        self.cls = cls
        self.bounds = bounds
        """The record's limit checks (bounded plans of command records), else None."""
        self.check = bounds.check if bounds is not None else None
        self.fields = fields
        """(attribute, Avro field name, encode or None, decode or None), in dataclass order."""
        self.names = tuple(name for _, name, _, _ in fields)
        self.encoders = tuple((attr, name, enc) for attr, name, enc, _ in fields if enc)
        self.decoders = tuple((i, dec) for i, (_, _, _, dec) in enumerate(fields) if dec)
        attrs = [attr for attr, _, _, _ in fields]
        self.attrs = tuple(attrs)
        """Dataclass attribute names, in field order (keyword construction: kw_only events)."""
        self.getter = operator.attrgetter(*attrs) if len(attrs) > 1 else _one_tuple(attrs)
        self.picker = (
            operator.itemgetter(*self.names) if len(attrs) > 1 else _one_tuple(attrs, item=True)
        )

    def to_avro(self, obj: object) -> dict[str, Datum]:
        """Return ``obj``'s Avro datum (field name → value). Raises EncodeError."""
        out = dict(zip(self.names, self.getter(obj), strict=True))
        for attr, name, enc in self.encoders:
            try:
                out[name] = enc(out[name])
            except (TypeError, ValueError, AttributeError) as exc:
                value = getattr(obj, attr)
                raise EncodeError(f"{self.cls.__name__}.{attr}={value!r}: {exc}") from exc
        return out

    def from_avro(self, datum: dict[str, Datum]) -> object:
        """Return the dataclass instance of an Avro datum.

        Raises:
            DecodeError: a value cannot be mapped (unknown enum value, non-finite number).
            OverLimit: (bounded plans) a field is past its limit; its path starts here.
        """
        # Never mutate datum: under schema resolution fastavro hands out the reader schema's
        # own default objects for fields the writer lacked.
        values = list(self.picker(datum))
        if (check := self.check) is not None:
            check(values)
        i = 0
        try:
            for i, dec in self.decoders:
                values[i] = dec(values[i])
        except OverLimit as exc:
            raise exc.within(self.names[i]) from None
        return self.cls(**dict(zip(self.attrs, values, strict=True)))

    def parts(self) -> tuple[Plan, ...]:
        """Return the plans whose dataclass fields make up the record (this one alone)."""
        return (self,)


class SpecPlan(Plan):
    """``JobSpec`` <-> ``cronlog.JobSpec``, the one shape of a definition and the old one.

    The record has the definition's own fields and the old shape's job-level task fields
    (``JobLevelTask``), written at their defaults and read back through ``cronlog.job_level.upcast``
    (a record of the old shape becomes the one shape). schemas/README.md, "One shape of the
    job definition".
    """

    __slots__ = ("job_level", "own")

    def __init__(self, own: Plan, job_level: Plan) -> None:
        super().__init__(JobSpec, own.fields + job_level.fields, own.bounds)
        self.own = own
        self.job_level = job_level

    def to_avro(self, obj: object) -> dict[str, Datum]:
        """Return the datum of a JobSpec, the old fields at their defaults. Raises EncodeError."""
        out = self.own.to_avro(obj)
        out.update(self.job_level.to_avro(written(typing.cast(JobSpec, obj))))
        return out

    def from_avro(self, datum: dict[str, Datum]) -> object:
        """Return the JobSpec of a datum of either shape (``Plan.from_avro``'s errors)."""
        spec = typing.cast(JobSpec, self.own.from_avro(datum))  # first: names task_specs
        return upcast(spec, typing.cast(JobLevelTask, self.job_level.from_avro(datum)))

    def parts(self) -> tuple[Plan, ...]:
        """Return the two plans the record is made of."""
        return (self.own, self.job_level)


def _one_tuple(keys: list[str], item: bool = False) -> Callable[[Any], tuple[Any, ...]]:
    """attrgetter/itemgetter for 0 or 1 keys, returning a tuple like the n-key versions do."""
    if not keys:
        return lambda _: ()
    get = operator.itemgetter(keys[0]) if item else operator.attrgetter(keys[0])
    return lambda obj: (get(obj),)


@cache
def plan_for(cls: type, bounded: bool = False) -> Plan:
    """Return (built once per class) the plan that maps ``cls`` to its Avro record and back.

    Args:
        cls: a mapped dataclass (``JobSpec`` gets a ``SpecPlan``).
        bounded: also check, at decode, every field (nested records included) against its
            limit in ``cronlog.limits.COMMAND_LIMITS`` (the codec's plan of commands).

    Raises:
        TypeError: a field's type has no Avro mapping (schemas/README.md, "Mapping rules").
        CronlogError: ``bounded`` and a string, integer or array field has no limit.
    """
    if cls is JobSpec:
        return SpecPlan(_introspected(JobSpec, bounded), _introspected(JobLevelTask, bounded))
    return _introspected(cls, bounded)


def _introspected(cls: type, bounded: bool) -> Plan:
    hints = typing.get_type_hints(cls)
    record = avro_name(cls).rpartition(".")[2]
    fields, sized, ints = [], [], []
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        where = f"{cls.__name__}.{f.name}"
        enc, dec = _converters(tp, where, bounded)
        name = _RENAMES.get((cls, f.name), f.name)
        if _strip_optional(tp) is timedelta:
            name += "_ms"
        if bounded:
            dec, size_check, int_check = avro_limits.bound_field(record, name, tp, dec)
            sized += [size_check] if size_check else []
            ints += [int_check] if int_check else []
        fields.append((f.name, name, enc, dec))
    names = tuple(name for _, name, _, _ in fields)
    bounds = RecordBounds(names, sized, ints) if sized or ints else None
    return Plan(cls, tuple(fields), bounds)


def _strip_optional(tp: object) -> object:
    args = typing.get_args(tp)
    if typing.get_origin(tp) in (types.UnionType, typing.Union) and type(None) in args:
        rest = tuple(a for a in args if a is not type(None))
        return rest[0] if len(rest) == 1 else typing.Union[rest]  # noqa: UP007
    return tp


def _converters(
    tp: object, where: str, bounded: bool = False
) -> tuple[Converter | None, Converter | None]:
    """Return (encode, decode) for one type hint; None means "pass the value through".

    ``bounded``: instants, durations and nested records decode with their limits checked.
    """
    inner = _strip_optional(tp)
    if inner is not tp:
        enc, dec = _converters(inner, where, bounded)
        return (None if enc is None else _optional(enc)), (None if dec is None else _optional(dec))
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (types.UnionType, typing.Union):
        if not all(dataclasses.is_dataclass(a) for a in args):
            raise TypeError(f"{where}: only unions of dataclasses (or X | None) map to Avro")
        return _union_converters(args, where, bounded)
    if tp is datetime:
        return ctime.to_ms, avro_limits.instant if bounded else _decode_instant
    if tp is timedelta:
        return ctime.duration_ms, avro_limits.duration if bounded else ctime.ms_duration
    if isinstance(tp, type) and issubclass(tp, StrEnum):
        return None, _enum_decoder(tp, where)  # a StrEnum is a str: fastavro writes it as is
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        enc, dec = _converters(args[0], where, bounded)
        if enc is None and dec is None:
            return None, tuple  # fastavro writes any sequence; reads lists
        if bounded and dec is not None:
            return _seq(enc, list), avro_limits.indexed(dec, tuple)
        return _seq(enc, list), _seq(dec, tuple)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        plan = plan_for(tp, bounded)
        return plan.to_avro, plan.from_avro
    if tp is float:  # no cronlog number may be NaN or infinite (a flipped bit can make one)
        return None, partial(_finite, where)
    if tp in (str, int, bool, bytes):
        return None, None
    raise TypeError(f"{where}: no Avro mapping for {tp!r}")


def _finite(where: str, value: float) -> float:
    if not math.isfinite(value):
        raise DecodeError(f"non-finite number {value!r} for {where}")
    return value


def _optional(fn: Converter) -> Converter:
    return lambda v: None if v is None else fn(v)


def _seq(fn: Converter | None, make: Callable[[Any], Any]) -> Converter:
    return make if fn is None else (lambda vs: make(fn(v) for v in vs))


def _decode_instant(value: datetime | int) -> datetime:
    # fastavro already applies timestamp-millis (aware UTC); ints come from schemas without it.
    return value if isinstance(value, datetime) else ctime.from_ms(value)


def _enum_decoder(enum: type[StrEnum], where: str) -> Converter:
    members = {m.value: m for m in enum}

    def decode(value: str) -> StrEnum:
        try:
            return members[value]
        except KeyError:
            allowed = ", ".join(members)
            raise DecodeError(f"invalid value {value!r} for {where} (allowed: {allowed})") from None

    return decode


def _union_converters(
    classes: tuple[Any, ...], where: str, bounded: bool
) -> tuple[Converter, Converter]:
    plans = {cls: plan_for(cls, bounded) for cls in classes}
    by_name = {avro_name(cls): plan for cls, plan in plans.items()}

    def encode(obj: object) -> tuple[str, dict[str, Datum]]:
        plan = plans.get(type(obj))
        if plan is None:
            raise TypeError(f"{type(obj).__name__} is not one of the types of {where}")
        return avro_name(plan.cls), plan.to_avro(obj)  # fastavro's tuple notation picks branch

    def decode(value: tuple[str, dict[str, Datum]]) -> object:
        name, datum = value
        plan = by_name.get(name)
        if plan is None:
            raise DecodeError(f"unknown body type {name!r} for {where}")
        try:
            return plan.from_avro(datum)
        except OverLimit as exc:
            raise exc.within(name.rpartition(".")[2]) from None

    return encode, decode


def record_names(schema: Datum, out: dict[str, list[str]]) -> dict[str, list[str]]:
    """Collect {record full name: [field names]} of a parsed schema (named types inlined once)."""
    if isinstance(schema, list):
        for branch in schema:
            record_names(branch, out)
    elif isinstance(schema, dict):
        if schema.get("type") == "record":
            out[schema["name"]] = [f["name"] for f in schema["fields"]]
            for f in schema["fields"]:
                record_names(f["type"], out)
        elif schema.get("type") == "array":
            record_names(schema["items"], out)
    return out


def check_plan(plan: Plan, records: dict[str, list[str]], seen: set[type]) -> None:
    """Fail fast if a dataclass and its Avro record disagree on field names (schema drift)."""
    if plan.cls in seen:
        return
    seen.add(plan.cls)
    name = avro_name(plan.cls)
    mapped = sorted(f[1] for f in plan.fields)
    if sorted(records.get(name, ())) != mapped:
        raise CronlogError(
            f"schema drift: {name} has fields {records.get(name)}, "
            f"{plan.cls.__qualname__} maps to {mapped}"
        )
    for part in plan.parts():
        hints = typing.get_type_hints(part.cls)
        for attr, _, _, _ in part.fields:
            for tp in _leaf_dataclasses(hints[attr]):
                check_plan(plan_for(tp), records, seen)


def _leaf_dataclasses(tp: object) -> list[type]:
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return [tp]
    return [dc for arg in typing.get_args(tp) for dc in _leaf_dataclasses(arg)]
