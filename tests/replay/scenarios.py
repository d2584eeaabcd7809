"""The scenarios of the golden command logs, each a function that drives a ``Sim``.

Run once by ``tests/replay/record.py`` to write ``logs/<name>.jsonl``; never by the tests. A
scenario names the schema version it is written in: features a version lacks are not used in
its logs (v1 has no backfill, cancel or replay; v2 no DAGs, reruns or after jobs).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.ledger import FLEET, LEDGER_KEY
from cronlog.model import (
    AfterOn,
    BackoffKind,
    CatchupPolicy,
    DstGapPolicy,
    DstOverlapPolicy,
    HttpHeader,
    HttpTask,
    Isolation,
    JobSpec,
    OverlapPolicy,
    RetryPolicy,
    Schedule,
    ScheduleKind,
    TaskKind,
    TaskSpec,
    TriggerRule,
    main_task,
)
from cronlog.vocabulary import Reprocess, UpstreamOutcome
from tests.old_shape import old_shape_writer
from tests.replay.sim import OK, Outcome, Sim
from topology.wire.codec import SCHEMA_DIR

S = timedelta(seconds=1)
NO_RETRY = RetryPolicy(max_attempts=1)


def cron(expr: str, tz: str = "UTC", **kw: object) -> Schedule:
    """A cron schedule (keyword overrides as on ``Schedule``)."""
    return Schedule(kind=ScheduleKind.CRON, expression=expr, timezone=tz, **kw)  # type: ignore[arg-type]


def job(name: str, schedule: Schedule, **kw: object) -> JobSpec:
    """A one-task exec job running ``true`` (keyword overrides as on ``JobSpec``)."""
    return JobSpec(name=name, schedule=schedule, **{"task_specs": main_task(("true",)), **kw})  # type: ignore[arg-type]


def register(sim: Sim, job_id: str, spec: JobSpec) -> None:
    """Append the RegisterJob of ``job_id``."""
    sim.send(job_id, cmd.RegisterJob(spec=spec), f"register:{job_id}:{sim.now_ms}")


def at(text: str) -> datetime:
    """An aware UTC instant from ``YYYY-MM-DDTHH:MM:SS``."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def runs_of(sim: Sim, job_id: str) -> list[str]:
    """The run_ids of ``job_id``'s runs so far, in order."""
    return [
        e.event.run_id
        for e in sim.events
        if e.job_id == job_id and isinstance(e.event, ev.RunScheduled)
    ]


_ENDS = {
    ev.TaskSucceeded: "succeeded",
    ev.TaskDeadLettered: "failed",
    ev.TaskSkipped: "skipped",
    ev.TaskUpstreamFailed: "upstream_failed",
    ev.TaskCancelled: "cancelled",
}


def snapshot(sim: Sim, job_id: str, run_id: str) -> tuple[cmd.TaskSnapshot, ...]:
    """The task instances of an ended run as a read model saw them (for RerunTask)."""
    tasks: dict[str, list[object]] = {}
    for e in sim.events:
        body = e.event
        if e.job_id != job_id or getattr(body, "run_id", None) != run_id:
            continue
        if isinstance(body, ev.RunScheduled):
            tasks = {t: ["pending", 1, 0] for t in body.tasks}
        elif isinstance(body, ev.TaskClaimed):
            tasks[body.task][1:] = [body.attempt, body.epoch]
        elif type(body) in _ENDS:
            tasks[body.task][0] = _ENDS[type(body)]  # type: ignore[attr-defined]
    return tuple(
        cmd.TaskSnapshot(task=t, state=str(s), attempt=int(a), epoch=int(p))  # type: ignore[call-overload]
        for t, (s, a, p) in tasks.items()
    )


# -- v3: the current schemas ---------------------------------------------------------------


