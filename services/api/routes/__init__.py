"""The API's endpoints by family, one module each with its ``APIRouter``, and what they share.

Families: writes, operate, backfill, logs, workers, tenants, metrics. Shared: ``sender``
(producing commands) and ``backfill_plan`` (which ticks a backfill runs). The job and run
reads and the health probes are still routers of ``services/api/app.py``.
"""
