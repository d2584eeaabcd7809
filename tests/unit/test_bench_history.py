"""The short form of ``bench/history.py``: it builds, pages and prunes what it says it does.
Figures are the bench's business; this checks it counts right."""

from __future__ import annotations

from pathlib import Path

from bench.history import run_once


def test_the_history_bench_pages_to_the_oldest_runs_and_prunes_the_older_half(
    tmp_path: Path,
) -> None:
    figures = run_once(300, tmp_path / "rm")
    assert (figures["events"], figures["first_page_rows"], figures["last_page_rows"]) == (
        1501,
        100,
        100,
    )
    assert (figures["pruned_runs"], figures["pruned_events"]) == (150, 751)
