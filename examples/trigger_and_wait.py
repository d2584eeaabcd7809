"""A service triggers a cronlog job and waits for its outcome, through Kafka alone.

No HTTP API: the command goes onto ``cronlog.commands`` with ``cronlog_client.CommandProducer``
and the outcome is read from ``cronlog.run-events`` with ``cronlog_client.EventStream``
(docs/client.md). ``tests/integration/test_client.py`` runs it against a running cronlog.

    python examples/trigger_and_wait.py [--timeout 60] [--idem-key KEY] [--tenant default]
        [--register] JOB_ID [-- ARGV...]

``KAFKA_BOOTSTRAP``, ``CRONLOG_TOPIC_PREFIX`` and the ``CRONLOG_KAFKA_*`` security variables
say where the cluster is (``KafkaSettings``). ``--register`` first registers JOB_ID as a
manual job running ARGV (one attempt): the register and the trigger share the job's
partition, so the fold sees them in that order and the trigger needs no wait in between.

Prints the outcome as one JSON line and exits 0 (succeeded), 3 (failed or cancelled),
4 (the fold refused the trigger: unknown job, wrong tenant, ...) or 124 (not ended in time).
Re-running with the same ``--idem-key`` names the same run and never starts a second one.
"""

from __future__ import annotations

import argparse
import json
import sys

from cronlog.events import TaskFailed, TaskSucceeded
from cronlog.model import JobSpec, RetryPolicy, Schedule, ScheduleKind, main_task
from cronlog_client import (
    CommandProducer,
    CommandRefused,
    EventStream,
    OutcomeTimeout,
    new_idem_key,
)
from topology.kafka.config import KafkaSettings


def main(argv: list[str] | None = None) -> int:
    """Trigger the job, wait, print the outcome; the exit code says how the run ended."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("job_id")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait")
    parser.add_argument("--idem-key", help="the trigger's idem_key (default: a fresh one)")
    parser.add_argument("--tenant", default="default")
    parser.add_argument("--register", action="store_true", help="register a manual job first")
    parser.add_argument("argv", nargs="*", help="the job's command, with --register")
    args = parser.parse_args(argv)

    settings = KafkaSettings()
    with CommandProducer(settings, tenant=args.tenant) as producer:
        if args.register:
            spec = JobSpec(
                name=args.job_id,
                schedule=Schedule(kind=ScheduleKind.MANUAL),
                task_specs=main_task(tuple(args.argv)),
                retry_policy=RetryPolicy(max_attempts=1),
                tenant=args.tenant,
            )
            producer.register(args.job_id, spec)
        # Keep the key: after a timeout or a crash, trigger again with the same one.
        run = producer.trigger(args.job_id, idem_key=args.idem_key or new_idem_key())
    stream = EventStream(settings)
    try:
        outcome = stream.wait_for_outcome(
            run.run_id,
            args.timeout,
            job_id=run.job_id,
            idem_key=run.idem_key,
            start={run.events_partition: run.events_offset},
        )
    except CommandRefused as exc:
        print(json.dumps({"run_id": run.run_id, "refused": str(exc.reason), "detail": exc.detail}))
        return 4
    except OutcomeTimeout:
        print(json.dumps({"run_id": run.run_id, "state": "unknown", "timeout_s": args.timeout}))
        return 124
    last = outcome.attempts[-1].event if outcome.attempts else None
    print(
        json.dumps(
            {
                "job_id": outcome.job_id,
                "run_id": outcome.run_id,
                "idem_key": run.idem_key,
                "state": outcome.state,
                "exit_code": last.exit_code
                if isinstance(last, TaskSucceeded | TaskFailed)
                else None,
                "output_tail": last.output_tail
                if isinstance(last, TaskSucceeded | TaskFailed)
                else "",
            }
        )
    )
    return 0 if outcome.state == "succeeded" else 3


if __name__ == "__main__":
    sys.exit(main())
