"""Tenants' quotas and views: ``GET /tenants/{tenant}`` (usage against quotas),
``GET /tenants/{tenant}/dead-letters``; the admission checks writes make (429 + Retry-After).

Quotas come from ``CRONLOG_API_TENANTS_FILE`` (JSON: ``{"tenants": {"team-a": {"max_jobs": 100,
"max_manual_runs_per_minute": 60}}}``), re-read when it changes; a tenant without an entry
(and every tenant without the file) has no quota. What each quota bounds: docs/tenants.md,
"Quotas". ``PUT /tenants/{tenant}/limits`` sets a tenant's cap of running tasks and weight in
the tenant ledger (``cronlog.ledger``).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from pydantic import BaseModel, Field

from cronlog.commands import Envelope, SetTenantLimits
from cronlog.ledger import FLEET, LEDGER_KEY, MAX_WEIGHT
from cronlog.tenants import DEFAULT_TENANT, is_tenant_name
from services.api.access.auth import PLATFORM, Caller, Principal, Role, principal
from services.api.access.scope import job_tenant
from services.api.access.watched import WatchedFile
from services.api.readmodel import dead_letters, paging
from services.api.readmodel.paging import Cursor, PageLimit
from services.api.readmodel.reader import ReadModel
from services.api.routes.operate import DeadLetterList
from services.api.routes.sender import CommandNotSent
from services.api.shapes.definition import Instant
from services.api.shapes.responses import documented

log = logging.getLogger("cronlog.api.tenants")
router = APIRouter(prefix="/api/v1", dependencies=[Depends(principal)])
WINDOW_S = 60.0
"""The window of ``max_manual_runs_per_minute``, seconds."""


class Quota(BaseModel):
    """One tenant's quotas; null: unbounded.

    Attributes:
        max_jobs: most live (not deleted) jobs; a registration past it is a 429.
        max_manual_runs_per_minute: most runs started through the API (trigger, backfill,
            dead-letter replay) per sliding minute, per API process; past it a 429 whose
            Retry-After says when one is free.
    """

    model_config = {"extra": "forbid"}
    max_jobs: int | None = Field(default=None, ge=0, strict=True)
    max_manual_runs_per_minute: int | None = Field(default=None, ge=0, strict=True)


class QuotaFile(BaseModel):
    """The tenants file's shape."""

    model_config = {"extra": "forbid"}
    tenants: dict[str, Quota] = Field(default_factory=dict)


def _parse_quotas(path: Path) -> dict[str, Quota]:
    return QuotaFile.model_validate(json.loads(path.read_text())).tenants


@dataclass
class _Window:
    starts: deque[float]


class Admission:
    """Quota checks of one API process; thread-safe.

    Args:
        path: the tenants file, or None (no quotas). Unreadable contents keep the quotas
            read before (logged), as the tokens file does.
        clock: monotonic seconds (tests pass their own).
    """

    def __init__(self, path: Path | None, clock: Any = time.monotonic) -> None:
        self.path, self.clock = path, clock
        self._lock = threading.Lock()
        self._quotas: WatchedFile[dict[str, Quota]] = WatchedFile(
            path, _parse_quotas, {}, "tenants"
        )
        self._windows: dict[str, _Window] = {}
        self._pending: dict[str, int] = {}

    def quota(self, tenant: str) -> Quota:
        """Return ``tenant``'s quotas (unbounded ones as null)."""
        return self._quotas.get().get(tenant, Quota())

    @contextmanager
    def job_slot(self, rm: ReadModel, tenant: str) -> Iterator[None]:
        """Hold one of ``tenant``'s ``max_jobs`` while a registration is produced and awaited.

        Registrations in flight on this process count with the live jobs of the read model,
        so parallel requests cannot all pass the check before any is visible.

        Raises:
            HTTPException: 429 (Retry-After 60) past ``max_jobs``.
        """
        most = self.quota(tenant).max_jobs
        if most is None:
            yield
            return
        with self._lock:
            live = sum(1 for j in rm.jobs() if j["tenant"] == tenant and j["status"] != "deleted")
            pending = self._pending.get(tenant, 0)
            if live + pending >= most:
                raise HTTPException(
                    429,
                    f"tenant {tenant!r} has {live} of {most} jobs (max_jobs)"
                    + (f", {pending} more being registered" if pending else "")
                    + ": delete one or ask for a larger quota",
                    {"Retry-After": "60"},
                )
            self._pending[tenant] = pending + 1
        try:
            yield
        finally:
            with self._lock:
                self._pending[tenant] -= 1

    def admit_manual_runs(self, tenant: str, runs: int = 1) -> None:
        """Count ``runs`` manual starts of ``tenant``, or refuse them all (429 + Retry-After)."""
        most = self.quota(tenant).max_manual_runs_per_minute
        if most is None:
            return
        now = self.clock()
        with self._lock:
            window = self._windows.setdefault(tenant, _Window(deque()))
            while window.starts and window.starts[0] <= now - WINDOW_S:
                window.starts.popleft()
            if runs > most:
                raise HTTPException(
                    422,
                    f"{runs} runs in one request are more than tenant {tenant!r}'s "
                    f"max_manual_runs_per_minute ({most}): split the range",
                )
            if len(window.starts) + runs > most:
                free_at = window.starts[0] + WINDOW_S if window.starts else now + WINDOW_S
                wait = max(1, int(free_at - now + 0.999))
                raise HTTPException(
                    429,
                    f"tenant {tenant!r} started {len(window.starts)} runs through the API in "
                    f"the last minute; {runs} more would pass max_manual_runs_per_minute "
                    f"({most})",
                    {"Retry-After": str(wait)},
                )
            window.starts.extend([now] * runs)


