"""Ingress relay settings (env prefix ``CRONLOG_``)."""

from __future__ import annotations

from pydantic import Field

from topology.kafka.config import KafkaSettings


class IngressSettings(KafkaSettings):
    """Settings of one ingress relay process.

    Attributes:
        instance_id: the suffix of its transactional.id (``<prefix>cronlog-ingress-<id>``):
            stable across restarts, so that a restart fences the previous incarnation; unique
            per live relay. Env ``CRONLOG_INSTANCE_ID``. Default ``ingress-1``.
        refresh_s: how often the relay looks for new ingress topics, seconds (librdkafka's
            ``topic.metadata.refresh.interval.ms``): a tenant's topic created while it runs
            is read within about this long. Default 5.
        transaction_timeout_s: the transactions' timeout, seconds. Default 10.
        metrics_port: TCP port of its Prometheus metrics; env ``CRONLOG_METRICS_PORT``.
            Default 9466; 0 picks an ephemeral port, -1 serves none.
        metrics_host: interface the metrics are served on. Default ``127.0.0.1``.
    """

    instance_id: str = Field(default="ingress-1", min_length=1, max_length=200)
    refresh_s: float = Field(default=5.0, ge=0.1, le=600)
    transaction_timeout_s: float = Field(default=10.0, ge=1, le=900)
    metrics_port: int = Field(default=9466, ge=-1, le=65535)
    metrics_host: str = "127.0.0.1"

    def group(self) -> str:
        """Return the consumer group whose committed offsets are the relay's progress."""
        return f"{self.topic_prefix}cronlog-ingress"

    def transactional_id(self) -> str:
        """Return the relay's transactional.id."""
        return f"{self.topic_prefix}cronlog-ingress-{self.instance_id}"