def cron_catchup(sim: Sim) -> None:
    """Minutely jobs (catch-up all / latest / none, and latest with a 10 s misfire grace)
    across 7 minutes with no scheduler, twice."""
    sim.at(at("2026-01-05T10:00:00"))
    window = timedelta(minutes=5)
    register(
        sim,
        "catchup-all",
        job("all", cron("* * * * *", catchup=CatchupPolicy.ALL, catchup_window=window)),
    )
    register(sim, "catchup-latest", job("latest", cron("* * * * *")))
    register(sim, "catchup-none", job("none", cron("* * * * *", catchup=CatchupPolicy.NONE)))
    grace = timedelta(seconds=10)  # the latest missed tick is late too: ``latest`` fires it
    register(sim, "catchup-latest-10s", job("latest 10s", cron("* * * * *", misfire_grace=grace)))
    sim.run_until(at("2026-01-05T10:03:30"))
    sim.run_until(at("2026-01-05T10:10:30"), ticks=False)  # every scheduler down
    sim.run_until(at("2026-01-05T10:13:30"))
    sim.run_until(at("2026-01-05T10:20:40"), ticks=False)  # down again
    sim.run_until(at("2026-01-05T10:22:30"))


def dst_gap(sim: Sim) -> None:
    """Europe/Berlin 02:30 daily across the 2024-03-31 spring-forward gap: shift and skip,
    plus a half-hourly wildcard job that never fires inside the gap."""
    sim.at(at("2024-03-30T00:00:00"))
    register(sim, "gap-shift", job("shift", cron("30 2 * * *", "Europe/Berlin")))
    register(
        sim, "gap-skip", job("skip", cron("30 2 * * *", "Europe/Berlin", dst_gap=DstGapPolicy.SKIP))
    )
    register(sim, "gap-wild", job("wild", cron("*/30 1-3 * * *", "Europe/Berlin")))
    sim.run_until(at("2024-04-01T03:00:00"))


def dst_overlap(sim: Sim) -> None:
    """Europe/Berlin 02:30 daily across the 2024-10-27 fall-back overlap: first, last, both."""
    sim.at(at("2024-10-26T00:00:00"))
    for policy in DstOverlapPolicy:
        register(
            sim,
            f"overlap-{policy.value}",
            job(policy.value, cron("30 2 * * *", "Europe/Berlin", dst_overlap=policy)),
        )
    register(sim, "overlap-wild", job("wild", cron("15 2 * * *", "Europe/Berlin")))
    sim.run_until(at("2024-10-28T03:00:00"))


ETL = (
    TaskSpec(name="extract", command=("extract",)),
    TaskSpec(
        name="transform",
        command=("transform",),
        depends_on=("extract",),
        retry_policy=RetryPolicy(
            max_attempts=2, backoff=2 * S, kind=BackoffKind.CONSTANT, jitter=0.0
        ),
    ),
    TaskSpec(name="load", command=("load",), depends_on=("transform",)),
    TaskSpec(name="validate", command=("validate",), depends_on=("extract",)),
    TaskSpec(name="publish", command=("publish",), depends_on=("load", "validate")),
    TaskSpec(
        name="alert",
        command=("alert",),
        depends_on=("validate",),
        trigger_rule=TriggerRule.ONE_FAILED,
    ),
    TaskSpec(
        name="audit", command=("audit",), depends_on=("load",), trigger_rule=TriggerRule.ALL_FAILED
    ),
    TaskSpec(
        name="notify",
        command=("notify",),
        depends_on=("publish", "alert", "audit"),
        trigger_rule=TriggerRule.ALL_DONE,
    ),
)


def dag(sim: Sim) -> None:
    """A DAG run: a retried task, an upstream failure, one_failed / all_failed / all_done."""
    sim.at(at("2026-02-01T08:00:00"))

    def script(job_id: str, task: str, attempt: int) -> Outcome:
        if (task == "transform" and attempt == 1) or task == "validate":
            return Outcome(after=S, exit_code=1)
        return OK

    sim.script = script
    spec = JobSpec(
        name="etl",
        schedule=Schedule(kind=ScheduleKind.MANUAL),
        task_specs=ETL,
        retry_policy=NO_RETRY,
        max_active_tasks=2,
    )
    register(sim, "etl", spec)
    sim.send("etl", cmd.TriggerJob(), "trigger:etl:1")
    sim.run_until(at("2026-02-01T08:01:00"))


