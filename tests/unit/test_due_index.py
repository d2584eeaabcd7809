"""The due index (topology/fold/due_index.py): deadlines popped in (deadline, job_id) order, stale
entries skipped, and a batch's changes undone by ``rollback`` as if they never happened (the
runtime re-folds a batch whose transaction aborted: it must pop the same jobs again)."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from topology.fold.due_index import DueIndex

P = 0


def _index(deadlines: dict[str, int], partitions: tuple[int, ...] = (P,)) -> DueIndex:
    due = DueIndex()
    due.reset(partitions)
    due.add_partition(P, deadlines.items())
    return due


def test_pop_due_returns_jobs_in_deadline_then_job_id_order_up_to_the_limit() -> None:
    due = _index({"c": 10, "a": 20, "b": 10, "d": 30, "e": 31})
    assert due.pop_due(P, 30, limit=3) == ["b", "c", "a"]
    assert due.pop_due(P, 30) == ["d"]
    assert due.pop_due(P, 31) == ["e"]
    assert due.pop_due(P, 1_000) == []
    assert len(due) == 0


def test_rollback_restores_exactly_the_due_jobs_in_the_same_order() -> None:
    due = _index({"a": 10, "b": 20, "c": 30, "d": 40})
    due.begin()
    first = due.pop_due(P, 35)
    due.set(P, "a", 50)  # decided: the next deadline
    due.set(P, "b", None)  # decided: nothing due any more
    due.set(P, "d", 5)  # moved earlier
    due.set(P, "new", 1)  # registered in the batch
    due.rollback()
    assert first == ["a", "b", "c"]
    assert due.pop_due(P, 35) == first
    assert due.pop_due(P, 1_000) == ["d"]
    assert len(due) == 0


def test_commit_keeps_the_batch_changes() -> None:
    due = _index({"a": 10, "b": 20})
    due.begin()
    assert due.pop_due(P, 15) == ["a"]
    due.set(P, "a", 40)
    due.set(P, "c", 30)
    due.commit()
    due.rollback()  # nothing to undo once committed
    assert due.pop_due(P, 100) == ["b", "c", "a"]


def test_drop_partition_forgets_its_jobs_only() -> None:
    due = DueIndex()
    due.reset((0, 1))
    due.add_partition(0, [("a", 10), ("b", 20)])
    due.add_partition(1, [("x", 10)])
    due.drop_partition(0)
    assert due.partitions() == [1]
    assert len(due) == 1
    assert due.pop_due(0, 100) == []
    assert not due.has_due(0, 100)
    assert due.pop_due(1, 100) == ["x"]


def test_has_due_skips_stale_entries() -> None:
    due = _index({"a": 10, "b": 20})
    due.set(P, "a", 50)  # the entry (10, a) is stale now
    due.set(P, "b", None)  # (20, b) too
    assert not due.has_due(P, 30)
    assert due.has_due(P, 50)
    assert due.pop_due(P, 50) == ["a"]
    assert not due.has_due(P, 10_000)


def test_a_job_set_back_to_an_earlier_deadline_is_popped_once() -> None:
    due = _index({"a": 10})
    due.set(P, "a", 20)
    due.set(P, "a", 10)  # two entries (10, a) now
    assert due.pop_due(P, 100) == ["a"]
    assert due.pop_due(P, 100) == []


def test_rollback_keeps_a_deadline_that_equals_the_journal_marker() -> None:
    """-1 ms (1969-12-31T23:59:59.999Z) is a deadline like any other: a job due then and
    popped in an aborted batch is due again after the rollback."""
    due = _index({"early": -1})
    due.begin()
    assert due.pop_due(P, 0) == ["early"]
    due.rollback()
    assert due.pop_due(P, 0) == ["early"]


# -- the property: a rolled-back batch leaves no trace -------------------------------------

JOBS = ("a", "b", "c", "d", "e", "f")
PARTITIONS = (0, 1)


def _partition_of(job_id: str) -> int:
    return JOBS.index(job_id) % len(PARTITIONS)


Op = tuple[str, str, int | None]
"""("set", job_id, deadline or None) | ("pop", str(partition), now) | ("has", …, now)."""

ops = st.one_of(
    st.tuples(st.just("set"), st.sampled_from(JOBS), st.none() | st.integers(-2, 12)),
    st.tuples(st.just("pop"), st.sampled_from([str(p) for p in PARTITIONS]), st.integers(-2, 14)),
    st.tuples(st.just("has"), st.sampled_from([str(p) for p in PARTITIONS]), st.integers(-2, 14)),
)


@dataclass
class Model:
    """The due index's meaning: each job's deadline, nothing else."""

    deadline: dict[str, int] = field(default_factory=dict)

    def apply(self, op: Op, limit: int) -> object:
        kind, arg, value = op
        if kind == "set":
            if value is None:
                self.deadline.pop(arg, None)
            else:
                self.deadline[arg] = value
            return None
        assert value is not None
        due = sorted(
            (d, j) for j, d in self.deadline.items() if _partition_of(j) == int(arg) and d <= value
        )
        if kind == "has":
            return bool(due)
        out = [j for _, j in due[:limit]]
        for j in out:
            del self.deadline[j]
        return out


def _apply(due: DueIndex, op: Op, limit: int) -> object:
    kind, arg, value = op
    if kind == "set":
        due.set(_partition_of(arg), arg, value)
        return None
    assert value is not None
    if kind == "has":
        return due.has_due(int(arg), value)
    return due.pop_due(int(arg), value, limit)


def _drain(due: DueIndex) -> list[list[str]]:
    return [due.pop_due(p, 10**9, 10**6) for p in PARTITIONS]


@settings(max_examples=300, deadline=None)
@given(
    before=st.lists(ops, max_size=25),
    batch=st.lists(ops, max_size=25),
    after=st.lists(ops, max_size=25),
    limit=st.integers(1, 4),
    keep=st.booleans(),
)
def test_a_rolled_back_batch_behaves_as_if_it_never_happened(
    before: list[Op], batch: list[Op], after: list[Op], limit: int, keep: bool
) -> None:
    due = DueIndex()
    due.reset(PARTITIONS)
    model = Model()
    for op in before:
        assert _apply(due, op, limit) == model.apply(op, limit), op
    due.begin()
    shadow = Model(dict(model.deadline))
    for op in batch:
        assert _apply(due, op, limit) == shadow.apply(op, limit), op
    if keep:
        due.commit()
        model = shadow
    else:
        due.rollback()
    for op in after:
        assert _apply(due, op, limit) == model.apply(op, limit), op
    assert len(due) == len(model.deadline)
    assert _drain(due) == [
        [j for _, j in sorted((d, j) for j, d in model.deadline.items() if _partition_of(j) == p)]
        for p in PARTITIONS
    ]
