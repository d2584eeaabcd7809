"""Cursor paging of the read model's listings: opaque cursors and the page walk over an index.

A cursor is ``c1\\x00<kind>\\x00<scope>\\x00<position>`` sealed with Fernet (AES-128-CBC +
HMAC-SHA256, the ``cryptography`` library): the position may be the key of a row another
tenant owns (a page's walk ends where its scan budget ends, filtered rows included), so a
client must not be able to read it, nor forge one. The key: ``CRONLOG_API_CURSOR_KEY`` (a
Fernet key, shared by an API's replicas), else one drawn when the process starts (a restart
then refuses older cursors, 422: the client starts again from the first page).
Inside, ``kind`` names the listing (``runs``, ``jobs``, ``dead-letters``), ``scope`` what it lists
(a job_id for runs, or the index a dead-letter listing walks) and ``position`` the store key,
relative to its index prefix, of the last row the page looked at. The next page starts
strictly after it, so rows pruned or added meanwhile never shift a page (a position is a key,
not an offset). A cursor from another listing, another job, or not a cursor at all is refused
(``BadCursor``: a 422 naming ``cursor``); since rows are filtered by the caller's tenant after
the walk, a cursor never reads another tenant's rows.

A page holds at most ``limit`` rows and looks at most ``SCAN_BUDGET`` index keys: a filter
that matches few rows answers a short page (even an empty one) with a ``next_cursor``. Every
page is complete or carries a ``next_cursor``; ``next_cursor`` is null only at the end.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from cryptography.fernet import Fernet, InvalidToken
from fastapi import Query
from fastapi.exceptions import RequestValidationError

from services.api.readmodel.store import Store

MAX_PAGE = 1000
"""The largest ``limit`` of a paged listing (a larger one is a 422 naming ``limit``)."""
LIMIT_DOC = f"Most rows in this page, 1..{MAX_PAGE}."
Cursor = Annotated[
    str | None,
    Query(
        max_length=2048,
        description="The next_cursor of the previous page (opaque); omit for the first page.",
    ),
]
"""The ``cursor`` query parameter of a paged listing."""
PageLimit = Annotated[int, Query(ge=1, le=MAX_PAGE, description=LIMIT_DOC)]
"""The ``limit`` query parameter of a paged listing (its default is the route's)."""
SCAN_BUDGET = 5000
"""Most index keys one page looks at (filtered-out rows included)."""
MAX_CURSOR_CHARS = 2048
"""A longer ``cursor`` is refused without decoding."""
_VERSION = b"c1"


class BadCursor(ValueError):
    """A ``cursor`` that is not one this listing handed out."""


_SEAL: list[Fernet] = [Fernet(Fernet.generate_key())]
"""The cursors' key (``use_key``); one drawn at import until the app sets its own."""


def use_key(key: str) -> None:
    """Seal cursors with ``key`` (a Fernet key: 32 bytes, URL-safe base64); "" keeps the
    process's own random key.

    Raises:
        ValueError: ``key`` is not a Fernet key (the message names the setting).
    """
    if not key:
        return
    try:
        _SEAL[0] = Fernet(key.encode())
    except (ValueError, TypeError) as exc:
        raise ValueError(
            "CRONLOG_API_CURSOR_KEY must be a Fernet key: 32 bytes in URL-safe base64 "
            "(python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key()"
            ".decode())')"
        ) from exc


def encode(kind: str, scope: str, position: bytes) -> str:
    """Return the opaque (sealed) cursor of ``position`` in listing ``kind`` of ``scope``."""
    raw = b"\x00".join((_VERSION, kind.encode(), scope.encode(), position))
    return _SEAL[0].encrypt(raw).decode()


def decode(cursor: str, kind: str, scope: str, shape: re.Pattern[bytes]) -> bytes:
    """Return the position ``cursor`` holds.

    Args:
        cursor: what the client sent.
        kind, scope: the listing and scope it must come from.
        shape: the position's whole shape (a full match is required).

    Raises:
        BadCursor: not sealed by this API's key, another version, kind or scope, or a
            position of another shape.
    """
    if len(cursor) > MAX_CURSOR_CHARS:
        raise BadCursor("too long")
    try:
        raw = _SEAL[0].decrypt(cursor.encode())
    except (InvalidToken, ValueError) as exc:
        raise BadCursor("not a cursor of this API (or of an API with another cursor key)") from exc
    parts = raw.split(b"\x00", 3)
    if len(parts) != 4 or parts[0] != _VERSION:
        raise BadCursor("not a cursor of this API")
    if parts[1] != kind.encode() or parts[2] != scope.encode():
        raise BadCursor(f"a cursor of another listing, not of {kind} {scope}".rstrip())
    if shape.fullmatch(parts[3]) is None:
        raise BadCursor("not a position of this listing")
    return parts[3]


def invalid_cursor(exc: BadCursor, cursor: str) -> RequestValidationError:
    """Return the 422 of a refused cursor, in FastAPI's shape, ``loc`` ``[query, cursor]``."""
    return RequestValidationError(
        [
            {
                "type": "value_error",
                "loc": ("query", "cursor"),
                "msg": f"cursor is not valid here: {exc}",
                "input": cursor[:100],
            }
        ]
    )


def position_of(
    cursor: str | None, kind: str, scope: str, shape: re.Pattern[bytes]
) -> bytes | None:
    """Return the position a request's ``cursor`` stands for (``decode``); None: first page.

    Raises:
        RequestValidationError: 422 naming ``cursor`` (``invalid_cursor``) if it is refused.
    """
    if cursor is None:
        return None
    try:
        return decode(cursor, kind, scope, shape)
    except BadCursor as exc:
        raise invalid_cursor(exc, cursor) from exc


def next_cursor(page: Page, kind: str, scope: str) -> str | None:
    """Return the cursor of the page after ``page`` (``encode``); None on the last page."""
    pos = page.next_position
    return encode(kind, scope, pos) if pos is not None else None


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a listing."""

    rows: list[dict[str, Any]]
    """At most ``limit`` rows, in index order."""
    next_position: bytes | None
    """The position (key relative to the prefix) to continue after; None at the end."""


def walk(
    store: Store,
    prefix: bytes,
    *,
    limit: int,
    load: Callable[[bytes, bytes], dict[str, Any] | None],
    after: bytes | None = None,
    start: bytes | None = None,
    stop: bytes | None = None,
) -> Page:
    """Return one page of the index under ``prefix``.

    Args:
        store: the read model's store.
        prefix: the index's key prefix.
        limit: most rows.
        load: the row of ``(key, value)``, or None to skip it (filtered out, or gone).
        after: a position from a cursor: keys at or before ``prefix + after`` are skipped.
        start: a relative key to start at (a filter's bound), or None for the index's start.
        stop: a relative key to stop before (exclusive), or None for the index's end.

    Returns:
        The page: ``next_position`` is None exactly when no key is left in ``[start, stop)``
        after the page; else the last key looked at (a full page's last row, or the key the
        scan budget ran out on).
    """
    lo = prefix + max(start or b"", after or b"")
    hi = prefix + stop if stop is not None else None
    rows: list[dict[str, Any]] = []
    last: bytes | None = None
    looked = 0
    for key, value in store.scan(prefix, start=lo):
        if hi is not None and key >= hi:
            break
        if after is not None and key == prefix + after:
            continue
        if len(rows) >= limit or looked >= SCAN_BUDGET:
            return Page(rows, last)  # a key is left: there is more
        looked += 1
        last = key[len(prefix) :]
        row = load(key, value)
        if row is not None:
            rows.append(row)
    return Page(rows, None)
