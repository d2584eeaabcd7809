"""The replication of cronlog's topics for a broker count (topology/kafka/replication.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from topology.kafka.replication import replication_for


@pytest.mark.parametrize(
    ("brokers", "override", "factor", "min_insync", "warned"),
    [
        (1, 0, 1, 1, True),
        (2, 0, 2, 1, True),
        (3, 0, 3, 2, False),
        (5, 0, 3, 2, False),
        (5, 5, 5, 4, False),
        (3, 1, 1, 1, True),
    ],
)
def test_replication_follows_the_broker_count(
    brokers: int, override: int, factor: int, min_insync: int, warned: bool
) -> None:
    r = replication_for(brokers, override)
    assert (r.factor, r.min_insync, bool(r.warning)) == (factor, min_insync, warned)
    assert r.topic_config() == {"min.insync.replicas": str(min_insync)}


def test_one_broker_is_said_to_have_no_redundancy() -> None:
    assert replication_for(1).warning.startswith(
        "cluster has 1 broker: replication factor 1, no redundancy"
    )


@pytest.mark.parametrize(("brokers", "override"), [(0, 0), (1, -1), (2, 3)])
def test_impossible_replication_is_refused_naming_it(brokers: int, override: int) -> None:
    with pytest.raises(ValueError, match=r"broker|replication_factor"):
        replication_for(brokers, override)


@given(st.integers(1, 50), st.integers(0, 50))
def test_one_broker_loss_never_stops_acks_all_writes(brokers: int, override: int) -> None:
    if override > brokers:
        return
    r = replication_for(brokers, override)
    assert 1 <= r.min_insync <= r.factor <= brokers
    # with one replica lost, the in-sync ones left still meet min.insync.replicas
    assert r.factor == 1 or r.factor - 1 >= r.min_insync
    assert r.factor >= min(3, brokers) or override
