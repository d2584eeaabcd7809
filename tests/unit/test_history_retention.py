"""Hot-history retention: the pruner deletes ended runs older than the window (by the
run-events' clock, injected here), keeps live and recent ones, and pages stay consistent."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta
from pathlib import Path

from fastapi.testclient import TestClient

from cronlog import events as ev
from cronlog.commands import TaskSnapshot
from cronlog.time import to_ms
from cronlog.vocabulary import RunTrigger
from services.api.readmodel import dead_letters, metrics, views
from services.api.readmodel import retention as history
from services.api.readmodel.keys import job_runs_prefix, run_key
from services.api.readmodel.pruner import HistoryPruner
from services.api.readmodel.reader import ReadModel
from services.api.readmodel.store import Store
from services.api.routes.logs import LOGS_FORMAT
from tests.run_records import scheduled
from tests.unit.rm_feed import dead_letter
from tests.unit.store_feed import JOB, T0, URL, all_pages, command, feed, fire_many, register
from topology.kafka.retrying import FATAL_EXIT

HOUR = timedelta(hours=1)


def pruner(rm: ReadModel, now_ms: int, window: timedelta, **kw: object) -> HistoryPruner:
    return HistoryPruner(rm, window, clock=lambda: now_ms, batch_size=2, **kw)  # type: ignore[arg-type]


def live_run(rm: ReadModel, run_id: str = "r-live") -> str:
    """A run scheduled at T0 - 1 h whose task was claimed and never ended."""
    tick = T0 - HOUR
    feed(
        rm.store,
        *command(
            f"live-{run_id}",
            scheduled(run_id, tick, trigger=RunTrigger.MANUAL),
            ev.TaskReady(run_id=run_id, task="main", attempt=1, scheduled_for=tick),
            at=tick,
        ),
    )
    return run_id


def counted(kind: str) -> float:
    value = metrics.REGISTRY.get_sample_value("cronlog_history_pruned_total", {"kind": kind})
    return value or 0.0


def test_ended_runs_older_than_the_window_go_and_live_and_recent_ones_stay(
    rm: ReadModel, tmp_path: Path
) -> None:
    register(rm.store)
    live = live_run(rm)
    ids = fire_many(rm, 6)[::-1]  # oldest first: T0, T0+10 s, ... each ends 1 s after its tick
    logs = Store(tmp_path / "logs")
    for run_id in ids:
        logs.write({b"lg:" + run_id.encode() + b"\x00main\x00000001\x00x": b"out"})
    before = counted("runs")
    now = to_ms(T0) + 10 * 24 * 3600 * 1000 + 31_000  # 10 days later: 31 s past runs 0..2 ended
    pruned = pruner(rm, now, timedelta(days=10), logs=logs).run_pass()
    assert (pruned.runs, pruned.log_rows) == (3, 3)
    assert counted("runs") - before == 3
    assert [views.get_run(rm.store, r) is None for r in ids] == [True] * 3 + [False] * 3
    assert rm.run(live) is not None  # still running, a day older than anything pruned
    assert [r["run_id"] for r in views.list_runs(rm.store, JOB, 100)] == [*ids[3:][::-1], live]
    assert sorted(k for k, _ in logs.scan(b"lg:")) == sorted(
        b"lg:" + r.encode() + b"\x00main\x00000001\x00x" for r in ids[3:]
    )
    job = views.get_job(rm.store, JOB)
    assert job is not None and job["counts"]["runs"] == 7  # counts are totals: they stay
    logs.close()


def test_a_dead_letter_and_the_events_go_with_their_run(rm: ReadModel) -> None:
    register(rm.store)
    fire_many(rm, 1)
    rid = dead_letter(rm, 0, job_id=JOB)  # 2024-03-01: long before everything else
    doc = rm.store.get_json(dead_letters.dead_letter_key(JOB, rid, "main"))
    assert doc is not None
    events_before = sum(1 for _ in rm.store.scan(b"evt:"))
    now = history.newest_ms(rm.store)
    assert now is not None
    pruned = pruner(rm, now, timedelta(days=30)).run_pass()
    assert (pruned.runs, pruned.dead_letters) == (1, 1)
    assert rm.store.get_json(dead_letters.dead_letter_key(JOB, rid, "main")) is None
    assert [k for k, _ in rm.store.scan(b"dl")] == []  # dl:, dlj:, dlt: all gone
    assert pruned.events == 5  # the dead-lettered run's own events, two years old
    assert sum(1 for _ in rm.store.scan(b"evt:")) == events_before - 5
    assert views.events_for(rm.store, f"dl-{rid}") == []


def test_a_reopened_run_is_live_again_and_kept(rm: ReadModel) -> None:
    register(rm.store)
    run_id = fire_many(rm, 1)[0]
    feed(
        rm.store,
        *command(
            "rerun",
            ev.RunReopened(
                run_id=run_id,
                scheduled_for=T0,
                trigger=RunTrigger.SCHEDULE,
                tasks=(TaskSnapshot(task="main", state="succeeded", attempt=1, epoch=1),),
            ),
            at=T0 + HOUR,
        ),
    )
    assert [k for k, _ in rm.store.scan(history.ENDED)] == []  # live again: not indexed
    now = to_ms(T0) + 100 * 24 * 3600 * 1000
    assert pruner(rm, now, timedelta(days=1)).run_pass().runs == 0
    assert rm.run(run_id) is not None


def test_nothing_is_pruned_before_the_first_event_or_with_nothing_old(rm: ReadModel) -> None:
    assert HistoryPruner(rm, timedelta(days=1)).run_pass() == history.Pruned()
    register(rm.store)
    fire_many(rm, 3)
    assert HistoryPruner(rm, timedelta(days=1)).run_pass().runs == 0  # the events' own clock
    assert len(views.list_runs(rm.store, JOB, 10)) == 3


def test_paging_across_a_pruning_pass_neither_repeats_nor_skips_a_kept_run(
    rm: ReadModel, client: TestClient
) -> None:
    register(rm.store)
    ids = fire_many(rm, 10)  # newest first
    first = client.get(URL, params={"limit": 4}).json()
    assert [r["run_id"] for r in first["runs"]] == ids[:4]
    # runs 0..5 (the 6 oldest, ids[4:]) end before the cutoff, and ids[3]'s neighbours stay
    now = to_ms(T0) + 24 * 3600 * 1000 + 52_000
    assert pruner(rm, now, timedelta(days=1)).run_pass().runs == 6
    rest, _ = all_pages(client, URL, "runs", limit=4)
    assert rest == ids[:4]
    answer = client.get(URL, params={"limit": 4, "cursor": first["next_cursor"]}).json()
    assert answer == {"job_id": JOB, "runs": [], "next_cursor": None}
    assert len(list(rm.store.scan(job_runs_prefix(JOB)))) == 4
    assert rm.store.get(run_key(ids[4])) is None


def test_an_archive_hook_answers_for_a_run_the_read_model_no_longer_holds(
    rm: ReadModel, client: TestClient
) -> None:
    register(rm.store)
    run_id = fire_many(rm, 1)[0]
    pruner(rm, to_ms(T0) + 3 * 24 * 3600 * 1000, timedelta(days=1)).run_pass()
    assert client.get(f"/api/v1/runs/{run_id}").status_code == 404
    archived = {"run_id": run_id, "job_id": JOB, "state": "succeeded"}
    rm.archived = lambda rid: archived if rid == run_id else None
    assert rm.run(run_id) == archived


def test_an_archived_run_is_not_rerun(rm: ReadModel, client: TestClient) -> None:
    """Its reopened run's events would reach a read model without its document (review)."""
    register(rm.store)
    run_id = fire_many(rm, 1)[0]
    pruner(rm, to_ms(T0) + 3 * 24 * 3600 * 1000, timedelta(days=1)).run_pass()
    doc = {"run_id": run_id, "job_id": JOB, "state": "succeeded", "archived": True}
    rm.archived = lambda rid: doc if rid == run_id else None
    answer = client.post(f"/api/v1/runs/{run_id}/tasks/main/retry")
    assert answer.status_code == 409
    assert "archived" in answer.json()["detail"]


