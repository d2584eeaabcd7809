"""Tenant scoping of reads: another tenant's job, run or dead letter is *not found* (404),
never forbidden, so a tenant learns nothing about another's resources (docs/tenants.md)."""

from __future__ import annotations

from typing import Any

from fastapi import HTTPException

from cronlog.tenants import DEFAULT_TENANT
from services.api.access.auth import Principal
from services.api.readmodel.reader import ReadModel


def job_tenant(rm: ReadModel, job_id: str) -> str | None:
    """Return the tenant of job ``job_id``, or None when the read model has no such job."""
    doc = rm.stored_job(job_id)
    return None if doc is None else str(doc.get("tenant", DEFAULT_TENANT))


def sees_job(rm: ReadModel, caller: Principal, job_id: str) -> bool:
    """Return whether job ``job_id`` exists and ``caller`` may see it."""
    tenant = job_tenant(rm, job_id)
    return tenant is not None and caller.sees(tenant)


def visible_job(rm: ReadModel, caller: Principal, job_id: str) -> dict[str, Any]:
    """Return job ``job_id`` as the API shows it.

    Raises:
        HTTPException: 404 when there is no such job or it is another tenant's.
    """
    job = rm.job(job_id)
    if job is None or not caller.sees(job["tenant"]):
        raise HTTPException(404, f"job {job_id!r} not found")
    return job


def visible_run(rm: ReadModel, caller: Principal, run_id: str) -> dict[str, Any]:
    """Return run ``run_id`` as the API shows it.

    Raises:
        HTTPException: 404 when there is no such run or its job is another tenant's.
    """
    run = rm.run(run_id)
    if run is None or not sees_job(rm, caller, run["job_id"]):
        raise HTTPException(404, f"run {run_id!r} not found")
    return run
