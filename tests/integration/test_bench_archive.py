"""The short form of ``bench/archive.py``: it archives and counts every run-event it produced.
Figures are the bench's business; this checks it counts right."""

from __future__ import annotations

import pytest

from bench.archive import run_once

pytestmark = [pytest.mark.broker]


def test_the_bench_archives_and_counts_every_event(kafka_bootstrap: str) -> None:
    f = run_once(runs=200, jobs=20, partitions=3)
    assert f.events == 20 + 200 * 5
    assert f.archived == f.events == f.counted
    assert f.bytes > 0 and f.events_per_s > 0
