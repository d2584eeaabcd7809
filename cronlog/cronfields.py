"""One cron field at a time: croniter expands it, after the rewrites cronlog's dialect needs.

croniter reads numbers, names, lists, ranges, steps, ``*``, ``L``, ``#`` and Jenkins ``H``;
where its reading differs from docs/schedules.md (``a-a``, wrapping ranges, ``a/n``, ``a-L``,
``?``, ``5L``) the text is rewritten first, and ``W``/``LW``, which it lacks, are read here.
"""

from __future__ import annotations

import re

from croniter import croniter
from croniter.croniter import DOW_ALPHAS, EXPRESSIONS, M_ALPHAS, CroniterError

from cronlog.errors import InvalidDefinition

FIELD = "schedule.expression"
NAMES_5 = ("minute", "hour", "day_of_month", "month", "day_of_week")
_BOUNDS = {
    "second": (0, 59),
    "minute": (0, 59),
    "hour": (0, 23),
    "day_of_month": (1, 31),
    "month": (1, 12),
    "day_of_week": (0, 7),
}
_CRONITER_INDEX = {
    "minute": 0,
    "hour": 1,
    "day_of_month": 2,
    "month": 3,
    "day_of_week": 4,
    "second": 5,
}
_RANGE = re.compile(r"^([^-/*]+)-([^-/]+)(?:/(\d+))?$")
_START_STEP = re.compile(r"^([^-/*]+)/(\d+)$")
HASH = re.compile(r"^h(?:\((\d+)-(\d+)\))?(?:/(\d+))?$")
"""Jenkins ``H``, ``H(a-b)``, ``H/n``, ``H(a-b)/n`` (lower case): always a whole field."""
_RANDOM = re.compile(r"^r(?:\(\d+-\d+\))?(?:/\d+)?$")
_NEAREST_WEEKDAY = re.compile(r"^(\d+)w$")
_DOW_SPECIAL = re.compile(r"^(?:(\w+)#(\d+)|(\w+)l|l(\w+))$")


def bad(name: str, raw: str, why: str | None = None) -> InvalidDefinition:
    """Return the refusal of cron field ``name`` (as written: ``raw``), with why if known."""
    # The bare wording (no why) is what croniter-refused fields have always said, and what
    # CommandRejected events and tests/unit/test_decide.py carry.
    suffix = f": {why}" if why else ""
    return InvalidDefinition(FIELD, f"cron field {name} {raw!r} is not valid{suffix}")


