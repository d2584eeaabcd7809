"""An ``Idempotency-Key`` names one request: reusing it for another one is a 422.

The rule is the IETF httpapi draft "The Idempotency-Key HTTP Header Field", section 2.7:
a key reused with a different payload is an error. The first use of a key by a request that
produces a command records the request's fingerprint (sha256 of method, path and canonical
JSON body) in the read model's RocksDB under ``ik:<key>``; ``guard`` (a dependency of every
write router) refuses a later request with that key and another fingerprint before anything
is produced. A retry of the same request passes and is answered as before (the command's
idem_key dedupes it).

The record lives beside the read model, so it survives an API restart, but not a rebuild of
the read model (a new ``store.FORMAT`` or a recreated topic) and not another API process:
only the fold sees every use of a key (README, "Limits of the HTTP API").
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError

from services.api.access.auth import Caller
from services.api.readmodel.store import Store

HEADER = "Idempotency-Key"
KEY_PREFIX = b"ik:"
"""Store key prefix of a key's first use: ``ik:<tenant>\\x00<key>`` → JSON ``{fingerprint,
method, path}``. Keys are scoped by the caller's tenant: another tenant's use of a key neither
binds it nor shows in a refusal (docs/tenants.md)."""
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def fingerprint(method: str, path: str, body: bytes) -> str:
    """Return the sha256 hex digest identifying a request.

    Args:
        method: HTTP method (case-insensitive).
        path: the URL path, without the query.
        body: the raw body; JSON is canonicalised (sorted keys, no whitespace), so a retry
            that lays out the same document differently is the same request.
    """
    try:
        canonical = json.dumps(
            json.loads(body), sort_keys=True, separators=(",", ":"), ensure_ascii=False
        ).encode()
    except (ValueError, RecursionError):  # not JSON, empty, or nested too deep: the bytes
        canonical = body
    digest = hashlib.sha256(f"{method.upper()} {path}\n".encode())
    digest.update(canonical)
    return digest.hexdigest()


def _store(request: Request) -> Store | None:
    rm = request.app.state.read_model
    return rm.store if rm is not None else None


def _conflict(key: str, first: dict[str, Any]) -> RequestValidationError:
    msg = (
        f"Idempotency-Key {key!r} was first used for {first['method']} {first['path']} "
        "with another body (or for this other request); a key names one request (send a new "
        "key for a new request)"
    )
    return RequestValidationError(
        [{"type": "idempotency_key_reused", "loc": ("header", HEADER), "msg": msg}]
    )


def _stored_key(tenant: str, key: str) -> bytes:
    return KEY_PREFIX + tenant.encode() + b"\x00" + key.encode()


def _check(store: Store, tenant: str, key: str, fp: str) -> dict[str, Any] | None:
    first = store.get_json(_stored_key(tenant, key))
    if first is not None and first["fingerprint"] != fp:
        raise _conflict(key, first)
    return first


async def guard(request: Request, caller: Caller) -> None:
    """Refuse a write whose Idempotency-Key was first used by another request.

    A router dependency: it runs before the handler, so nothing is produced. Requests
    without the header, safe methods and an app without a read model pass.

    Raises:
        RequestValidationError: 422 at ``header.Idempotency-Key``, type
            ``idempotency_key_reused``, naming the first use's method and path.
    """
    key, store = request.headers.get(HEADER), _store(request)
    if not key or store is None or request.method in _SAFE_METHODS:
        return
    fp = fingerprint(request.method, request.url.path, await request.body())
    _check(store, caller.tenant, key, fp)
    request.state.idem_fingerprint = fp
    request.state.idem_tenant = caller.tenant


def remember(request: Request) -> None:
    """Record the request's fingerprint as its key's first use, unless one is recorded.

    Called just before a command is produced: a request refused earlier does not bind its
    key. Synchronous (no await between the look-up and the write), so two requests racing
    with one key on this process cannot both become its first use.

    Raises:
        RequestValidationError: another request became the key's first use meanwhile.
    """
    fp: str | None = getattr(request.state, "idem_fingerprint", None)
    tenant: str = getattr(request.state, "idem_tenant", "")
    key, store = request.headers.get(HEADER), _store(request)
    if fp is None or not key or store is None or _check(store, tenant, key, fp) is not None:
        return
    doc = {"fingerprint": fp, "method": request.method, "path": request.url.path}
    store.write({_stored_key(tenant, key): json.dumps(doc, separators=(",", ":")).encode()})
