"""The console's sign-in: the API's own tokens, carried by an HttpOnly cookie.

A browser cannot send ``Authorization: Bearer`` on a navigation, so ``POST /login`` checks the
pasted token with the API's ``Authenticator`` and keeps it in a cookie (HttpOnly,
SameSite=Strict, Secure over https). Every request re-checks it exactly as the API checks the
header (an expired JWT or a revoked static token stops working at once); the header is
accepted too. State-changing requests must also come from this origin (``Origin`` /
``Sec-Fetch-Site``), CSRF defence in depth besides SameSite.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import parse_qs, urlsplit

from fastapi import Depends, HTTPException, Request

from services.api.access.auth import Principal, Role, Unauthenticated

COOKIE = "cronlog_console"
"""The cookie that holds the caller's token."""


def token_of(request: Request) -> str | None:
    """Return the request's token: the ``Authorization: Bearer`` header's, else the cookie's."""
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return request.cookies.get(COOKIE) or None


def authenticate(request: Request) -> Principal | None:
    """Return the caller the request's token names, or None (no token, or not a valid one)."""
    token = token_of(request)
    if token is None:
        return None
    try:
        return request.app.state.authenticator.authenticate(token)  # type: ignore[no-any-return]
    except Unauthenticated:
        return None


def page_caller(request: Request) -> Principal:
    """Dependency of pages: the caller, or a 303 to ``/login`` (a 401 to htmx's re-fetch of a
    page's live part: a login form is not that part)."""
    caller = authenticate(request)
    if caller is None and request.headers.get("hx-request") == "true":
        raise HTTPException(401, "sign in first")
    if caller is None:
        raise HTTPException(303, "sign in first", {"Location": "/login"})
    return caller


def api_caller(request: Request) -> Principal:
    """Dependency of fragments, the stream and actions: the caller, or 401."""
    caller = authenticate(request)
    if caller is None:
        raise HTTPException(401, "sign in first (no valid token in the cookie or header)")
    return caller


PageCaller = Annotated[Principal, Depends(page_caller)]
ApiCaller = Annotated[Principal, Depends(api_caller)]


def same_origin(request: Request) -> None:
    """Refuse (403) a state-changing request that did not come from a page of this origin.

    ``Sec-Fetch-Site`` must be ``same-origin`` when sent; ``Origin``, when sent, must name this
    host (``Host`` header; the scheme is not compared, so a TLS-terminating proxy is fine).
    A request with neither header is refused: every current browser sends one on a POST.
    """
    site, origin = request.headers.get("sec-fetch-site"), request.headers.get("origin")
    if site is None and origin is None:
        raise HTTPException(403, "cross-site check: no Origin or Sec-Fetch-Site header")
    if site is not None and site != "same-origin":
        raise HTTPException(403, f"cross-site check: Sec-Fetch-Site is {site!r}")
    if origin is not None and urlsplit(origin).netloc != request.headers.get("host"):
        raise HTTPException(403, "cross-site check: Origin is not this site")


def operator(request: Request) -> Principal:
    """Dependency of actions: a same-origin request of an operator (or admin), else 401/403."""
    same_origin(request)
    caller = api_caller(request)
    if caller.role < Role.OPERATOR:
        raise HTTPException(403, f"role {caller.role.name.lower()} may not do this; needs operator")
    return caller


Operator = Annotated[Principal, Depends(operator)]


async def form(request: Request) -> dict[str, str]:
    """Return a urlencoded form body's fields (the first value of each), at most 64 KiB."""
    body = await request.body()
    if len(body) > 65536:
        raise HTTPException(413, "form too large")
    fields = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
    return {k: v[0] for k, v in fields.items()}