def overlap(sim: Sim) -> None:
    """Every 5 s, runs of 12 s: buffer_one, skip, cancel_previous, and allow capped by
    max_active_runs=1."""
    sim.at(at("2026-03-01T12:00:00"))
    sim.script = lambda job_id, task, attempt: Outcome(after=12 * S)
    every5 = cron("*/5 * * * * *")
    for policy in OverlapPolicy:
        register(sim, f"ov-{policy.value}", job(policy.value, every5, overlap=policy))
    register(sim, "ov-capped", job("capped", every5, max_active_runs=1))
    sim.run_until(at("2026-03-01T12:00:31"))
    for policy in OverlapPolicy:
        sim.send(f"ov-{policy.value}", cmd.PauseJob(), f"pause:ov-{policy.value}")
    sim.send("ov-capped", cmd.PauseJob(), "pause:ov-capped")
    sim.run_until(at("2026-03-01T12:01:00"))


def rerun(sim: Sim) -> None:
    """A DAG run fails at b; b is rerun with its downstream c; the run reopens and succeeds."""
    sim.at(at("2026-03-02T09:00:00"))
    tasks = (
        TaskSpec(name="a", command=("a",)),
        TaskSpec(name="b", command=("b",), depends_on=("a",)),
        TaskSpec(name="c", command=("c",), depends_on=("b",)),
    )
    sim.script = lambda job_id, task, attempt: (
        Outcome(after=S, exit_code=2) if task == "b" and attempt == 1 else OK
    )
    register(
        sim,
        "rr",
        JobSpec(
            name="rr",
            schedule=Schedule(kind=ScheduleKind.MANUAL),
            task_specs=tasks,
        ),
    )
    sim.send("rr", cmd.TriggerJob(), "trigger:rr:1")
    sim.run_until(at("2026-03-02T09:00:10"))
    run_id = runs_of(sim, "rr")[0]
    sim.send(
        "rr",
        cmd.RerunTask(
            run_id=run_id,
            task="b",
            downstream=True,
            scheduled_for=at("2026-03-02T09:00:00"),
            trigger="manual",
            tasks=snapshot(sim, "rr", run_id),
        ),
        "rerun:rr:1",
    )
    sim.run_until(at("2026-03-02T09:00:30"))


def after_job(sim: Sim) -> None:
    """An upstream job whose 2nd run fails; ``after`` jobs on success and on any end."""
    sim.at(at("2026-03-03T06:00:00"))
    sim.script = lambda job_id, task, attempt: (
        Outcome(after=S, exit_code=1) if job_id == "up" and sim.now_ms // 60_000 % 2 else OK
    )
    register(sim, "up", job("up", cron("* * * * *"), retry_policy=NO_RETRY))
    for on in AfterOn:
        register(
            sim,
            f"down-{on.value}",
            job(on.value, Schedule(kind=ScheduleKind.AFTER, after_job_id="up", after_on=on)),
        )
    relayed = 0
    for minute in range(1, 5):
        sim.run_until(at(f"2026-03-03T06:0{minute}:30"))
        for e in sim.events[relayed:]:  # what the after relay appends
            if e.job_id == "up" and isinstance(e.event, ev.RunSucceeded | ev.RunFailed):
                outcome = (
                    UpstreamOutcome.SUCCEEDED
                    if isinstance(e.event, ev.RunSucceeded)
                    else UpstreamOutcome.FAILED
                )
                for on in AfterOn:
                    down = f"down-{on.value}"
                    sim.send(
                        down,
                        cmd.UpstreamRunEnded(
                            upstream_job_id="up",
                            upstream_run_id=e.event.run_id,
                            upstream_scheduled_for=e.event.scheduled_for,
                            outcome=outcome,
                            upstream_event_id=e.event_id,
                        ),
                        f"after:{down}:{e.event.run_id}:{e.event_id}",
                    )
        relayed = len(sim.events)
    sim.run_until(at("2026-03-03T06:05:00"))


