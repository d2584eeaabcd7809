"""The SDK refuses, before sending, a command the fold would dead-letter at decode (an
idem_key over 512 characters, a job_id over 128 or with a space or NUL): otherwise send()
reports success and wait_for_outcome waits out its timeout, since a dead letter has no
CommandRejected (found by an adversarial run). The broker is unreachable: the ValueError
comes at once."""

from __future__ import annotations

import pytest

from cronlog import commands as cmd
from cronlog_client import CommandProducer
from topology.kafka.config import KafkaSettings


@pytest.mark.parametrize(
    ("job_id", "idem_key"),
    [("j", "x" * 600), ("j" * 200, "k"), ("a b", "k"), ("a\x00b", "k")],
    ids=["idem-600", "job-200", "job-space", "job-nul"],
)
def test_sdk_refuses_what_the_fold_cannot_decode(job_id: str, idem_key: str) -> None:
    settings = KafkaSettings(bootstrap="127.0.0.1:9")
    config = {"message.timeout.ms": 500, "log_level": 0}
    with (
        CommandProducer(settings, producer_config=config) as producer,
        pytest.raises(ValueError, match="the scheduler would refuse this command"),
    ):
        producer.send(job_id, cmd.PauseJob(), idem_key=idem_key, timeout_s=1)
