"""The API's projection of run-events into job and run documents, fed RunEvents by hand."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from fastapi import FastAPI
from fastapi.testclient import TestClient

from cronlog import events as ev
from cronlog.model import JobSpec, Schedule, ScheduleKind, main_task
from cronlog.vocabulary import (
    CancelReason,
    CommandKind,
    FailureKind,
    RejectReason,
    RunTrigger,
    SkipReason,
)
from services.api.readmodel import metrics, views
from services.api.readmodel.store import FORMAT, Store
from services.api.routes import metrics as metrics_route
from tests.run_records import claimed, scheduled
from tests.unit.authed import authed
from tests.unit.store_feed import JOB, SPEC, T0, command, feed, fire, register


def test_registered_job_shows_its_definition_status_and_next_run(store: Store) -> None:
    register(store)
    job = views.get_job(store, JOB)
    assert job is not None
    assert job["name"] == "ten"
    assert job["schedule"] == {
        "type": "cron",
        "expression": "*/10 * * * * *",
        "timezone": "UTC",
        "run_at": None,
        "catchup": "latest",
        "catchup_window_s": 86400,
        "dst_gap": "shift",
        "dst_overlap": "first",
        "interval_s": None,
        "anchor_at": None,
        "start_at": None,
        "end_at": None,
        "max_runs": None,
        "exclusions": [],
        "misfire_grace_s": 60,
    }
    assert (job["overlap"], job["jitter_s"]) == ("allow", 0)
    assert job["command"] == ["sh", "-c", "echo tick"]
    assert job["timeout_s"] == 3600
    assert job["status"] == "active"
    assert job["next_run_at"] == "2026-03-01T12:00:10.000Z"
    assert job["created_at"] == "2026-03-01T12:00:00.000Z"
    assert job["counts"] == {
        "runs": 0,
        "active": 0,
        "queued": 0,
        "succeeded": 0,
        "failed": 0,
        "cancelled": 0,
    }


def test_unknown_ids_are_none(store: Store) -> None:
    assert views.get_job(store, "nope") is None
    assert views.get_run(store, "nope") is None
    assert views.list_runs(store, "nope", 10) == []


def test_succeeded_run_has_worker_exit_code_timings_and_trigger_lag(store: Store) -> None:
    register(store)
    tick = T0 + timedelta(seconds=10)
    run_id = fire(store, tick)
    run = views.get_run(store, run_id)
    assert run is not None
    assert run["state"] == "succeeded"
    assert run["scheduled_for"] == "2026-03-01T12:00:10.000Z"
    assert run["trigger"] == "schedule"
    assert (run["attempt"], run["epoch"], run["claimed_by"]) == (1, 1, "w1")
    assert (run["exit_code"], run["failure_kind"], run["output_tail"]) == (0, None, "tick\n")
    assert run["ready_at"] == "2026-03-01T12:00:10.000Z"
    assert run["claimed_at"] == "2026-03-01T12:00:10.200Z"
    assert run["started_at"] == "2026-03-01T12:00:10.250Z"
    assert run["finished_at"] == "2026-03-01T12:00:11.000Z"
    assert run["trigger_lag_s"] == 0.25
    assert run["lease_expires_at"] is None
    job = views.get_job(store, JOB)
    assert job is not None
    assert job["counts"] == {
        "runs": 1,
        "active": 0,
        "queued": 0,
        "succeeded": 1,
        "failed": 0,
        "cancelled": 0,
    }
    assert job["next_run_at"] == "2026-03-01T12:00:20.000Z"
    assert job["last_run"] == {
        "run_id": run_id,
        "scheduled_for": run["scheduled_for"],
        "state": "succeeded",
        "exit_code": 0,
    }


def test_failed_run_records_exit_code_and_failure_kind(store: Store) -> None:
    register(store)
    run_id = fire(store, T0 + timedelta(seconds=10), exit_code=3)
    run = views.get_run(store, run_id)
    assert run is not None
    assert (run["state"], run["exit_code"], run["failure_kind"]) == ("failed", 3, "nonzero_exit")
    assert run["attempts"][0]["state"] == "failed"
    job = views.get_job(store, JOB)
    assert job is not None
    assert job["counts"]["failed"] == 1


def test_running_run_shows_its_lease_and_renewals_move_it(store: Store) -> None:
    register(store)
    tick = T0 + timedelta(seconds=10)
    feed(
        store,
        *command(
            "t",
            scheduled("r1", tick),
            ev.TaskReady(run_id="r1", task="main", attempt=1, scheduled_for=tick),
            at=tick,
        ),
        *command(
            "c",
            ev.TaskClaimed(
                run_id="r1",
                task="main",
                attempt=1,
                epoch=1,
                worker_id="w9",
                lease_expires_at=tick + timedelta(seconds=61),
                lease_ttl=timedelta(seconds=60),
                scheduled_for=tick,
                command=SPEC.task_specs[0].command,
                timeout=SPEC.timeout,
            ),
            at=tick + timedelta(seconds=1),
        ),
    )
    run = views.get_run(store, "r1")
    assert run is not None
    assert (run["state"], run["claimed_by"]) == ("running", "w9")
    assert run["lease_expires_at"] == "2026-03-01T12:01:11.000Z"
    assert run["trigger_lag_s"] == 1.0
    feed(
        store,
        *command(
            "renew",
            ev.LeaseRenewed(
                run_id="r1",
                task="main",
                attempt=1,
                epoch=1,
                worker_id="w9",
                lease_expires_at=tick + timedelta(seconds=75),
            ),
        ),
    )
    run = views.get_run(store, "r1")
    assert run is not None
    assert run["lease_expires_at"] == "2026-03-01T12:01:25.000Z"


def test_runs_are_listed_newest_first_and_limited(store: Store) -> None:
    register(store)
    ids = [fire(store, T0 + timedelta(seconds=10 * i)) for i in range(1, 6)]
    runs = views.list_runs(store, JOB, limit=3)
    assert [r["run_id"] for r in runs] == ids[::-1][:3]


def test_redelivered_events_are_skipped(store: Store) -> None:
    register(store)
    tick = T0 + timedelta(seconds=10)
    run_id = fire(store, tick)
    grant = claimed(
        run_id, tick, expires_at=tick, command=SPEC.task_specs[0].command, timeout=SPEC.timeout
    )
    claim = command(f"claim-{run_id}", grant)
    assert feed(store, *claim) == [False]  # the fold re-published it after a crash
    run = views.get_run(store, run_id)
    job = views.get_job(store, JOB)
    assert run is not None
    assert job is not None
    assert run["state"] == "succeeded"
    assert job["counts"]["runs"] == 1


def test_pause_hides_next_run_and_resume_restores_it(store: Store) -> None:
    register(store)
    feed(store, *command("p", ev.JobPaused()))
    job = views.get_job(store, JOB)
    assert job is not None
    assert (job["status"], job["next_run_at"]) == ("paused", None)
    feed(store, *command("r", ev.JobResumed(next_fire_at=T0 + timedelta(minutes=5))))
    job = views.get_job(store, JOB)
    assert job is not None
    assert (job["status"], job["next_run_at"]) == ("active", "2026-03-01T12:05:00.000Z")


def test_deleted_job_keeps_its_history(store: Store) -> None:
    register(store)
    run_id = fire(store, T0 + timedelta(seconds=10))
    feed(store, *command("d", ev.JobDeleted(), at=T0 + timedelta(minutes=1)))
    job = views.get_job(store, JOB)
    assert job is not None
    assert (job["status"], job["next_run_at"]) == ("deleted", None)
    assert job["deleted_at"] == "2026-03-01T12:01:00.000Z"
    assert [r["run_id"] for r in views.list_runs(store, JOB, 10)] == [run_id]
    assert [j["job_id"] for j in views.list_jobs(store, status="deleted")] == [JOB]
    assert views.list_jobs(store, status="active") == []


def test_redefinition_replaces_the_definition(store: Store) -> None:
    register(store)
    new = JobSpec(
        "ten", Schedule(ScheduleKind.CRON, "0 * * * *", "Europe/Paris"), main_task(("true",))
    )
    feed(store, *command("u", ev.JobRedefined(spec=new, next_fire_at=T0 + timedelta(hours=1))))
    job = views.get_job(store, JOB)
    assert job is not None
    assert job["schedule"]["timezone"] == "Europe/Paris"
    assert job["command"] == ["true"]
    assert job["next_run_at"] == "2026-03-01T13:00:00.000Z"


def test_a_retry_is_a_new_attempt(store: Store) -> None:
    register(store)
    tick = T0 + timedelta(seconds=10)
    lease = timedelta(seconds=60)
    feed(
        store,
        *command(
            "t",
            scheduled("r1", tick),
            ev.TaskReady(run_id="r1", task="main", attempt=1, scheduled_for=tick),
        ),
        *command(
            "c1",
            ev.TaskClaimed(
                run_id="r1",
                task="main",
                attempt=1,
                epoch=1,
                worker_id="w1",
                lease_expires_at=tick + lease,
                lease_ttl=lease,
                scheduled_for=tick,
                command=SPEC.task_specs[0].command,
                timeout=SPEC.timeout,
            ),
        ),
        *command(
            "tick2",
            ev.LeaseExpired(run_id="r1", task="main", attempt=1, epoch=1, worker_id="w1"),
            ev.TaskFailed(
                run_id="r1",
                task="main",
                attempt=1,
                epoch=1,
                worker_id="w1",
                failure_kind=FailureKind.LEASE_EXPIRED,
                exit_code=None,
                output_tail="",
                started_at=None,
                finished_at=tick + lease,
            ),
            ev.RetryScheduled(
                run_id="r1", task="main", attempt=2, retry_at=tick + lease + timedelta(seconds=10)
            ),
        ),
    )
    run = views.get_run(store, "r1")
    assert run is not None
    assert (run["state"], run["failure_kind"]) == ("retrying", "lease_expired")
    assert run["retry_at"] == "2026-03-01T12:01:20.000Z"
    feed(
        store,
        *command("tick3", ev.TaskReady(run_id="r1", task="main", attempt=2, scheduled_for=tick)),
        *command(
            "c2",
            ev.TaskClaimed(
                run_id="r1",
                task="main",
                attempt=2,
                epoch=2,
                worker_id="w2",
                lease_expires_at=tick,
                lease_ttl=lease,
                scheduled_for=tick,
                command=SPEC.task_specs[0].command,
                timeout=SPEC.timeout,
            ),
        ),
    )
    run = views.get_run(store, "r1")
    assert run is not None
    assert (run["state"], run["attempt"], run["epoch"], run["claimed_by"]) == (
        "running",
        2,
        2,
        "w2",
    )
    assert [(a["attempt"], a["state"], a["worker_id"]) for a in run["attempts"]] == [
        (1, "failed", "w1"),
        (2, "running", "w2"),
    ]


def test_manual_trigger_leaves_the_schedule_cursor(store: Store) -> None:
    register(store)
    feed(
        store,
        *command(
            "trig",
            scheduled("rm", T0 + timedelta(seconds=3), trigger=RunTrigger.MANUAL),
        ),
    )
    job = views.get_job(store, JOB)
    run = views.get_run(store, "rm")
    assert job is not None
    assert run is not None
    assert job["next_run_at"] == "2026-03-01T12:00:10.000Z"
    assert run["trigger"] == "manual"


def test_events_for_returns_what_a_command_caused(store: Store) -> None:
    tick = T0 + timedelta(seconds=10)
    register(store)
    caused = command(
        "k1",
        scheduled("r1", tick, trigger=RunTrigger.MANUAL),
        ev.TaskReady(run_id="r1", task="main", attempt=1, scheduled_for=tick),
    )
    feed(
        store,
        *caused,
        *command(
            "k1",
            ev.CommandRejected(
                command=CommandKind.TRIGGER_JOB,
                reason=RejectReason.UNKNOWN_JOB,
                detail="no such job",
            ),
            job_id="other",
        ),
    )
    assert views.events_for(store, "k1", JOB) == caused
    assert len(views.events_for(store, "k1")) == 3
    assert views.events_for(store, "k2") == []


def test_store_survives_reopen_and_a_new_format_wipes_it(tmp_path: Path) -> None:
    first = Store(tmp_path / "rm")
    register(first)
    first.close()
    second = Store(tmp_path / "rm")
    assert views.get_job(second, JOB) is not None
    second.write({b"meta:format": FORMAT + b"-older"})
    second.close()
    third = Store(tmp_path / "rm")
    assert views.get_job(third, JOB) is None
    third.close()


# --- issue 3: buffered and cancelled runs, runs_remaining, jitter -------------------------------


def test_buffered_run_shows_buffered_then_scheduled_and_counts_once(store: Store) -> None:
    register(store)
    tick = T0 + timedelta(seconds=10)
    feed(
        store,
        *command(
            "t1",
            ev.RunBuffered(
                run_id="rb",
                scheduled_for=tick,
                trigger=RunTrigger.SCHEDULE,
                next_fire_at=tick + timedelta(seconds=10),
                runs_remaining=3,
            ),
        ),
    )
    run = views.get_run(store, "rb")
    assert run is not None and (run["state"], run["runs_remaining"]) == ("buffered", 3)
    feed(
        store,
        *command(
            "done",
            scheduled("rb", tick, next_fire_at=tick + timedelta(seconds=10), runs_remaining=3),
            ev.TaskReady(run_id="rb", task="main", attempt=1, scheduled_for=tick),
            at=tick + timedelta(seconds=4),
        ),
    )
    run = views.get_run(store, "rb")
    assert run is not None and run["state"] == "ready"
    job = views.get_job(store, JOB)
    assert job is not None and job["counts"]["runs"] == 1


def test_cancelled_run_is_terminal_and_names_its_replacement(store: Store) -> None:
    register(store)
    tick = T0 + timedelta(seconds=10)
    feed(
        store,
        *command(
            "t1",
            scheduled("r1", tick, next_fire_at=tick + timedelta(seconds=10)),
            ev.TaskReady(run_id="r1", task="main", attempt=1, scheduled_for=tick),
            at=tick,
        ),
    )
    feed(
        store,
        *command(
            "t2",
            ev.RunCancelled(run_id="r1", reason=CancelReason.OVERLAP, replaced_by="r2"),
            at=tick + timedelta(seconds=10),
        ),
    )
    feed(
        store,
        *command("late", ev.TaskReady(run_id="r1", task="main", attempt=2, scheduled_for=tick)),
    )
    run = views.get_run(store, "r1")
    assert run is not None
    assert (run["state"], run["cancelled_by"]) == ("cancelled", "r2")
    job = views.get_job(store, JOB)
    assert job is not None and job["counts"]["active"] == 0


def test_jittered_run_shows_its_release_instant(store: Store) -> None:
    register(store)
    tick = T0 + timedelta(seconds=10)
    feed(
        store,
        *command(
            "t1",
            scheduled("r1", tick, runs_remaining=0, release_at=tick + timedelta(seconds=3)),
            at=tick,
        ),
    )
    run = views.get_run(store, "r1")
    assert run is not None
    assert (run["state"], run["release_at"], run["runs_remaining"]) == (
        "scheduled",
        "2026-03-01T12:00:13.000Z",
        0,
    )


def test_skipped_ticks_are_counted_once_for_prometheus(store: Store) -> None:
    def sample() -> float:
        labels = {"reason": "queue_full"}
        return metrics.REGISTRY.get_sample_value("cronlog_ticks_skipped_total", labels) or 0.0

    before = sample()
    register(store)
    skipped = command(
        "tick:1",
        ev.TickSkipped(scheduled_for=T0, reason=SkipReason.QUEUE_FULL, next_fire_at=T0),
    )
    assert feed(store, *skipped, *skipped) == [True, False]  # a re-delivery is not counted
    assert sample() == before + 1
    app = FastAPI()
    app.include_router(metrics_route.router)
    assert authed(app, "default", "admin").get("/metrics").status_code == 403  # a tenant
    assert TestClient(app).get("/metrics").status_code == 401
    answer = authed(app, "*", "viewer").get("/metrics")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    assert f'cronlog_ticks_skipped_total{{reason="queue_full"}} {before + 1}' in answer.text
