"""The limits of ``cronlog/limits.py`` as checks on decoded command datums, precomputed per record.

Hot path: per record, one loop over its strings, arrays (``length_hint``: ``len``, and 0 for
None) and integers against caps precomputed by position; items of arrays, durations and
instants are checked in their decoders (Python already). A refusal is ``OverLimit``: the
enclosing decoders prepend their field, index or union branch to its path, and the codec turns
it into a DecodeError ``Command.<path>: <what>, at most <limit>``.
"""

from __future__ import annotations

import operator
import re
import types
import typing
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from cronlog import limits
from cronlog import time as ctime
from cronlog.errors import CronlogError

Converter = Callable[[Any], Any]
_length = operator.length_hint  # len() of a str or list; 0 for None


class OverLimit(Exception):
    """A decoded value past its limit; ``path`` grows as the exception leaves nested decoders."""

    def __init__(self, detail: str, *path: str) -> None:
        super().__init__(detail)
        self.detail = detail
        self.path = list(path)

    def within(self, part: str) -> OverLimit:
        """Prepend a field name, ``[index]`` or union branch to the path; return self."""
        self.path.insert(0, part)
        return self

    def reason(self, root: str) -> str:
        """Return ``<root>.<path>: <detail>`` (indexes attach without a dot)."""
        path = "".join(p if p.startswith("[") else f".{p}" for p in self.path)
        return f"{root}{path}: {self.detail}"


class RecordBounds:
    """The check of one record's strings, arrays and integers, precomputed.

    Plain loops over ``(position, cap)`` pairs into the record's values: measured on CPython
    3.11, ~50 ns a field, a quarter of ``all(map(le, map(len, itemgetter(...)(d)), caps))``.

    Args:
        names: the record's Avro field names, in the order of the values checked.
        sized: ``(Avro field, cap, unit)`` for strings (unit ``characters``) and arrays
            (``items``); a None value passes.
        ints: ``(Avro field, low, high)`` for integers that are never None.
    """

    __slots__ = ("_ints", "_names", "_sized", "_units", "check")

    def __init__(
        self,
        names: tuple[str, ...],
        sized: list[tuple[str, int, str]],
        ints: list[tuple[str, int, int]],
    ) -> None:
        self._names = names
        self._sized = tuple((names.index(name), cap) for name, cap, _ in sized)
        self._units = {names.index(name): unit for name, _, unit in sized}
        self._ints = tuple((names.index(name), low, high) for name, low, high in ints)
        self.check: Callable[[list[Any]], None] = (
            self._check_both if sized and ints else self._check_ints if ints else self._check_sized
        )
        """Raise OverLimit naming the first field past its limit, given the record's values."""

    def _check_sized(self, values: list[Any]) -> None:
        for i, cap in self._sized:
            if (n := _length(values[i])) > cap:
                raise OverLimit(f"{n} {self._units[i]}, at most {cap}", self._names[i])

    def _check_ints(self, values: list[Any]) -> None:
        for i, low, high in self._ints:
            if not low <= values[i] <= high:
                _check_int(values[i], low, high, self._names[i])

    def _check_both(self, values: list[Any]) -> None:  # both loops inline: one call
        for i, cap in self._sized:
            if _length(values[i]) > cap:
                self._check_sized(values)
        for i, low, high in self._ints:
            if not low <= values[i] <= high:
                _check_int(values[i], low, high, self._names[i])


def _check_int(value: int, low: int, high: int, *path: str) -> int:
    if not low <= value <= high:
        raise OverLimit(f"{value} is out of range, must be {low}..{high}", *path)
    return value


def instant(value: datetime | int) -> datetime:
    """Decode a timestamp-millis field; refuse instants outside ``EARLIEST..LATEST``."""
    at = value if isinstance(value, datetime) else ctime.from_ms(value)
    if not limits.EARLIEST <= at <= limits.LATEST:
        raise OverLimit(
            f"{ctime.iso(at)} is out of range, must be "
            f"{ctime.iso(limits.EARLIEST)}..{ctime.iso(limits.LATEST)}"
        )
    return at


def duration(ms: int) -> timedelta:
    """Decode a ``*_ms`` field; refuse durations outside ``0..MAX_DURATION_MS``."""
    if not 0 <= ms <= limits.MAX_DURATION_MS:
        raise OverLimit(f"{ms} ms is out of range, must be 0..{limits.MAX_DURATION_MS} ms")
    return ctime.ms_duration(ms)


