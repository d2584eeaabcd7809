"""The replication of cronlog's topics: a rule of the broker count, pure (no I/O)."""

from __future__ import annotations

from dataclasses import dataclass

WANTED_REPLICAS = 3
"""Replication factor on a cluster of 3 or more brokers: one broker may be lost (killed,
restarted, replaced) while ``acks=all`` writes go on with the two in-sync replicas left, and a
second loss stops writes instead of losing them. Kafka's own recommendation for durable topics
(Kafka docs, "Operations: Production deployment": replication factor 3, min.insync.replicas 2,
producers with acks=all)."""


@dataclass(frozen=True, slots=True)
class Replication:
    """How cronlog's topics are replicated on one cluster.

    Attributes:
        factor: replicas per partition (topic creation's replication factor).
        min_insync: ``min.insync.replicas`` of every topic: how many replicas must hold a
            record before an ``acks=all`` write is acknowledged. ``factor - 1`` (at least 1),
            so that the loss of one broker never stops writes.
        warning: what an operator must know about this choice (no redundancy, or a factor
            below the cluster's size that an override asked for); empty when it is the rule.
    """

    factor: int
    min_insync: int
    warning: str = ""

    def topic_config(self) -> dict[str, str]:
        """Return the topic-level config this replication adds (``min.insync.replicas``)."""
        return {"min.insync.replicas": str(self.min_insync)}


def replication_for(brokers: int, override: int = 0) -> Replication:
    """Choose the replication factor and ``min.insync.replicas`` for a cluster.

    Args:
        brokers: brokers in the cluster's metadata now (>= 1).
        override: a replication factor asked for explicitly (``CRONLOG_REPLICATION_FACTOR``);
            0 = the rule: ``WANTED_REPLICAS`` on 3 or more brokers, else every broker.

    Returns:
        The replication; its ``warning`` is set when the topics get fewer than 3 replicas.

    Raises:
        ValueError: ``brokers`` < 1, ``override`` < 0, or an override above ``brokers``
            (Kafka would refuse the creation with INVALID_REPLICATION_FACTOR; say it first).
    """
    if brokers < 1:
        raise ValueError(f"a cluster has at least 1 broker, got {brokers}")
    if override < 0:
        raise ValueError(
            f"replication_factor must be >= 0 (0: from the broker count), got {override}"
        )
    if override > brokers:
        raise ValueError(
            f"replication_factor={override} but the cluster has {brokers} broker"
            f"{'s' if brokers != 1 else ''} (are some down?)"
        )
    factor = override or min(WANTED_REPLICAS, brokers)
    min_insync = max(1, factor - 1)
    warning = ""
    if factor == 1:
        warning = (
            f"cluster has {brokers} broker{'s' if brokers != 1 else ''}: replication factor 1, "
            "no redundancy (a lost broker disk loses the log of record)"
        )
    elif factor < WANTED_REPLICAS:
        warning = (
            f"cluster has {brokers} brokers: replication factor {factor}, min.insync.replicas "
            f"{min_insync}: a broker loss leaves one copy of new writes"
        )
    return Replication(factor, min_insync, warning)
