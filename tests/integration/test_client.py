"""The client SDK against a running cronlog (issue 17): trigger and wait without the HTTP API.

``examples/trigger_and_wait.py`` is run as another team's service would run it; the SDK's
re-send under one idem_key starts one run; a trigger the fold refuses ends the wait.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cronlog import events as ev
from cronlog.model import JobSpec, RetryPolicy, Schedule, ScheduleKind, main_task
from cronlog.vocabulary import RejectReason
from cronlog_client import CommandProducer, CommandRefused, EventStream
from tests.integration.harness import Cluster

pytestmark = pytest.mark.broker
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "trigger_and_wait.py"


def run_example(cluster: Cluster, *args: str) -> tuple[int, dict[str, object]]:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), *args],
        env=cluster.env(),
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert done.stdout.strip(), done.stderr
    return done.returncode, json.loads(done.stdout.strip().splitlines()[-1])


def test_example_triggers_a_job_and_waits_for_its_outcome(cluster: Cluster) -> None:
    cluster.scheduler()
    cluster.worker()
    code, out = run_example(
        cluster, "--timeout", "80", "--register", "report", "--", "sh", "-c", "echo made-it"
    )
    assert (code, out["state"], out["exit_code"]) == (0, "succeeded", 0), out
    assert out["output_tail"] == "made-it\n"
    # the same job again, failing: the outcome says so, with its exit code
    code, out = run_example(
        cluster, "--timeout", "80", "--register", "broken", "--", "sh", "-c", "exit 3"
    )
    assert (code, out["state"], out["exit_code"]) == (3, "failed", 3), out


def test_a_resent_trigger_starts_one_run_and_an_unknown_job_is_refused(cluster: Cluster) -> None:
    cluster.scheduler()
    cluster.worker()
    spec = JobSpec(
        name="twice",
        schedule=Schedule(kind=ScheduleKind.MANUAL),
        task_specs=main_task(("true",)),
        retry_policy=RetryPolicy(max_attempts=1),
    )
    stream = EventStream(cluster.settings)
    with CommandProducer(cluster.settings) as producer:
        producer.register("twice", spec)
        first = producer.trigger("twice", idem_key="deploy-42")
        again = producer.trigger("twice", idem_key="deploy-42")  # an at-least-once re-send
        assert again.run_id == first.run_id
        outcome = stream.wait_for_outcome(first.run_id, 80, job_id="twice", idem_key="deploy-42")
        assert outcome.state == "succeeded"
        assert [a.event.exit_code for a in outcome.attempts] == [0]
        with pytest.raises(CommandRefused) as refused:
            ghost = producer.trigger("no-such-job")
            stream.wait_for_outcome(
                ghost.run_id,
                60,
                job_id="no-such-job",
                idem_key=ghost.idem_key,
                start={ghost.events_partition: ghost.events_offset},
            )
        assert refused.value.reason == RejectReason.UNKNOWN_JOB
    # every event of the job, each once: one run, even though its trigger was sent twice
    seen = list(stream.events(job_id="twice", timeout_s=5))
    assert len({e.event_id for e in seen}) == len(seen)
    assert [e.event.run_id for e in seen if isinstance(e.event, ev.RunScheduled)] == [first.run_id]
    assert sum(isinstance(e.event, ev.RunSucceeded) for e in seen) == 1
    run_only = list(stream.events(job_id="twice", run_id=first.run_id, timeout_s=3))
    assert run_only and all(getattr(e.event, "run_id", None) == first.run_id for e in run_only)