def _strip_optional(tp: object) -> tuple[object, bool]:
    args = typing.get_args(tp)
    if typing.get_origin(tp) in (types.UnionType, typing.Union) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            return rest[0], True
    return tp, False


def bound_field(
    record: str, name: str, tp: object, dec: Converter | None
) -> tuple[Converter | None, tuple[str, int, str] | None, tuple[str, int, int] | None]:
    """Return how the codec enforces the limit of one command field.

    Args:
        record: the Avro record's short name (``ClaimTask``).
        name: the Avro field name (``worker_id``).
        tp: the dataclass field's type hint.
        dec: the field's decoder so far (None: the value passes through).

    Returns:
        ``(decoder, sized, ints)``: the decoder with item checks added (optional integers are
        checked there too), the field's entry for the record's fast check of strings and
        arrays, and its entry for the fast check of integers (each None when not one).

    Raises:
        CronlogError: a string, integer or array field has no limit in ``COMMAND_LIMITS``.
    """
    inner, optional = _strip_optional(tp)
    origin, args = typing.get_origin(inner), typing.get_args(inner)
    if inner not in (str, int) and origin is not tuple:
        return dec, None, None  # bounded by its type: bool, enum, float, instant, record, union
    limit = limits.COMMAND_LIMITS.get(f"{record}.{name}")
    if limit is None:
        raise CronlogError(f"{record}.{name} has no limit in cronlog/limits.py COMMAND_LIMITS")
    if inner is str:
        sized_str = (name, _need(limit.chars, record, name), "characters")
        return (_tokens(dec, limit.empty) if limit.token else dec), sized_str, None
    if inner is int:
        low, high = _need(limit.low, record, name), _need(limit.high, record, name)
        if optional:
            return (lambda v: None if v is None else _check_int(v, low, high)), None, None
        return dec, None, (name, low, high)
    sized = (name, _need(limit.items, record, name), "items")
    if args[0] is str:
        return _str_items(limit, dec), sized, None
    if args[0] is int:
        low, high = _need(limit.low, record, name), _need(limit.high, record, name)
        return _int_items(low, high, dec), sized, None
    return dec, sized, None  # items bounded by their own decoder: enum, instant, record


_TOKEN = re.compile(r"[!#-\[\]-~]*")
"""``limits.ID_CHARS``: 0x21..0x7E but the double quote (0x22) and the backslash (0x5C)."""


def _tokens(dec: Converter | None, empty: bool) -> Converter:
    """Wrap a string field's decoder with the identifier check (``Limit.token``, ``empty``)."""

    def decode(value: str | None) -> Any:
        if value == "" and not empty:
            raise OverLimit("an identifier may not be empty")
        if value is not None and _TOKEN.fullmatch(value) is None:
            bad = next(c for c in value if _TOKEN.fullmatch(c) is None)
            raise OverLimit(f"{bad!r} is not an identifier character ({limits.ID_CHARS})")
        return value if dec is None else dec(value)

    return decode


def _need(value: int | None, record: str, name: str) -> int:
    if value is None:
        raise CronlogError(f"{record}.{name}: its limit in COMMAND_LIMITS misses a bound")
    return value


def _str_items(limit: limits.Limit, dec: Converter | None) -> Converter:
    make = dec or tuple
    chars, total = limit.chars, limit.total_chars

    def decode(values: list[str]) -> Any:
        if chars is not None and values and max(map(len, values)) > chars:
            k, n = next((k, len(v)) for k, v in enumerate(values) if len(v) > chars)
            raise OverLimit(f"{n} characters, at most {chars}", f"[{k}]")
        if total is not None and (n := sum(map(len, values))) > total:
            raise OverLimit(f"{n} characters in all, at most {total}")
        return make(values)

    return decode


def _int_items(low: int, high: int, dec: Converter | None) -> Converter:
    make = dec or tuple

    def decode(values: list[int]) -> Any:
        if values and (min(values) < low or max(values) > high):
            k, v = next((k, v) for k, v in enumerate(values) if not low <= v <= high)
            _check_int(v, low, high, f"[{k}]")
        return make(values)

    return decode


def indexed(fn: Converter, make: Callable[[Any], Any]) -> Converter:
    """Return a decoder of arrays applying ``fn`` per item whose refusals name the item's index."""

    def decode(values: list[Any]) -> Any:
        try:
            return make(fn(v) for v in values)
        except OverLimit:
            for k, v in enumerate(values):  # a refusal is rare: find the item again
                try:
                    fn(v)
                except OverLimit as exc:
                    raise exc.within(f"[{k}]") from None
            raise

    return decode