def delete_reregister(sim: Sim) -> None:
    """A minutely job deleted mid-run and registered again: new run ids (incarnation 1);
    commands to the deleted job are refused."""
    sim.at(at("2026-03-04T00:00:00"))
    sim.script = lambda job_id, task, attempt: Outcome(after=20 * S)
    register(sim, "phoenix", job("v1", cron("* * * * *")))
    sim.run_until(at("2026-03-04T00:02:10"))
    sim.send("phoenix", cmd.DeleteJob(), "delete:phoenix")
    sim.send("phoenix", cmd.PauseJob(), "pause:phoenix")
    sim.send("phoenix", cmd.TriggerJob(), "trigger:phoenix")
    sim.run_until(at("2026-03-04T00:02:40"))
    register(sim, "phoenix", job("v2", cron("* * * * *"), command=("echo", "v2")))
    sim.run_until(at("2026-03-04T00:04:30"))


def dead_letter_replay(sim: Sim) -> None:
    """Two failed attempts dead-letter a task; a ReplayTask runs it again and it succeeds."""
    sim.at(at("2026-03-05T00:00:00"))
    replayed: set[str] = set()
    sim.script = lambda job_id, task, attempt: (
        OK if sim.now_ms >= to_ms_("2026-03-05T00:00:40") else Outcome(after=S, exit_code=3)
    )
    register(
        sim,
        "flaky",
        job(
            "flaky",
            Schedule(kind=ScheduleKind.MANUAL),
            retry_policy=RetryPolicy(max_attempts=2, backoff=5 * S, jitter=0.5),
        ),
    )
    sim.send("flaky", cmd.TriggerJob(), "trigger:flaky:1")
    sim.run_until(at("2026-03-05T00:00:40"))
    for e in sim.events:
        if isinstance(e.event, ev.TaskDeadLettered) and e.event.run_id not in replayed:
            replayed.add(e.event.run_id)
            sim.send(
                "flaky",
                cmd.ReplayTask(
                    run_id=e.event.run_id,
                    task=e.event.task,
                    scheduled_for=at("2026-03-05T00:00:00"),
                ),
                f"replay:{e.event.run_id}",
            )
    sim.run_until(at("2026-03-05T00:01:00"))


def to_ms_(text: str) -> int:
    """Epoch ms of ``YYYY-MM-DDTHH:MM:SS`` UTC."""
    from cronlog.time import to_ms

    return to_ms(at(text))


def cancel(sim: Sim) -> None:
    """A whole run cancelled mid-task (the holder's renewal and completion are then refused),
    and one task of a DAG run cancelled (the run fails, downstream upstream_failed)."""
    sim.at(at("2026-03-06T00:00:00"))
    sim.script = lambda job_id, task, attempt: Outcome(after=30 * S)
    register(sim, "long", job("long", Schedule(kind=ScheduleKind.MANUAL), lease_ttl=12 * S))
    tasks = (
        TaskSpec(name="p", command=("p",)),
        TaskSpec(name="q", command=("q",)),
        TaskSpec(name="r", command=("r",), depends_on=("p", "q")),
    )
    register(
        sim,
        "pair",
        JobSpec(
            name="pair",
            schedule=Schedule(kind=ScheduleKind.MANUAL),
            task_specs=tasks,
        ),
    )
    sim.send("long", cmd.TriggerJob(), "trigger:long:1")
    sim.send("pair", cmd.TriggerJob(), "trigger:pair:1")
    sim.run_until(at("2026-03-06T00:00:05"))
    sim.send("long", cmd.CancelRun(run_id=runs_of(sim, "long")[0]), "cancel:long:1")
    sim.send("pair", cmd.CancelRun(run_id=runs_of(sim, "pair")[0], task="q"), "cancel:pair:q")
    sim.send("pair", cmd.CancelRun(run_id=runs_of(sim, "pair")[0], task="q"), "cancel:pair:q2")
    sim.run_until(at("2026-03-06T00:01:00"))


