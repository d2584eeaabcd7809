"""The examples of docs/jobs-reference.md: one YAML job file per feature, each checked against
the JSON Schema and the API's own model when the reference is generated and by its unit test
(``tests/unit/test_jobs_reference.py``), so none can drift from what ``jobs apply`` takes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Example:
    """One example of the reference.

    Attributes:
        title: the heading of its section.
        text: a sentence or two on what it shows (Markdown).
        yaml: the job file, as ``cronlog jobs apply -f FILE`` takes it.
    """

    title: str
    text: str
    yaml: str


EXAMPLES: tuple[Example, ...] = (
    Example(
        "The smallest job",
        "Only `name` and `schedule.type` are required; a job without `job_id` gets one made "
        "up. `command` is an argv list, run without a shell.",
        """\
name: hello
schedule: {type: cron, expression: "*/5 * * * *"}   # every 5 minutes, UTC
command: ["echo", "hello"]
""",
    ),
    Example(
        "A cron schedule in a time zone, with seconds",
        "`expression` has 5 fields, or 6 with seconds first; `timezone` is an IANA zone "
        "(default `UTC`), and DST is handled per `dst_gap` / `dst_overlap`.",
        """\
job_id: berlin-report
name: report at 02:30 Berlin time
schedule:
  type: cron
  expression: "0 30 2 * * *"    # 6 fields: second minute hour day month weekday
  timezone: Europe/Berlin
command: ["./report.sh"]
""",
    ),
    Example(
        "Once, every, manual",
        "A `once` job fires at `run_at` (ISO 8601 with a zone; the CLI also takes `run_in_s`, "
        "seconds from now); an `every` job each `interval_s` seconds; a `manual` job only "
        "when triggered (`cronlog jobs trigger JOB`). One file may hold several jobs.",
        """\
job_id: migrate-once
name: one-off migration
schedule: {type: once, run_at: "2030-01-01T03:00:00Z"}
command: ["./migrate.sh"]
---
job_id: poll
name: poll every 90 s
schedule: {type: every, interval_s: 90}
command: ["./poll.sh"]
---
job_id: on-demand
name: run when asked
schedule: {type: manual}
command: ["./deploy.sh"]
""",
    ),
    Example(
        "Task kinds: exec, shell, python, http",
        "`kind` says what the worker runs: `exec` (`command`, the default), `shell` "
        "(`shell`, by /bin/sh -c), `python` (`callable`, `module:function`, called with the "
        "run's context; its module must be one the worker may import, "
        "`CRONLOG_PYTHON_MODULES`) or `http` (`http`).",
        """\
job_id: kinds
name: one task of each kind
schedule: {type: manual}
tasks:
  - name: argv
    command: ["date", "-u"]
  - name: sh
    kind: shell
    shell: 'echo "run $CRONLOG_RUN_ID, attempt $CRONLOG_ATTEMPT"'
  - name: py
    kind: python
    callable: "myteam.jobs:refresh_cache"
  - name: ping
    kind: http
    http: {url: "https://example.com/health", method: GET, success_codes: [200]}
""",
    ),
    Example(
        "Timeouts",
        "`timeout_s` (default 3600): the worker sends SIGTERM after this many seconds, and "
        "SIGKILL `grace_s` later; `run_timeout_s` bounds a whole run; a task may set its own "
        "`timeout_s`.",
        """\
job_id: bounded
name: a task that may not hang
schedule: {type: cron, expression: "0 * * * *"}
timeout_s: 120
grace_s: 5
run_timeout_s: 600
command: ["./sync.sh"]
""",
    ),
    Example(
        "Retries",
        "`retry_policy.max_attempts` counts the first attempt (1: no retry); the delay grows "
        "per `backoff` from `base_s`, capped at `max_s`, less up to `jitter` of it; "
        "`retry_on` and `non_retryable_exit_codes` send a failure to the dead letters at once.",
        """\
job_id: flaky-fetch
name: fetch, retried
schedule: {type: cron, expression: "*/10 * * * *"}
command: ["./fetch.sh"]
retry_policy:
  max_attempts: 4
  backoff: exponential      # 5 s, 10 s, 20 s (constant, linear, exponential)
  base_s: 5
  max_s: 60
  jitter: 0.1
  retry_on: [nonzero_exit, timeout]
  non_retryable_exit_codes: [2]   # exit 2 means bad input: no retry
""",
    ),
    Example(
        "A DAG: tasks and depends_on",
        "With `tasks`, leave the job-level `command` out. A task starts once those it "
        "`depends_on` ended as its `trigger_rule` asks (default `all_success`); each task may "
        "override `retry_policy`, `timeout_s` and `lease_ttl_s`.",
        """\
job_id: etl
name: extract, transform, load
schedule: {type: cron, expression: "0 2 * * *", timezone: America/New_York}
tasks:
  - name: extract
    command: ["./extract.sh"]
  - name: transform
    command: ["./transform.sh"]
    depends_on: [extract]
    retry_policy: {max_attempts: 3, backoff: constant, base_s: 30}
  - name: load
    command: ["./load.sh"]
    depends_on: [transform]
    timeout_s: 900
""",
    ),
    Example(
        "Trigger rules",
        "Airflow's rules: `all_success`, `all_failed`, `all_done`, `one_success`, "
        "`one_failed`, `none_failed`, `none_failed_min_one_success`, `always`. A cleanup that "
        "runs whatever happened is `all_done`; an alert only on failure is `one_failed`. A run "
        "that failed is summarised by the task that failed it, not by its cleanup.",
        """\
job_id: with-cleanup
name: build, then clean up and alert
schedule: {type: manual}
tasks:
  - name: build
    command: ["make"]
  - name: cleanup
    command: ["make", "clean"]
    depends_on: [build]
    trigger_rule: all_done       # runs whether build succeeded or failed
  - name: alert
    kind: shell
    shell: "echo build failed >&2"
    depends_on: [build]
    trigger_rule: one_failed     # runs only when build failed; else skipped
""",
    ),
)
"""The reference's examples, in the order of its sections."""