def plain_values(name: str, text: str, raw: str, seed: bytes) -> set[int]:
    """Expand one field through croniter after normalising it (``split_specials`` first).

    ``text`` is what to expand (``raw`` less any W/#/L tokens); ``raw`` is named in errors.
    """
    text = _normalise(name, text, raw)
    probe = ["*"] * (6 if name == "second" else 5)
    probe[0 if name == "second" else NAMES_5.index(name)] = text
    expression = " ".join(probe)
    try:
        expanded, _ = croniter.expand(expression, hash_id=seed, second_at_beginning=True)
    except (CroniterError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise bad(name, raw) from exc
    finally:
        # croniter keeps every expression it ever expanded in a module dict; with one hashed
        # expression per job that is a leak, so take ours back out.
        EXPRESSIONS.pop((expression, seed, True), None)
    values = expanded[_CRONITER_INDEX[name]]
    low, high = _BOUNDS[name]
    if values == ["*"]:
        return (
            set(range(low, min(high, 6) + 1))
            if name == "day_of_week"
            else set(range(low, high + 1))
        )
    return {int(v) % 7 if name == "day_of_week" else int(v) for v in values}


def _normalise(name: str, text: str, raw: str) -> str:
    """Rewrite what croniter reads differently: ``?``, ``a-a``, wrapping ranges, ``a/n``."""
    text = text.lower()
    if text == "?" and name in ("day_of_month", "day_of_week"):
        return "*"
    if _RANDOM.match(text):
        raise bad(name, raw, "R (random) is not allowed: ticks must be deterministic")
    hashed = HASH.match(text)
    if hashed:
        if name == "day_of_month" and hashed.group(1) is None:
            # Jenkins hashes day-of-month into 1-28 so the day exists in every month.
            step = hashed.group(3)
            return "h(1-28)" + (f"/{step}" if step else "")
        return text
    return ",".join(_normalise_item(name, item) for item in text.split(","))


def _normalise_item(name: str, item: str) -> str:
    """Rewrite one list item into a spelling croniter expands as docs/schedules.md says.

    Ranges are resolved here, where the field's bounds are known: ``a/n`` becomes
    ``a-max/n``, ``a-L`` (day_of_month) becomes ``a-31``, a range with equal ends becomes the
    single value, and a wrapping range becomes its list. croniter then sees only values and
    ascending ranges, which it expands correctly.
    """
    low, high = _BOUNDS[name]
    start_step = _START_STEP.match(item)
    if start_step:  # croniter reads 59/5 and 6/1 (day_of_week) as the whole cycle, 7/2 as 0/2
        start = _number(name, start_step.group(1))
        item = f"{start_step.group(1)}-{_step_end(name, start)}/{start_step.group(2)}"
    ranged = _RANGE.match(item)
    if not ranged:
        return item
    first, last = _number(name, ranged.group(1)), _range_end(name, ranged.group(2))
    step = int(ranged.group(3) or 1)
    if (
        first is None
        or last is None
        or step == 0
        or not (low <= first <= high and low <= last <= high)
    ):
        return item  # croniter refuses it
    if name == "day_of_week":
        # 7 is Sunday again: as a start it is 0 (7-1 is Sunday, Monday), except in 7-7; as an
        # end it stays 7 (5-7 is Friday to Sunday, 0-7 every day), which croniter reads as 0.
        high = 6
        if first == 7 and last != 7:
            first = 0
    if first == last:
        return str(first)  # "a-a" is the single value a (croniter: the whole cycle)
    if first > last:
        cycle = [*range(first, high + 1), *range(low, last + 1)]
        return ",".join(str(v) for v in cycle[::step])  # croniter's wrap drops or shifts values
    return f"{first}-{last}/{step}"


def _step_end(name: str, start: int | None) -> int:
    """Return where ``a/n`` stops: the field's last value.

    In day_of_week that is Saturday (6), unless a is 7, whose ``7/n`` is 7 alone (Sunday), as
    a-max/n reads (docs/schedules.md, "a/n").
    """
    if name == "day_of_week":
        return 7 if start == 7 else 6
    return _BOUNDS[name][1]


def _range_end(name: str, end: str) -> int | None:
    """Return the end of a range: a number or name, or in day_of_month ``L``.

    ``L`` as an end is 31: ``a-L`` is a..the month's last day, and days past that do not exist.
    """
    if name == "day_of_month" and end == "l":
        return _BOUNDS[name][1]
    return _number(name, end)


def _number(name: str, token: str) -> int | None:
    if token.isdigit():
        return int(token)
    names = M_ALPHAS if name == "month" else DOW_ALPHAS if name == "day_of_week" else {}
    value = names.get(token)
    return int(value) if value is not None else None


def split_specials(name: str, raw: str) -> tuple[str, set[str]]:
    """Split a day field into the items croniter expands and the ``L``/``W``/``#`` tokens."""
    text = raw.lower()
    if HASH.match(text) or text == "?":
        return raw, set()
    plain, special = [], set()
    for item in text.split(","):
        if name == "day_of_month" and (item in ("l", "lw") or _NEAREST_WEEKDAY.match(item)):
            # L is read here, not by croniter: it reads a list of 1-27, 29-31 and L as every
            # day, the 28th of every month included.
            if item not in ("l", "lw") and not 1 <= int(item[:-1]) <= 31:
                raise bad(name, raw, f"{item[:-1]} is outside 1-31")
            special.add(item)
        elif name == "day_of_week" and _DOW_SPECIAL.match(item):
            special.add(item)
        else:
            plain.append(item)
    if name == "day_of_week" and "l" in plain:
        raise bad(
            name,
            raw,
            "L alone is ambiguous (Quartz reads it as Saturday): write 6 "
            "or SAT, or 5L for the last Friday",
        )
    return ",".join(plain), special


def dow_specials(raw: str, tokens: set[str], seed: bytes) -> tuple[set[tuple[int, int]], set[int]]:
    """Read ``d#n`` and ``dL``/``Ld`` (last d of the month) through croniter's ``#``/``L``."""
    spelled = []
    for token, m in sorted((t, m) for t in tokens if (m := _DOW_SPECIAL.match(t))):
        day = _number("day_of_week", m.group(1) or m.group(3) or m.group(4))
        if day is None or day > 7:
            raise bad("day_of_week", raw, f"{token.upper()!r}: not a day 0-7 or SUN-SAT")
        spelled.append(f"{day % 7}#{m.group(2)}" if m.group(2) else f"l{day % 7}")
    if not spelled:
        return set(), set()
    expression = "* * * * " + ",".join(spelled)
    try:
        _, nth = croniter.expand(expression, hash_id=seed)
    except (CroniterError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise bad("day_of_week", raw) from exc
    finally:
        EXPRESSIONS.pop((expression, seed, False), None)
    pairs = {(int(d), int(n)) for d, ns in nth.items() for n in ns if n != "l"}
    return pairs, {int(d) for d, ns in nth.items() if "l" in ns}