def leases_and_input(sim: Sim) -> None:
    """A worker dies (lease expiry, then the retry succeeds), a stale completion, a re-sent
    command, pause/resume with catch-up, backfill, once/every/jitter/run-timeout jobs, and
    records the fold must dead-letter (garbage bytes, wrong partition, key mismatch)."""
    sim.at(at("2026-03-07T00:00:00"))
    died: set[str] = set()

    def script(job_id: str, task: str, attempt: int) -> Outcome:
        if job_id == "mortal" and attempt == 1:
            died.add(job_id)
            return Outcome(after=S, die=True)
        if job_id == "slowpoke":
            return Outcome(after=90 * S)
        return OK

    sim.script = script
    register(
        sim,
        "mortal",
        job(
            "mortal",
            Schedule(kind=ScheduleKind.MANUAL),
            lease_ttl=10 * S,
            retry_policy=RetryPolicy(max_attempts=3, backoff=S, jitter=0.0),
        ),
    )
    sim.send("mortal", cmd.TriggerJob(), "trigger:mortal:1")
    sim.send("mortal", cmd.TriggerJob(), "trigger:mortal:1")  # a client retry: a no-op
    sim.run_until(at("2026-03-07T00:00:30"))
    run_id = runs_of(sim, "mortal")[0]
    sim.send(
        "mortal",
        cmd.CompleteTask(  # the dead worker's zombie completion: stale epoch
            run_id=run_id,
            task="main",
            attempt=1,
            epoch=1,
            worker_id="w1",
            succeeded=True,
            exit_code=0,
            failure_kind=None,
            output_tail="zombie",
            started_at=at("2026-03-07T00:00:00"),
            finished_at=at("2026-03-07T00:00:30"),
        ),
        "complete:zombie",
    )
    sim.send("nobody", cmd.PauseJob(), "pause:nobody")
    register(
        sim, "once", job("once", Schedule(kind=ScheduleKind.ONCE, run_at=at("2026-03-07T00:00:45")))
    )
    register(
        sim, "every", job("every", Schedule(kind=ScheduleKind.EVERY, interval=7 * S), jitter=3 * S)
    )
    register(sim, "slowpoke", job("slow", cron("* * * * *"), run_timeout=40 * S))
    register(sim, "pausy", job("pausy", cron("*/10 * * * * *", catchup=CatchupPolicy.ALL)))
    sim.run_until(at("2026-03-07T00:01:05"))
    sim.send("pausy", cmd.PauseJob(), "pause:pausy")
    sim.run_until(at("2026-03-07T00:01:35"))
    sim.send("pausy", cmd.ResumeJob(catchup=True), "resume:pausy")
    sim.send(
        "pausy",
        cmd.BackfillJob(
            ticks=(at("2026-03-07T00:00:10"), at("2026-03-07T00:00:20"), at("2026-03-07T00:00:05"))
        ),
        "backfill:pausy:1",
    )
    sim.send(
        "pausy",
        cmd.BackfillJob(ticks=(at("2026-03-07T00:00:10"),), reprocess=Reprocess.ALL),
        "backfill:pausy:2",
    )
    sim.send("every", cmd.DeleteJob(), "delete:every")
    sim.send("slowpoke", cmd.PauseJob(), "pause:slowpoke")
    sim.append(0, b"garbage", b"\x00\x01not avro at all")
    bad = sim.codec.encode_command(
        cmd.Envelope(idem_key="pause:x", job_id="pausy", command=cmd.PauseJob())
    )
    sim.append(0, b"someone-else", bad)  # key differs from the envelope's job_id
    wrong = next(p for p in range(sim.partitions) if p != partition_for_("pausy", sim.partitions))
    sim.append(wrong, b"pausy", bad)  # right key, wrong partition
    sim.run_until(at("2026-03-07T00:02:30"))
    sim.send("pausy", cmd.PauseJob(), "pause:pausy:2")


def partition_for_(job_id: str, n: int) -> int:
    """murmur2 partition of ``job_id``."""
    from topology.kafka.partitioning import partition_for

    return partition_for(job_id.encode(), n)


# -- v2 and v1: records written with the schemas shipped then ------------------------------


