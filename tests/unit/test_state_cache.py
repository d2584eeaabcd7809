"""The fold's cache of committed job states (topology/fold/state_cache.py): least recently used
out past its capacity, a partition's entries dropped on assignment and revoke, a deleted job
forgotten, and a job met on another partition is a miss."""

from __future__ import annotations

from datetime import UTC, datetime

from cronlog.job import JobState
from cronlog.model import JobSpec, Schedule, ScheduleKind, main_task
from cronlog.vocabulary import JobStatus
from topology.fold.state_cache import StateCache

SPEC = JobSpec(name="m", schedule=Schedule(ScheduleKind.MANUAL), task_specs=main_task(("true",)))
AT = datetime(2026, 3, 1, tzinfo=UTC)


def state(job_id: str) -> JobState:
    return JobState(job_id=job_id, spec=SPEC, status=JobStatus.ACTIVE, clock=AT)


def test_least_recently_used_leaves_first() -> None:
    cache = StateCache(capacity=2)
    cache.update({"a": (0, state("a")), "b": (0, state("b"))})
    assert cache.get(0, "a") == state("a")  # a is now the most recent
    cache.update({"c": (1, state("c"))})
    assert (cache.get(0, "a"), cache.get(0, "b"), cache.get(1, "c")) == (
        state("a"),
        None,
        state("c"),
    )
    assert (cache.hits, cache.misses, len(cache)) == (3, 1, 2)


def test_a_partition_is_dropped_whole_and_a_deleted_job_forgotten() -> None:
    cache = StateCache()
    cache.update({"a": (0, state("a")), "b": (1, state("b")), "c": (1, state("c"))})
    cache.drop(1)
    assert [cache.get(1, j) for j in ("b", "c")] == [None, None]
    assert cache.get(0, "a") == state("a")
    cache.update({"a": (0, None)})
    assert cache.get(0, "a") is None
    assert cache.get(5, "x") is None  # never cached


def test_a_job_on_another_partition_is_a_miss_and_capacity_zero_keeps_nothing() -> None:
    cache = StateCache()
    cache.update({"a": (0, state("a"))})
    assert cache.get(1, "a") is None
    off = StateCache(capacity=0)
    off.update({"a": (0, state("a"))})
    assert len(off) == 0
