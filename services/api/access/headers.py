"""Protective response headers on every answer of the API and its console (pure ASGI, so
streams such as ``/console/stream`` pass through untouched).

- ``X-Content-Type-Options: nosniff``: a task's log served as ``text/plain`` stays text, even
  when it holds ``<script>`` (a browser would otherwise sniff it as HTML).
- ``X-Frame-Options: DENY`` and ``Content-Security-Policy: frame-ancestors 'none'``: no other
  site frames the console (clickjacking; the OWASP Secure Headers Project's defaults).
- ``Referrer-Policy: same-origin``: run and job ids in URLs do not leak to other sites.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADERS = (
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"content-security-policy", b"frame-ancestors 'none'"),
    (b"referrer-policy", b"same-origin"),
)


class SecurityHeaders:
    """ASGI middleware adding ``HEADERS`` to every HTTP response that does not set them."""

    def __init__(self, app: ASGIApp) -> None:
        """Wrap ``app``."""
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on; add the headers to the response's start message."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", [])}
                extra = [(n, v) for n, v in HEADERS if n not in present]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, with_headers)