def v2_basics(sim: Sim) -> None:
    """What v2 could say: cron jobs with retries, overlap, backfill, cancel, replay."""
    sim.at(at("2025-06-01T00:00:00"))
    sim.script = lambda job_id, task, attempt: (
        Outcome(after=S, exit_code=1) if job_id == "v2-flaky" else OK
    )
    register(sim, "v2-cron", job("cron", cron("*/20 * * * * *")))
    register(
        sim,
        "v2-flaky",
        job(
            "flaky",
            Schedule(kind=ScheduleKind.MANUAL),
            retry_policy=RetryPolicy(max_attempts=2, backoff=3 * S),
        ),
    )
    register(
        sim, "v2-buffer", job("buffer", cron("*/10 * * * * *"), overlap=OverlapPolicy.BUFFER_ONE)
    )
    sim.script = lambda job_id, task, attempt: (
        Outcome(after=S, exit_code=1)
        if job_id == "v2-flaky"
        else Outcome(after=25 * S)
        if job_id == "v2-buffer"
        else OK
    )
    sim.send("v2-flaky", cmd.TriggerJob(), "trigger:v2-flaky")
    sim.run_until(at("2025-06-01T00:01:00"))
    sim.send("v2-cron", cmd.BackfillJob(ticks=(at("2025-05-31T23:59:40"),)), "backfill:v2")
    dead = [e.event for e in sim.events if isinstance(e.event, ev.TaskDeadLettered)]
    sim.send(
        "v2-flaky",
        cmd.ReplayTask(run_id=dead[0].run_id, task="main", scheduled_for=at("2025-06-01T00:00:00")),
        "replay:v2",
    )
    sim.send("v2-buffer", cmd.CancelRun(run_id=runs_of(sim, "v2-buffer")[-1]), "cancel:v2")
    sim.send("v2-cron", cmd.UpdateJob(spec=job("cron", cron("*/30 * * * * *"))), "update:v2")
    sim.run_until(at("2025-06-01T00:02:00"))
    sim.send("v2-buffer", cmd.DeleteJob(), "delete:v2-buffer")


def v1_basics(sim: Sim) -> None:
    """What v1 could say: register, tick, claim, renew, complete, pause, resume, update,
    trigger, delete."""
    sim.at(at("2025-01-01T00:00:00"))
    sim.script = lambda job_id, task, attempt: Outcome(after=25 * S)
    register(
        sim,
        "v1-cron",
        job("cron", cron("* * * * *"), retry_policy=RetryPolicy(max_attempts=2, backoff=5 * S)),
    )
    register(sim, "v1-manual", job("manual", Schedule(kind=ScheduleKind.MANUAL)))
    sim.send("v1-manual", cmd.TriggerJob(), "trigger:v1")
    sim.run_until(at("2025-01-01T00:02:30"))
    sim.send("v1-cron", cmd.PauseJob(), "pause:v1")
    sim.run_until(at("2025-01-01T00:04:10"))
    sim.send("v1-cron", cmd.ResumeJob(), "resume:v1")
    sim.send("v1-cron", cmd.UpdateJob(spec=job("cron2", cron("*/2 * * * *"))), "update:v1")
    sim.run_until(at("2025-01-01T00:08:30"))
    sim.send("v1-manual", cmd.DeleteJob(), "delete:v1")


@dataclass(frozen=True, slots=True)
class Scenario:
    """One golden log: its name, the schema version its records are written with, its
    partition count and the driver.

    ``old_shape``: its definitions are written as the code before issue 23 wrote them (a
    one-task job's task at job level: ``tests/old_shape.py``); ``same_as``: another log whose
    expectations this one must fold to (the same scenario written in the other shape).
    """

    name: str
    version: str
    partitions: int
    drive: Callable[[Sim], None]
    old_shape: bool = False
    same_as: str | None = None


