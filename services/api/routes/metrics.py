"""``GET /metrics``: the API process's Prometheus metrics, to platform callers only.

The series are counted by the read model (``services/api/readmodel/metrics.py``) and computed at
scrape time from it (``metrics_live.py``); every series is listed in docs/metrics.md.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, HTTPException, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from services.api.access.auth import PLATFORM, Caller
from services.api.readmodel.metrics import REGISTRY

router = APIRouter()


def platform_only(caller: Caller) -> None:
    """Refuse (403) a caller that is not of the platform tenant (``*``), whatever its role.

    The series name jobs of every tenant (``job`` labels), which a tenant must not learn
    (docs/tenants.md); Prometheus scrapes with a platform token (``authorization`` in
    ops/prometheus/prometheus.yml; ``cronlog tokens create prometheus --tenant '*' --role
    viewer``). No token: 401 (``principal``).
    """
    if caller.tenant != PLATFORM:
        raise HTTPException(403, "metrics name every tenant's jobs: a platform token is needed")


@router.get("/metrics", include_in_schema=False, dependencies=[Depends(platform_only)])
def metrics() -> Response:
    """Return the metrics in Prometheus' text exposition format (platform callers only)."""
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)
