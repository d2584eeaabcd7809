"""The web console: server-rendered pages (Jinja2 + htmx) served by the API at ``/``.

See docs/console.md. ``router`` holds every console route (none in the OpenAPI document);
``shutdown_streams`` ends the live-update streams when the server exits.
"""

from __future__ import annotations

from fastapi import APIRouter

from services.api.console import actions, pages, stream
from services.api.console.stream import shutdown_streams

router = APIRouter(include_in_schema=False)
router.include_router(actions.router)
router.include_router(pages.router)
router.include_router(stream.router)

__all__ = ["router", "shutdown_streams"]