def _visible_tenant(caller: Principal, tenant: str) -> None:
    if not caller.sees(tenant):
        raise HTTPException(404, f"tenant {tenant!r} not found")


class TenantOut(BaseModel):
    """A tenant's usage against its quotas.

    Attributes:
        jobs: live (not deleted) jobs; runs_active / runs_queued: over those jobs;
        dead_letters: dead-lettered task instances kept; slots_held / slots_waiting: tenant
        ledger slots its jobs hold (claimed or about to be) and ready task instances waiting
        for one (docs/tenants.md, "The tenant ledger"); quota: its quotas (null: unbounded).
    """

    tenant: str
    jobs: int
    runs_active: int
    runs_queued: int
    suspended_jobs: int
    dead_letters: int
    slots_held: int
    slots_waiting: int
    quota: Quota


@router.get("/tenants/{tenant}", response_model=TenantOut, responses=documented(404, 503))
def get_tenant(tenant: str, request: Request, caller: Caller) -> Any:
    """A tenant's usage (jobs, active and queued runs, suspended jobs, dead letters) and
    quotas. 404 for another tenant."""
    _visible_tenant(caller, tenant)
    rm: ReadModel | None = request.app.state.read_model
    if rm is None:
        raise HTTPException(503, "the read model is not running")
    mine = [j for j in rm.jobs() if j["tenant"] == tenant]
    live = [j for j in mine if j["status"] != "deleted"]
    ids = {j["job_id"] for j in mine}
    letters = dead_letters.count(rm.store, lambda d: d["job_id"] in ids)
    return {
        "tenant": tenant,
        "jobs": len(live),
        "runs_active": sum(j["counts"]["active"] for j in mine),
        "runs_queued": sum(j["counts"]["queued"] for j in mine),
        "suspended_jobs": sum(1 for j in live if j.get("suspended")),
        "dead_letters": letters,
        "slots_held": sum(j["slots"]["held"] for j in mine if j.get("slots")),
        "slots_waiting": sum(j["slots"]["waiting"] for j in mine if j.get("slots")),
        "quota": request.app.state.admission.quota(tenant),
    }


class LimitsIn(BaseModel):
    """A tenant's share of the fleet in the tenant ledger (``SetTenantLimits``).

    Attributes:
        weight: its weight in fair sharing while the fleet is full, 1..1000.
        max_running_tasks: most of its task instances running (or granted) at once, over
            every partition and scheduler; null for no cap. For the fleet (``*``): the
            fleet's slots, the most task instances of all ledger tenants at once.
    """

    model_config = {"extra": "forbid"}
    weight: int = Field(default=1, ge=1, le=MAX_WEIGHT, strict=True)
    max_running_tasks: int | None = Field(default=None, ge=0, le=2**31 - 1, strict=True)


@router.put("/tenants/{tenant}/limits", status_code=202, responses=documented(400, 404, 503))
async def put_limits(tenant: str, body: LimitsIn, request: Request, caller: Caller) -> Any:
    """Set a tenant's weight and cap of running tasks (``*``: the fleet's size, weight
    ignored) in the tenant ledger; both are replaced (an omitted field takes its default).
    A platform admin only (403 for a tenant's admin; 404 for another tenant; 422 for
    ``default``, which is outside the ledger). 202 once the broker has the command: the
    ledger applies it in log order."""
    _visible_tenant(caller, tenant)
    if caller.tenant != PLATFORM or caller.role < Role.ADMIN:
        raise HTTPException(403, "only a platform admin sets tenant limits")
    if tenant != FLEET and not is_tenant_name(tenant):
        raise HTTPException(422, f"{tenant[:80]!r} is neither a tenant name nor '*'")
    if tenant == DEFAULT_TENANT:
        raise HTTPException(422, "the default tenant is outside the tenant ledger: no limits")
    sender = request.app.state.sender
    if sender is None:
        raise HTTPException(503, "the API is not connected to Kafka")
    command = SetTenantLimits(
        tenant=tenant, weight=body.weight, max_running_tasks=body.max_running_tasks
    )
    envelope = Envelope(idem_key=f"limits:{uuid.uuid4().hex}", job_id=LEDGER_KEY, command=command)
    try:
        await sender.send(envelope, request.app.state.settings.api_delivery_timeout_s)
    except CommandNotSent as exc:
        raise HTTPException(503, str(exc)) from exc
    return {"tenant": tenant, **body.model_dump()}


@router.get(
    "/tenants/{tenant}/dead-letters",
    response_model=DeadLetterList,
    responses=documented(404, 503),
)
def tenant_dead_letters(
    tenant: str,
    request: Request,
    caller: Caller,
    limit: PageLimit = 100,
    cursor: Cursor = None,
    since: Annotated[Instant | None, Query()] = None,
    until: Annotated[Instant | None, Query()] = None,
) -> Any:
    """The tenant's dead letters, newest first, a page at a time (as ``GET /dead-letters``).
    404 for another tenant."""
    _visible_tenant(caller, tenant)
    rm: ReadModel | None = request.app.state.read_model
    if rm is None:
        raise HTTPException(503, "the read model is not running")
    after = paging.position_of(cursor, "dead-letters", "all", dead_letters.position_shape(None))
    owners: dict[str, bool] = {}

    def visible(doc: dict[str, Any]) -> bool:
        job = doc["job_id"]
        if job not in owners:
            owners[job] = job_tenant(rm, job) == tenant
        return owners[job]

    page = dead_letters.page(
        rm.store, None, since=since, until=until, limit=limit, after=after, visible=visible
    )
    return {
        "dead_letters": page.rows,
        "next_cursor": paging.next_cursor(page, "dead-letters", "all"),
    }
