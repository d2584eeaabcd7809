"""The short form of ``bench/fold_dispatch.py``: every triggered task is completed once, for
the default tenant and for a tenant of the tenant ledger (its asks, grants and returns
folded as the log would). Figures are the bench's business; this checks it counts right."""

from __future__ import annotations

import pytest

from bench.fold_dispatch import run_once


@pytest.mark.parametrize("tenant", ["default", "team-a"])
def test_every_task_is_completed_once(tenant: str) -> None:
    rate, done = run_once(60, 2, 4, tenant)
    assert done == 60 and rate > 0