def test_a_pruning_step_that_fails_ends_the_process_with_70(tmp_path: Path) -> None:
    code = (
        "import sys, time\n"
        "from datetime import timedelta\n"
        "from pathlib import Path\n"
        "from services.api.readmodel.pruner import HistoryPruner\n"
        "from services.api.readmodel.reader import ReadModel\n"
        "from services.api.settings import ApiSettings\n"
        "from services.logging_setup import configure_logging\n"
        "configure_logging('api')\n"
        "s = ApiSettings(api_state_dir=Path(sys.argv[1]))\n"
        "rm = ReadModel(s, s.state_path())\n"
        "def clock():\n"
        "    raise OSError('the store is gone')\n"
        "HistoryPruner(rm, timedelta(days=1), clock=clock).start()\n"
        "time.sleep(30)\n"
        "print('still alive')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "rm")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == FATAL_EXIT
    assert "still alive" not in done.stdout
    assert ' action=fatal thread=history-pruner error="the store is gone" ' in done.stderr


def test_layout_v5_rebuilds_the_run_store_but_not_the_task_log_store(tmp_path: Path) -> None:
    old = b"cronlog-api-read-model/v4"
    for name in ("runs", "logs"):
        s = Store(tmp_path / name, old)
        s.write({b"run:kept?": b"{}"})
        s.close()
    runs, logs = Store(tmp_path / "runs"), Store(tmp_path / "logs", LOGS_FORMAT)
    assert (runs.get(b"run:kept?"), logs.get(b"run:kept?")) == (None, b"{}")
    runs.close()
    logs.close()