def definitions(sim: Sim) -> None:
    """Jobs of every task kind and a DAG run; one is redefined to another command, to a DAG
    and back; a registration is re-sent in the definition's old and new shapes (no-ops)."""
    sim.at(at("2026-03-08T00:00:00"))
    manual = Schedule(kind=ScheduleKind.MANUAL)
    hook = HttpTask("https://example.org/hook", "POST", (HttpHeader("X-A", "1"),), "{}", (202,))
    shell = main_task(kind=TaskKind.SHELL, shell="echo hi")  # noqa: S604
    python = main_task(kind=TaskKind.PYTHON, callable="m:f", isolation=Isolation.THREAD)
    dag_tasks = (TaskSpec("a", ("true",)), TaskSpec("b", ("true",), depends_on=("a",)))
    specs = {
        "exec": job("exec", manual, timeout=30 * S),
        "shell": JobSpec("shell", manual, shell),
        "python": JobSpec("python", manual, python),
        "http": JobSpec("http", manual, main_task(kind=TaskKind.HTTP, http=hook)),
        "dag": JobSpec("dag", manual, dag_tasks, max_active_tasks=1),
    }
    for job_id, spec in specs.items():
        sim.send(job_id, cmd.RegisterJob(spec=spec), f"register:{job_id}")
        sim.send(job_id, cmd.TriggerJob(), f"trigger:{job_id}:1")
    shell_job = cmd.RegisterJob(spec=specs["shell"])
    again = cmd.Envelope(idem_key="register:shell", job_id="shell", command=shell_job)
    p = partition_for_("shell", sim.partitions)
    sim.append(p, b"shell", old_shape_writer(SCHEMA_DIR / "cronlog.Command.avsc")(again))
    sim.append(p, b"shell", sim.codec.encode_command(again))
    sim.run_until(at("2026-03-08T00:00:30"))
    redefined = (
        replace(specs["exec"], task_specs=main_task(("echo", "bye"))),
        replace(specs["exec"], task_specs=dag_tasks),
        specs["exec"],
    )
    for i, spec in enumerate(redefined):
        sim.send("exec", cmd.UpdateJob(spec=spec), f"update:exec:{i}")
        sim.send("exec", cmd.TriggerJob(), f"trigger:exec:{i + 2}")
        sim.run_until(at("2026-03-08T00:00:30") + (i + 1) * 20 * S)
    sim.send("dag", cmd.UpdateJob(spec=replace(specs["dag"], task_specs=shell)), "update:dag")
    sim.send("dag", cmd.TriggerJob(), "trigger:dag:2")
    sim.run_until(at("2026-03-08T00:02:00"))


def tenant_ledger(sim: Sim) -> None:
    """Jobs of two tenants under the tenant ledger (team-a capped at 1, weights 3:1, a fleet of
    2), a DAG of team-b, and a default job that never asks; each attempt takes 20 s."""
    sim.at(at("2026-03-04T06:00:00"))
    sim.script = lambda job_id, task, attempt: Outcome(after=20 * S)
    limits = (("team-a", 3, 1), ("team-b", 1, None), (FLEET, 1, 2))
    for tenant, weight, cap in limits:
        command = cmd.SetTenantLimits(tenant=tenant, weight=weight, max_running_tasks=cap)
        sim.send(LEDGER_KEY, command, f"limits:{tenant}")
    for i in range(3):
        spec = job(f"a{i}", cron("* * * * *"), tenant="team-a")
        sim.send(f"a{i}", cmd.RegisterJob(spec=spec), f"register:a{i}", tenant="team-a")
    tasks = (
        TaskSpec("first", command=("true",)),
        TaskSpec("second", command=("true",), depends_on=("first",)),
    )
    dag_spec = JobSpec(
        name="b",
        schedule=cron("*/2 * * * *"),
        task_specs=tasks,
        tenant="team-b",
    )
    sim.send("b-dag", cmd.RegisterJob(spec=dag_spec), "register:b-dag", tenant="team-b")
    register(sim, "plain", job("plain", cron("* * * * *")))
    sim.run_until(at("2026-03-04T06:05:00"))


SCENARIOS = (
    Scenario("cron_catchup", "v3", 4, cron_catchup),
    Scenario("dst_gap", "v3", 4, dst_gap),
    Scenario("dst_overlap", "v3", 4, dst_overlap),
    Scenario("dag", "v3", 4, dag),
    Scenario("overlap", "v3", 4, overlap),
    Scenario("rerun", "v3", 4, rerun),
    Scenario("after_job", "v3", 4, after_job),
    Scenario("delete_reregister", "v3", 4, delete_reregister),
    Scenario("dead_letter_replay", "v3", 4, dead_letter_replay),
    Scenario("cancel", "v3", 4, cancel),
    Scenario("leases_and_input", "v3", 4, leases_and_input),
    Scenario("v2_basics", "v2", 4, v2_basics),
    Scenario("v1_basics", "v1", 4, v1_basics),
    Scenario("tenant_ledger", "v4", 4, tenant_ledger),
    Scenario("definitions", "v4", 4, definitions),
    Scenario("definitions_old_shape", "v4", 4, definitions, old_shape=True, same_as="definitions"),
)
