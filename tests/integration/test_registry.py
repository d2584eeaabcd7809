"""A scheduler with ``CRONLOG_SCHEMA_REGISTRY_URL`` set, against the real broker (issue 17).

No registry server runs on this machine (docs/client.md, "Confluent framing": what was
tried), so the scheduler gets confluent-kafka's in-memory registry (``mock://``), private to
its process. That still proves the wiring of the real process: it registers cronlog's
schemas at start under the TopicNameStrategy subjects, keeps folding single-object commands,
and reads Confluent framing through the registry (an id the registry does not know is a dead
letter naming that id, not "no registry is configured").
"""

from __future__ import annotations

import time

import pytest

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.model import JobSpec, Schedule, ScheduleKind, main_task
from tests.integration.harness import Cluster, DeadLetterLog, EventLog
from topology.wire.codec import encode_command

pytestmark = pytest.mark.broker
SPEC = JobSpec(
    name="r", schedule=Schedule(kind=ScheduleKind.MANUAL), task_specs=main_task(("true",))
)


def test_scheduler_with_a_registry_registers_and_reads_both_framings(
    cluster: Cluster, events: EventLog
) -> None:
    proc = cluster.scheduler(CRONLOG_SCHEMA_REGISTRY_URL="mock://cronlog-it")
    idem = cluster.send("plain", cmd.RegisterJob(spec=SPEC))
    framed = cmd.Envelope(idem_key="cf-1", job_id="framed", command=cmd.RegisterJob(spec=SPEC))
    body = encode_command(framed)[10:]
    cluster.send_raw(b"framed", b"\x00" + (4242).to_bytes(4, "big") + body)
    assert events.wait_until(
        lambda log: any(e.idem_key == idem for e in log.of_type(ev.JobRegistered, "plain")), 90
    ), proc.log_tail()
    letters = DeadLetterLog(cluster.settings)
    try:
        deadline = time.monotonic() + 30
        while not letters.records and time.monotonic() < deadline:
            letters.poll(0.5)
        assert [d.reason for d in letters.letters()] == [
            "schema id 4242 is unknown to the registry"
        ]
    finally:
        letters.close()
    log = proc.log_tail(200)
    prefix = cluster.settings.topic_prefix
    assert f"action=schema_registered subject={prefix}cronlog.commands-value" in log
    assert f"action=schema_registered subject={prefix}cronlog.run-events-value" in log
