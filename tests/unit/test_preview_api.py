"""Preview (``GET /jobs/{id}/ticks``) and skipped ticks (``GET /jobs/{id}/skipped``), served by
an app whose read model is fed RunEvents by hand (no Kafka)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi.testclient import TestClient

from cronlog import events as ev
from cronlog.model import DstGapPolicy, DstOverlapPolicy, JobSpec, Schedule, ScheduleKind, main_task
from cronlog.schedule import next_tick
from cronlog.vocabulary import SkipReason
from services.api.readmodel import skips
from services.api.readmodel.projection import apply
from services.api.readmodel.reader import ReadModel
from services.api.readmodel.store import Batch
from tests.run_records import record
from tests.unit.rm_feed import T0, feed


def register(rm: ReadModel, job_id: str, schedule: Schedule) -> JobSpec:
    spec = JobSpec(f"job {job_id}", schedule, main_task(("true",)))
    feed(
        rm,
        f"reg-{job_id}",
        ev.JobRegistered(spec=spec, next_fire_at=next_tick(schedule, T0)),
        job_id=job_id,
    )
    return spec


def cron(expression: str, tz: str = "UTC", **policy: Any) -> Schedule:
    return Schedule(ScheduleKind.CRON, expression, tz, **policy)


def utcs(answer: Any) -> list[str]:
    return [t["utc"] for t in answer["ticks"]]


def test_berlin_spring_gap_shifts_fixed_time_tick_to_the_gap_end(
    rm: ReadModel, client: TestClient
) -> None:
    register(rm, "daily-0230", cron("30 2 * * *", "Europe/Berlin"))
    r = client.get(
        "/api/v1/jobs/daily-0230/ticks", params={"count": 3, "after": "2024-03-29T12:00:00Z"}
    )
    assert r.status_code == 200, r.text
    assert r.json() == {
        "job_id": "daily-0230",
        "ticks": [
            {"utc": "2024-03-30T01:30:00.000Z", "local": "2024-03-30T02:30:00.000+01:00"},
            {"utc": "2024-03-31T01:00:00.000Z", "local": "2024-03-31T03:00:00.000+02:00"},
            {"utc": "2024-04-01T00:30:00.000Z", "local": "2024-04-01T02:30:00.000+02:00"},
        ],
    }


def test_dst_policies_of_the_job_are_honoured(rm: ReadModel, client: TestClient) -> None:
    register(rm, "skip-gap", cron("30 2 * * *", "Europe/Berlin", dst_gap=DstGapPolicy.SKIP))
    register(
        rm, "both-passes", cron("30 2 * * *", "Europe/Berlin", dst_overlap=DstOverlapPolicy.BOTH)
    )
    register(
        rm, "last-pass", cron("30 2 * * *", "Europe/Berlin", dst_overlap=DstOverlapPolicy.LAST)
    )
    gap = client.get(
        "/api/v1/jobs/skip-gap/ticks", params={"count": 2, "after": "2024-03-29T12:00:00Z"}
    ).json()
    assert utcs(gap) == ["2024-03-30T01:30:00.000Z", "2024-04-01T00:30:00.000Z"]
    fall = {"count": 3, "after": "2024-10-26T12:00:00Z"}
    both = client.get("/api/v1/jobs/both-passes/ticks", params=fall).json()
    assert both["ticks"] == [
        {"utc": "2024-10-27T00:30:00.000Z", "local": "2024-10-27T02:30:00.000+02:00"},
        {"utc": "2024-10-27T01:30:00.000Z", "local": "2024-10-27T02:30:00.000+01:00"},
        {"utc": "2024-10-28T01:30:00.000Z", "local": "2024-10-28T02:30:00.000+01:00"},
    ]
    last = client.get("/api/v1/jobs/last-pass/ticks", params=fall).json()
    assert utcs(last)[:2] == ["2024-10-27T01:30:00.000Z", "2024-10-28T01:30:00.000Z"]


def test_redefinition_changes_the_preview(rm: ReadModel, client: TestClient) -> None:
    spec = register(rm, "edited", cron("0 * * * *"))
    after = {"count": 2, "after": "2024-03-01T12:00:00Z"}
    assert utcs(client.get("/api/v1/jobs/edited/ticks", params=after).json()) == [
        "2024-03-01T13:00:00.000Z",
        "2024-03-01T14:00:00.000Z",
    ]
    new = JobSpec(spec.name, cron("*/15 * * * *"), spec.task_specs)
    feed(
        rm,
        "patch",
        ev.JobRedefined(spec=new, next_fire_at=T0 + timedelta(minutes=15)),
        job_id="edited",
    )
    assert utcs(client.get("/api/v1/jobs/edited/ticks", params=after).json()) == [
        "2024-03-01T12:15:00.000Z",
        "2024-03-01T12:30:00.000Z",
    ]


def test_jenkins_h_is_hashed_on_the_job_id_as_the_fold_does(
    rm: ReadModel, client: TestClient
) -> None:
    schedule = cron("H H * * *")
    firsts = {}
    for job_id in ("hashed-a", "hashed-b", "hashed-c"):
        register(rm, job_id, schedule)
        answer = client.get(
            f"/api/v1/jobs/{job_id}/ticks", params={"count": 1, "after": "2024-03-01T12:00:00Z"}
        ).json()
        expected = next_tick(schedule, T0, hash_id=job_id)
        assert expected is not None
        assert utcs(answer) == [expected.isoformat(timespec="milliseconds").replace("+00:00", "Z")]
        firsts[job_id] = answer["ticks"][0]["utc"]
    assert len(set(firsts.values())) > 1  # different jobs spread out


def test_count_defaults_to_10_is_capped_at_1000_and_after_defaults_to_now(
    rm: ReadModel, client: TestClient
) -> None:
    register(rm, "every-second", cron("* * * * * *"))
    before = datetime.now(UTC)
    ticks = client.get("/api/v1/jobs/every-second/ticks").json()["ticks"]
    assert len(ticks) == 10
    first = datetime.fromisoformat(ticks[0]["utc"])
    assert before - timedelta(seconds=1) < first <= datetime.now(UTC) + timedelta(seconds=2)
    assert (
        len(client.get("/api/v1/jobs/every-second/ticks", params={"count": 1000}).json()["ticks"])
        == 1000
    )
    for bad in (
        {"count": 1001},
        {"count": 0},
        {"after": "2024-03-01T12:00:00"},
        {"after": "yesterday"},
    ):
        r = client.get("/api/v1/jobs/every-second/ticks", params=bad)
        assert r.status_code == 422, (bad, r.text)
        assert r.json()["detail"][0]["loc"] == ["query", next(iter(bad))]


def test_after_with_an_offset_is_the_same_instant(rm: ReadModel, client: TestClient) -> None:
    register(rm, "tz-after", cron("0 9 * * *", "America/New_York"))
    a = client.get(
        "/api/v1/jobs/tz-after/ticks", params={"count": 2, "after": "2024-03-01T08:00:00-05:00"}
    ).json()
    b = client.get(
        "/api/v1/jobs/tz-after/ticks", params={"count": 2, "after": "2024-03-01T13:00:00Z"}
    ).json()
    assert a == b
    assert a["ticks"][0] == {
        "utc": "2024-03-01T14:00:00.000Z",
        "local": "2024-03-01T09:00:00.000-05:00",
    }


def test_once_job_previews_its_run_at_only_while_in_the_future(
    rm: ReadModel, client: TestClient
) -> None:
    run_at = datetime(2024, 3, 2, 8, 0, tzinfo=UTC)
    register(rm, "one-off", Schedule(ScheduleKind.ONCE, timezone="Asia/Tokyo", run_at=run_at))
    early = client.get("/api/v1/jobs/one-off/ticks", params={"after": "2024-03-01T00:00:00Z"})
    assert early.json()["ticks"] == [
        {"utc": "2024-03-02T08:00:00.000Z", "local": "2024-03-02T17:00:00.000+09:00"}
    ]
    for after in ("2024-03-02T08:00:00Z", "2024-03-03T00:00:00Z"):
        assert (
            client.get("/api/v1/jobs/one-off/ticks", params={"after": after}).json()["ticks"] == []
        )


def test_manual_and_deleted_jobs_preview_nothing(rm: ReadModel, client: TestClient) -> None:
    register(rm, "by-hand", Schedule(ScheduleKind.MANUAL))
    assert client.get("/api/v1/jobs/by-hand/ticks").json() == {"job_id": "by-hand", "ticks": []}
    register(rm, "gone", cron("* * * * *"))
    feed(rm, "del", ev.JobDeleted(), job_id="gone")
    assert client.get("/api/v1/jobs/gone/ticks").json()["ticks"] == []


def test_paused_job_still_previews_its_schedule(rm: ReadModel, client: TestClient) -> None:
    register(rm, "napping", cron("0 0 * * *"))
    feed(rm, "pause", ev.JobPaused(), job_id="napping")
    ticks = client.get(
        "/api/v1/jobs/napping/ticks", params={"count": 1, "after": "2024-03-01T12:00:00Z"}
    ).json()["ticks"]
    assert [t["utc"] for t in ticks] == ["2024-03-02T00:00:00.000Z"]


def test_unknown_job_is_404(client: TestClient) -> None:
    assert client.get("/api/v1/jobs/nope/ticks").status_code == 404
    assert client.get("/api/v1/jobs/nope/skipped").status_code == 404


def skip(rm: ReadModel, job_id: str, n: int, reason: SkipReason, start: int = 0) -> None:
    """Feed ``n`` TickSkipped events, ticks ``T0 + start + i`` seconds, one command each."""
    for i in range(start, start + n):
        tick = T0 + timedelta(seconds=i)
        feed(
            rm,
            f"tick-{job_id}-{i}",
            ev.TickSkipped(
                scheduled_for=tick, reason=reason, next_fire_at=tick + timedelta(seconds=1)
            ),
            job_id=job_id,
            at=tick + timedelta(milliseconds=5),
        )


def test_skipped_ticks_are_listed_newest_first_with_reason_and_counted(
    rm: ReadModel, client: TestClient
) -> None:
    register(rm, "busy", cron("* * * * * *"))
    assert client.get("/api/v1/jobs/busy").json()["skipped_count"] == 0
    assert client.get("/api/v1/jobs/busy/skipped").json() == {"job_id": "busy", "skipped": []}
    skip(rm, "busy", 3, SkipReason.MAX_ACTIVE_RUNS)
    skip(rm, "busy", 1, SkipReason.CATCHUP_WINDOW, start=3)
    answer = client.get("/api/v1/jobs/busy/skipped").json()
    assert answer["skipped"] == [
        {
            "scheduled_for": "2024-03-01T12:00:03.000Z",
            "reason": "catchup_window",
            "at": "2024-03-01T12:00:03.005Z",
        },
        {
            "scheduled_for": "2024-03-01T12:00:02.000Z",
            "reason": "max_active_runs",
            "at": "2024-03-01T12:00:02.005Z",
        },
        {
            "scheduled_for": "2024-03-01T12:00:01.000Z",
            "reason": "max_active_runs",
            "at": "2024-03-01T12:00:01.005Z",
        },
        {
            "scheduled_for": "2024-03-01T12:00:00.000Z",
            "reason": "max_active_runs",
            "at": "2024-03-01T12:00:00.005Z",
        },
    ]
    assert len(client.get("/api/v1/jobs/busy/skipped", params={"limit": 2}).json()["skipped"]) == 2
    job = client.get("/api/v1/jobs/busy").json()
    assert job["skipped_count"] == 4
    assert job["next_run_at"] == "2024-03-01T12:00:04.000Z"
    assert client.get("/api/v1/jobs").json()["jobs"][0]["skipped_count"] == 4
    assert client.get("/api/v1/jobs/busy/skipped", params={"limit": 0}).status_code == 422


def test_a_redelivered_tick_skipped_is_stored_once(rm: ReadModel, client: TestClient) -> None:
    register(rm, "dup", cron("* * * * * *"))
    skip(rm, "dup", 2, SkipReason.MAX_ACTIVE_RUNS)
    skip(rm, "dup", 2, SkipReason.MAX_ACTIVE_RUNS)  # the fold re-delivers after a crash
    assert client.get("/api/v1/jobs/dup").json()["skipped_count"] == 2
    assert len(client.get("/api/v1/jobs/dup/skipped").json()["skipped"]) == 2


def test_several_skips_in_one_batch_keep_their_order(rm: ReadModel) -> None:
    register(rm, "batched", cron("* * * * * *"))
    batch = Batch(rm.store)
    for i in range(3):
        tick = T0 + timedelta(seconds=i)
        skipped = ev.TickSkipped(
            scheduled_for=tick, reason=SkipReason.CATCHUP_POLICY, next_fire_at=None
        )
        apply(batch, record(f"t{i}", 0, skipped, at=tick, job_id="batched"))
    batch.commit()
    assert [s["scheduled_for"][17:19] for s in rm.skipped("batched", 10)] == ["02", "01", "00"]


def test_only_the_last_1000_skips_are_kept_but_all_are_counted(
    rm: ReadModel, client: TestClient
) -> None:
    register(rm, "flooded", cron("* * * * * *"))
    batch = Batch(rm.store)
    total = skips.KEEP + 250
    for i in range(total):
        tick = T0 + timedelta(seconds=i)
        skipped = ev.TickSkipped(
            scheduled_for=tick, reason=SkipReason.MAX_ACTIVE_RUNS, next_fire_at=None
        )
        apply(batch, record(f"t{i}", 0, skipped, at=tick, job_id="flooded"))
    batch.commit()
    assert client.get("/api/v1/jobs/flooded").json()["skipped_count"] == total
    kept = client.get("/api/v1/jobs/flooded/skipped", params={"limit": 1000}).json()["skipped"]
    assert len(kept) == skips.KEEP
    newest, oldest = (datetime.fromisoformat(kept[i]["scheduled_for"]) for i in (0, -1))
    assert newest == T0 + timedelta(seconds=total - 1)
    assert oldest == T0 + timedelta(seconds=total - skips.KEEP)
    assert len(list(rm.store.scan(b"sk:flooded\x00"))) == skips.KEEP  # bounded storage


def test_every_job_previews_anchor_plus_k_intervals_as_the_fold_fires_them(
    rm: ReadModel, client: TestClient
) -> None:
    anchor = datetime(2024, 3, 1, 0, 0, 7, tzinfo=UTC)
    every = Schedule(ScheduleKind.EVERY, interval=timedelta(seconds=90), anchor_at=anchor)
    register(rm, "every-90s", every)
    answer = client.get(
        "/api/v1/jobs/every-90s/ticks", params={"count": 3, "after": "2024-03-01T12:00:00Z"}
    ).json()
    assert utcs(answer) == [
        "2024-03-01T12:00:07.000Z",  # 480 intervals after the anchor
        "2024-03-01T12:01:37.000Z",
        "2024-03-01T12:03:07.000Z",
    ]
    # the same instants the fold's own next_tick gives, one after the other
    fold, at = [], datetime(2024, 3, 1, 12, tzinfo=UTC)
    for _ in range(3):
        at = next_tick(every, at)
        fold.append(at.strftime("%Y-%m-%dT%H:%M:%S.000Z"))
    assert utcs(answer) == fold
    register(rm, "on-the-epoch", Schedule(ScheduleKind.EVERY, interval=timedelta(hours=1)))
    epoch = client.get(
        "/api/v1/jobs/on-the-epoch/ticks", params={"count": 1, "after": "2024-03-01T12:30:00Z"}
    ).json()
    assert utcs(epoch) == ["2024-03-01T13:00:00.000Z"]
