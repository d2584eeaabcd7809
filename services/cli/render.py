"""Rich tables for the CLI: jobs, runs, one run. Instants are shown local and UTC."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from rich.table import Table
from rich.text import Text

STATE_STYLES = {
    "succeeded": "green",
    "failed": "bold red",
    "running": "yellow",
    "ready": "cyan",
    "scheduled": "cyan",
    "queued": "blue",
    "buffered": "blue",
    "retrying": "magenta",
    "upstream_failed": "red",
    "skipped": "dim",
    "pending": "dim",
    "cancelled": "red",
    "active": "green",
    "paused": "yellow",
    "deleted": "dim",
    "alive": "green",
    "lost": "bold red",
}


def local_and_utc(value: str | None, with_date: bool = False) -> str:
    """Return an ISO instant as ``HH:MM:SS TZ / HH:MM:SSZ`` (local / UTC), ``-`` for None."""
    if not value:
        return "-"
    instant = datetime.fromisoformat(value)
    fmt = "%Y-%m-%d %H:%M:%S" if with_date else "%H:%M:%S"
    local = instant.astimezone()
    utc = f"{instant.strftime(fmt)}Z"
    if local.utcoffset() == instant.utcoffset():  # the local zone is UTC: say it once
        return utc
    return f"{local.strftime(fmt)} {local.tzname()} / {utc}"


def seconds(value: float | None) -> str:
    """Return a duration in seconds for display (``0.254 s``), ``-`` if None."""
    return "-" if value is None else f"{value:.3f}s"


def styled(value: str | None) -> Text:
    """Return a state or status with its colour."""
    return Text(value or "-", style=STATE_STYLES.get(value or "", ""))


def _or_dash(value: Any) -> str:
    return "-" if value is None else str(value)


def jobs_table(jobs: list[dict[str, Any]]) -> Table:
    """Return the table of ``cronlog jobs list``."""
    table = Table(title="jobs")
    for col in (
        "job_id",
        "name",
        "schedule",
        "status",
        "next run",
        "runs",
        "queued",
        "ok",
        "failed",
        "last run",
    ):
        table.add_column(col)
    for job in jobs:
        s = job["schedule"]
        when = {
            "cron": f"{s.get('expression')} ({s.get('timezone')})",
            "once": f"once at {s.get('run_at')}",
            "after": f"after {s.get('job_id')} ({s.get('on')})",
        }.get(s["type"], "manual")
        last = job.get("last_run") or {}
        c = job["counts"]
        table.add_row(
            job["job_id"],
            job["name"],
            when,
            styled(job["status"]),
            local_and_utc(job.get("next_run_at")),
            str(c["runs"]),
            str(c.get("queued", 0)),
            str(c["succeeded"]),
            str(c["failed"]),
            styled(last.get("state")) if last else "-",
        )
    return table


def job_table(job: dict[str, Any]) -> Table:
    """Return the two-column table of ``cronlog jobs get``."""
    table = Table(title=f"job {job['job_id']}", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    rows: list[tuple[str, Any]] = [
        ("name", job["name"]),
        ("status", styled(job["status"])),
        ("schedule", " ".join(f"{k}={v}" for k, v in job["schedule"].items() if v is not None)),
        ("command", " ".join(job["command"])),
        ("timeout", seconds(job["timeout_s"])),
        ("lease ttl", seconds(job["lease_ttl_s"])),
        ("retry policy", " ".join(f"{k}={v}" for k, v in job["retry_policy"].items())),
        ("next run", local_and_utc(job.get("next_run_at"), True)),
        ("created", local_and_utc(job.get("created_at"), True)),
        ("runs", " ".join(f"{k}={v}" for k, v in job["counts"].items())),
        ("tags", " ".join(job.get("tags") or []) or "-"),
    ]
    for name, value in rows:
        table.add_row(name, value)
    return table


def runs_table(runs: list[dict[str, Any]], title: str = "runs") -> Table:
    """Return a runs table: job, run, scheduled_for (local / UTC), trigger lag, state, attempt,
    worker, exit code."""
    table = Table(title=title)
    # On a narrow terminal every column shrinks with an ellipsis (a folded or wrapped column
    # would be squeezed to nothing); the worker id, long and least useful, is capped.
    # The job and run ids are shown whole: they are what the other commands take.
    table.add_column("job", no_wrap=True, overflow="fold", min_width=8)
    table.add_column("run", no_wrap=True, overflow="fold", min_width=9)
    for col in ("scheduled for", "lag", "state", "try", "worker", "exit"):
        table.add_column(
            col, no_wrap=True, overflow="ellipsis", max_width=12 if col == "worker" else None
        )
    for run in runs:
        manual = "" if run["trigger"] in ("schedule", "catchup") else f" ({run['trigger']})"
        table.add_row(
            run["job_id"],
            run["run_id"],
            local_and_utc(run["scheduled_for"]) + manual,
            seconds(run.get("trigger_lag_s")),
            styled(run["state"]),
            str(run["attempt"]),
            _or_dash(run.get("claimed_by")),
            outcome(run),
        )
    return table


def outcome(run: dict[str, Any]) -> str:
    """Return a run's exit cell: the exit code, its failure kind unless a nonzero exit says
    it, and for a DAG the task it is the outcome of (``decided_by``: for a failed run the
    task that failed it, e.g. ``5 transform``, ``timeout load``)."""
    kind = run.get("failure_kind")
    parts = [] if run.get("exit_code") is None else [str(run["exit_code"])]
    parts += [kind] if kind and kind != "nonzero_exit" else []
    task = run.get("decided_by")
    parts += [task] if task and len(run.get("tasks") or ()) > 1 else []
    return " ".join(parts) or "-"


def run_table(run: dict[str, Any]) -> Table:
    """Return the two-column table of ``cronlog run``."""
    table = Table(title=f"run {run['run_id']}", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    table.add_row("job", f"{run['job_id']} ({run.get('job_name')})")
    table.add_row("state", styled(run["state"]))
    table.add_row("trigger", run["trigger"])
    for name in (
        "scheduled_for",
        "ready_at",
        "claimed_at",
        "started_at",
        "finished_at",
        "lease_expires_at",
        "retry_at",
    ):
        table.add_row(name, local_and_utc(run.get(name), True))
    table.add_row("trigger lag", seconds(run.get("trigger_lag_s")))
    table.add_row("decided by", _or_dash(run.get("decided_by")))
    for name in ("attempt", "epoch", "claimed_by", "exit_code", "failure_kind"):
        table.add_row(name, _or_dash(run.get(name)))
    table.add_row("output tail", Text(run.get("output_tail") or ""))
    return table


def _ran(ti: dict[str, Any]) -> bool:
    """True if a task instance ever ran: only then has it an attempt to show (the console's
    ``graph.ran``; kept here too so the CLI imports nothing of the API's)."""
    return bool(
        ti.get("claimed_at")
        or ti.get("started_at")
        or ti.get("state") in ("running", "retrying")
        or int(ti.get("attempt") or 1) > 1
    )


def _duration(ti: dict[str, Any]) -> str:
    if not ti.get("started_at") or not ti.get("finished_at"):
        return "-"
    started = datetime.fromisoformat(ti["started_at"])
    return seconds((datetime.fromisoformat(ti["finished_at"]) - started).total_seconds())


def _depths(depends_on: dict[str, list[str]]) -> dict[str, int]:
    """Return each task's depth in the DAG (roots 0; else 1 + its deepest upstream)."""
    depth: dict[str, int] = {}

    def of(task: str, seen: frozenset[str] = frozenset()) -> int:
        if task not in depth:
            ups = [u for u in depends_on.get(task, []) if u not in seen]  # cycles: not ours
            depth[task] = 1 + max((of(u, seen | {task}) for u in ups), default=-1)
        return depth[task]

    for task in depends_on:
        of(task)
    return depth


def tasks_table(run: dict[str, Any], job_tasks: list[dict[str, Any]]) -> Table:
    """Return the task-instances table of ``cronlog run``: one row per task, in the run's
    order, indented by its depth in the DAG.

    Args:
        run: the run document (``task_instances``).
        job_tasks: the job definition's ``tasks`` (for ``depends_on``); empty for a one-task
            job or when the job could not be read.
    """
    deps = {t["name"]: list(t.get("depends_on") or []) for t in job_tasks}
    depth = _depths(deps)
    table = Table(title=f"tasks of run {run['run_id']}")
    for col in ("task", "depends on", "state", "try", "worker", "duration"):
        table.add_column(col, no_wrap=True)
    for ti in run.get("task_instances") or []:
        name = ti["task"]
        table.add_row(
            "  " * depth.get(name, 0) + name,
            ", ".join(deps.get(name, [])) or "-",
            styled(ti["state"]),
            str(ti["attempt"]) if _ran(ti) else "-",
            _or_dash(ti.get("worker_id")),
            _duration(ti),
        )
    return table


def applied(body: dict[str, Any], action: str, answer: Any) -> str:
    """Return the one-line report of ``cronlog jobs apply`` for one job."""
    answer = answer or {}
    job_id = answer.get("job_id") or body.get("job_id")
    if answer.get("status") == "accepted":
        return f"{job_id}: {action}: accepted, not visible yet (see {answer['location']})"
    return f"{job_id}: {action} (next run {local_and_utc(answer.get('next_run_at'))})"


def tick(instant: datetime, tz: str) -> dict[str, str]:
    """Return a tick as previews show it (the API's shape): ``{utc: ISO Z, local: ISO with the
    offset of zone ``tz``}``, milliseconds."""
    utc = instant.astimezone(ZoneInfo("UTC")).isoformat(timespec="milliseconds")
    return {
        "utc": utc.replace("+00:00", "Z"),
        "local": instant.astimezone(ZoneInfo(tz)).isoformat(timespec="milliseconds"),
    }


def ticks_table(ticks: list[dict[str, str]], title: str = "ticks") -> Table:
    """Return the table of a preview: UTC instant, wall time in the job's zone, its offset."""
    table = Table(title=title)
    for col in ("#", "utc", "local", "offset"):
        table.add_column(col, no_wrap=True)
    for n, t in enumerate(ticks, 1):
        local = datetime.fromisoformat(t["local"])
        table.add_row(
            str(n), t["utc"], local.strftime("%Y-%m-%d %H:%M:%S %a"), local.strftime("%z")
        )
    return table


def skipped_table(skipped: list[dict[str, Any]], title: str = "skipped ticks") -> Table:
    """Return the table of ``cronlog jobs skipped``: tick, reason, when it was skipped."""
    table = Table(title=title)
    for col in ("scheduled for", "reason", "skipped at"):
        table.add_column(col, no_wrap=True)
    for s in skipped:
        table.add_row(
            local_and_utc(s["scheduled_for"], True), s["reason"], local_and_utc(s["at"], True)
        )
    return table


def backfill_table(answer: dict[str, Any]) -> Table:
    """Return the table of ``cronlog jobs backfill``: each tick and its run."""
    verb = "would run" if answer.get("dry_run") else "backfilled"
    table = Table(title=f"{answer['job_id']}: {verb} {len(answer['runs'])} tick(s)")
    for col in ("scheduled for", "run"):
        table.add_column(col, no_wrap=True)
    for r in answer["runs"]:
        table.add_row(local_and_utc(r["scheduled_for"], True), _or_dash(r["run_id"]))
    return table


def dead_letters_table(letters: list[dict[str, Any]]) -> Table:
    """Return the table of ``cronlog dead-letters list``: newest first."""
    table = Table(title="dead letters")
    for col in (
        "dead-lettered at",
        "job",
        "run",
        "task",
        "attempt",
        "kind",
        "exit",
        "replays",
        "output tail",
    ):
        table.add_column(col, no_wrap=col != "output tail")
    for d in letters:
        table.add_row(
            local_and_utc(d["dead_lettered_at"], True),
            d["job_id"],
            d["run_id"],
            d["task"],
            str(d["attempt"]),
            d["failure_kind"],
            str(d["exit_code"]),
            ", ".join(d["replays"]),
            d["output_tail"].rstrip()[-80:],  # its trailing newline made each row two lines
        )
    return table


def replays_table(answer: dict[str, Any]) -> Table:
    """Return the table of ``cronlog dead-letters replay``: each dead letter and its new run."""
    table = Table(title=f"replayed {len(answer['replays'])} dead letter(s)")
    for col in ("job", "run", "task", "replay run"):
        table.add_column(col, no_wrap=True)
    for r in answer["replays"]:
        table.add_row(r["job_id"], r["run_id"], r["task"], r["replay_run_id"])
    return table


def workers_table(workers: list[dict[str, Any]]) -> Table:
    """Return the table of ``cronlog workers list``: one row per worker, its held leases."""
    table = Table(title="workers")
    for col in ("worker", "host", "pid", "slots", "free", "leases", "last heartbeat", "age"):
        table.add_column(col, no_wrap=col != "leases")
    table.add_column("state")
    for w in workers:
        leases = ", ".join(f"{le['run_id'][:9]}/{le['task']}#{le['attempt']}" for le in w["leases"])
        table.add_row(
            w["worker_id"],
            w["host"],
            str(w["pid"]),
            str(w["slots"]),
            str(w["free_slots"]),
            leases or "-",
            local_and_utc(w["last_heartbeat_at"]),
            seconds(w["age_s"]),
            styled(w["state"]),
        )
    return table


def fields_table(answer: dict[str, Any], title: str) -> Table:
    """Return a two-column table of a flat answer (nested values shown as ``k=v`` pairs)."""
    table = Table(title=title, show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    for name, value in answer.items():
        if isinstance(value, dict):
            value = " ".join(f"{k}={v}" for k, v in value.items())
        table.add_row(name.replace("_", " "), "-" if value is None else str(value))
    return table
