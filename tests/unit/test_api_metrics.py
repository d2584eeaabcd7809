"""The API's Prometheus metrics, counted from run-events by the projection (issue 15).

Run-events are fed to the projection by hand; values are read back from the exposition text
(``generate_latest``, parsed with prometheus_client's parser), as a scraper reads them. The
registry is the process's, so each test uses job ids of its own and compares counters with
their value before it fed anything.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from cronlog import events as ev
from cronlog.errors import InvalidDefinition
from cronlog.ids import event_id
from cronlog.model import JobSpec, Schedule, ScheduleKind, main_task
from cronlog.time import to_ms
from cronlog.validation import validate_tags
from cronlog.vocabulary import (
    CancelReason,
    FailureKind,
    QueueReason,
    RunTrigger,
    SkipReason,
    SuspendReason,
    UnsuspendReason,
)
from services.api.readmodel import metrics, metrics_live
from services.api.readmodel.live_runs import durations, live_runs
from services.api.readmodel.metrics import OTHER, JobLabels
from services.api.readmodel.metrics_live import LiveCollector, p99
from services.api.readmodel.projection import apply
from services.api.readmodel.store import Batch, Store

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
SPEC = JobSpec("m", Schedule(ScheduleKind.CRON, "*/10 * * * * *"), main_task(("true",)))
Labels = tuple[tuple[str, str], ...]
COMMANDS = itertools.count()
"""Numbers the commands fed: every command has an idem_key (so event_ids) of its own."""
EXAMPLES = itertools.count()
"""Numbers the hypothesis examples: each uses job ids of its own in the process's registry."""


class Clock:
    """A settable wall clock, epoch seconds."""

    def __init__(self, at: datetime) -> None:
        self.now = to_ms(at) / 1000

    def __call__(self) -> float:
        return self.now

    def set(self, at: datetime) -> None:
        self.now = to_ms(at) / 1000


@pytest.fixture
def clock() -> Clock:
    return Clock(T0)


@pytest.fixture
def live(store: Store, clock: Clock) -> Iterator[LiveCollector]:
    collector = metrics_live.attach(store, max_jobs=200, stalled_s=600, clock=clock)
    yield collector
    metrics_live.detach(collector)


def scrape() -> dict[str, dict[Labels, float]]:
    """Return every sample of ``GET /metrics``: name -> sorted label pairs -> value."""
    text = generate_latest(metrics.REGISTRY).decode()
    out: dict[str, dict[Labels, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = tuple(sorted(sample.labels.items()))
            out.setdefault(sample.name, {})[labels] = sample.value
    return out


def value(name: str, **labels: str) -> float:
    return scrape().get(name, {}).get(tuple(sorted(labels.items())), 0.0)


class Feeder:
    """Feeds run-events of one job to the projection, each with its own idem_key."""

    def __init__(self, store: Store, job_id: str) -> None:
        self.store, self.job_id, self.key = store, job_id, ""

    def __call__(self, *events: ev.Event, at: datetime = T0) -> list[bool]:
        self.key = key = f"{self.job_id}-cmd-{next(COMMANDS)}"
        return self.deliver(key, *events, at=at)

    def again(self, *events: ev.Event, at: datetime = T0) -> list[bool]:
        """Re-deliver the last command's events (same idem_key, so same event_ids)."""
        return self.deliver(self.key, *events, at=at)

    def deliver(self, key: str, *events: ev.Event, at: datetime) -> list[bool]:
        records = [
            ev.RunEvent(
                event_id=event_id(key, self.job_id, i),
                job_id=self.job_id,
                at=at,
                idem_key=key,
                index=i,
                event=e,
            )
            for i, e in enumerate(events)
        ]
        batch = Batch(self.store)
        applied = [apply(batch, r) for r in records]
        batch.commit()
        return applied

    def register(self, *tags: str) -> None:
        self(ev.JobRegistered(spec=replace(SPEC, tags=tags), next_fire_at=None))


def scheduled(
    run_id: str, trigger: RunTrigger = RunTrigger.SCHEDULE, tick: datetime = T0
) -> ev.Event:
    return ev.RunScheduled(
        run_id=run_id, scheduled_for=tick, trigger=trigger, tasks=("main",), next_fire_at=None
    )


def ready(run_id: str, task: str = "main") -> ev.Event:
    return ev.TaskReady(run_id=run_id, task=task, attempt=1, scheduled_for=T0)


def claimed(run_id: str, task: str = "main", at: datetime = T0) -> ev.Event:
    return ev.TaskClaimed(
        run_id=run_id,
        task=task,
        attempt=1,
        epoch=1,
        worker_id="w1",
        lease_expires_at=at + timedelta(seconds=60),
        lease_ttl=timedelta(seconds=60),
        scheduled_for=T0,
        command=SPEC.task_specs[0].command,
        timeout=SPEC.timeout,
    )


def succeeded(run_id: str, started: datetime, finished: datetime) -> ev.Event:
    return ev.TaskSucceeded(
        run_id=run_id,
        task="main",
        attempt=1,
        epoch=1,
        worker_id="w1",
        exit_code=0,
        output_tail="",
        started_at=started,
        finished_at=finished,
    )


def dead_lettered(run_id: str) -> ev.Event:
    return ev.TaskDeadLettered(
        run_id=run_id,
        task="main",
        attempt=1,
        failure_kind=FailureKind.NONZERO_EXIT,
        exit_code=1,
        output_tail="",
    )


def test_missed_ticks_count_catch_up_runs_once_and_catch_up_skips_by_reason(
    store: Store, live: LiveCollector
) -> None:
    feed = Feeder(store, "missed-1")
    feed.register()
    tick = T0 - timedelta(minutes=5)
    feed(scheduled("r1", RunTrigger.CATCHUP, tick))
    again = feed(scheduled("r2", RunTrigger.CATCHUP, tick + timedelta(seconds=10)))
    # the same command re-delivered: its events are skipped
    assert feed.again(scheduled("r2", RunTrigger.CATCHUP, tick + timedelta(seconds=10))) == [False]
    queued = ev.RunQueued(
        run_id="r3",
        scheduled_for=tick + timedelta(seconds=20),
        trigger=RunTrigger.CATCHUP,
        next_fire_at=None,
        reason=QueueReason.MAX_ACTIVE_RUNS,
    )
    feed(queued)
    feed(scheduled("r3", RunTrigger.CATCHUP, tick + timedelta(seconds=20)))  # starts: not again
    feed(scheduled("r4", RunTrigger.SCHEDULE, T0))  # on time: not missed
    for reason in (SkipReason.CATCHUP_POLICY, SkipReason.CATCHUP_WINDOW, SkipReason.QUEUE_FULL):
        feed(ev.TickSkipped(scheduled_for=tick, reason=reason, next_fire_at=None))
    assert again == [True]
    missed = scrape()["cronlog_ticks_missed_total"]
    assert {labels: v for labels, v in missed.items() if ("job", "missed-1") in labels} == {
        (("job", "missed-1"), ("reason", "caught_up")): 3.0,
        (("job", "missed-1"), ("reason", "catchup_policy")): 1.0,
        (("job", "missed-1"), ("reason", "catchup_window")): 1.0,
    }


def test_job_label_cap_folds_later_jobs_into_other_but_never_a_critical_one(
    store: Store, clock: Clock
) -> None:
    collector = metrics_live.attach(store, max_jobs=2, stalled_s=600, clock=clock)
    try:
        before = scrape().get("cronlog_dead_letters_total", {})
        for job in ("cap-a", "cap-b", "cap-c", "cap-d", "cap-crit"):
            feed = Feeder(store, job)
            feed.register(*(["ops", "critical"] if job == "cap-crit" else []))
            feed(dead_lettered(f"{job}-r1"))
        after = scrape()
        dead = {k: v - before.get(k, 0.0) for k, v in after["cronlog_dead_letters_total"].items()}
        assert {k[0][1]: v for k, v in dead.items() if v} == {
            "cap-a": 1.0,
            "cap-b": 1.0,
            OTHER: 2.0,
            "cap-crit": 1.0,
        }
        assert after["cronlog_job_critical"] == {(("job", "cap-crit"),): 1.0}
        feed(ev.JobDeleted())  # feed is cap-crit's
        assert "cronlog_job_critical" not in scrape()  # no sample left
    finally:
        metrics_live.detach(collector)


def test_critical_tag_survives_a_restart_of_the_read_model(tmp_path: Path, clock: Clock) -> None:
    first = Store(tmp_path / "rm")
    Feeder(first, "crit-restart").register("critical")
    first.close()
    reopened = Store(tmp_path / "rm")
    collector = metrics_live.attach(reopened, max_jobs=0, stalled_s=600, clock=clock)
    try:
        assert scrape()["cronlog_job_critical"] == {(("job", "crit-restart"),): 1.0}
        assert metrics.LABELS.label("crit-restart") == "crit-restart"  # cap 0, still its own
        assert metrics.LABELS.label("anyone-else") == OTHER
    finally:
        metrics_live.detach(collector)
        reopened.close()


def test_lease_expiries_and_dead_letters_are_counted_once(
    store: Store, live: LiveCollector
) -> None:
    feed = Feeder(store, "reclaims")
    feed.register()
    expired_before = value("cronlog_lease_expired_total")
    feed(scheduled("r1"), ready("r1"))
    feed(claimed("r1"))
    expiry = ev.LeaseExpired(run_id="r1", task="main", attempt=1, epoch=1, worker_id="w1")
    assert feed(expiry) == [True]
    assert feed.again(expiry) == [False]
    feed(dead_lettered("r1"))
    assert value("cronlog_lease_expired_total") == expired_before + 1
    assert value("cronlog_dead_letters_total", job="reclaims") == 1


def test_claim_latency_runs_from_ready_or_release_to_claim(
    store: Store, live: LiveCollector
) -> None:
    feed = Feeder(store, "claims")
    feed.register()
    count, total = (value(f"cronlog_claim_latency_seconds_{s}") for s in ("count", "sum"))
    feed(scheduled("r1"), ready("r1"), at=T0)
    feed(claimed("r1"), at=T0 + timedelta(seconds=0.3))
    release = ev.TaskReleased(
        run_id="r1", task="main", attempt=1, epoch=1, worker_id="w1", reason="draining"
    )
    feed(release, at=T0 + timedelta(seconds=5))
    feed(claimed("r1"), at=T0 + timedelta(seconds=5.5))
    assert value("cronlog_claim_latency_seconds_count") == count + 2
    assert value("cronlog_claim_latency_seconds_sum") == pytest.approx(total + 0.8)


def test_trigger_lag_is_observed_once_per_run_with_its_trigger(
    store: Store, live: LiveCollector
) -> None:
    feed = Feeder(store, "lagged")
    feed.register()
    count = value("cronlog_trigger_lag_seconds_count", trigger="catchup")
    total = value("cronlog_trigger_lag_seconds_sum", trigger="catchup")
    tick = T0 - timedelta(seconds=30)
    feed(scheduled("r1", RunTrigger.CATCHUP, tick), ready("r1"), at=T0)
    feed(claimed("r1"), at=T0 + timedelta(seconds=0.2))
    feed(succeeded("r1", T0 + timedelta(seconds=0.5), T0 + timedelta(seconds=2)))
    feed(ev.RunSucceeded(run_id="r1"), at=T0 + timedelta(seconds=2))
    assert value("cronlog_trigger_lag_seconds_count", trigger="catchup") == count + 1
    assert value("cronlog_trigger_lag_seconds_sum", trigger="catchup") == pytest.approx(
        total + 30.5
    )


def finished_run(feed: Feeder, run_id: str, start: datetime, seconds: float) -> None:
    end = start + timedelta(seconds=seconds)
    feed(scheduled(run_id, tick=start), ready(run_id), at=start)
    feed(claimed(run_id), at=start)
    feed(succeeded(run_id, start, end), ev.RunSucceeded(run_id=run_id), at=end)


def test_overrun_ratio_is_elapsed_over_p99_of_recent_successes(
    store: Store, live: LiveCollector, clock: Clock
) -> None:
    feed = Feeder(store, "overrun")
    feed.register()
    for i, seconds in enumerate((8.0, 10.0, 9.0)):
        finished_run(feed, f"done-{i}", T0 + timedelta(minutes=i), seconds)
    start = T0 + timedelta(minutes=10)
    feed(scheduled("slow"), ready("slow"), at=start)
    feed(claimed("slow"), at=start)
    feed(scheduled("fresh"), ready("fresh"), at=start + timedelta(seconds=20))
    feed(claimed("fresh"), at=start + timedelta(seconds=20))
    no_history = Feeder(store, "overrun-new")
    no_history.register()
    no_history(scheduled("n1"), ready("n1"), at=start)
    no_history(claimed("n1"), at=start)
    clock.set(start + timedelta(seconds=25))
    samples = scrape()
    assert samples["cronlog_run_overrun_ratio"] == {(("job", "overrun"),): 2.5}
    assert samples["cronlog_runs_overrunning"] == {(("job", "overrun"),): 1.0}


def test_waiting_runs_count_queued_runs_until_they_start_or_are_cancelled(
    store: Store, live: LiveCollector
) -> None:
    feed = Feeder(store, "waiting")
    feed.register()
    for run_id in ("q1", "q2", "q3"):
        feed(
            ev.RunQueued(
                run_id=run_id,
                scheduled_for=T0,
                trigger=RunTrigger.SCHEDULE,
                next_fire_at=None,
                reason=QueueReason.MAX_ACTIVE_RUNS,
            )
        )
    feed(scheduled("q1"))
    feed(ev.RunCancelled(run_id="q2", reason=CancelReason.USER))
    samples = scrape()["cronlog_runs_waiting"]
    assert samples[(("reason", "max_active_runs"),)] == 1
    assert samples[(("reason", "suspended"),)] == 0


def test_a_dag_run_with_nothing_claimed_and_no_progress_is_stalled(
    store: Store, live: LiveCollector, clock: Clock
) -> None:
    feed = Feeder(store, "stalls")
    feed.register()
    feed(scheduled("idle"), ready("idle"), at=T0)
    feed(scheduled("busy"), ready("busy"), at=T0)
    feed(claimed("busy"), at=T0 + timedelta(seconds=1))
    clock.set(T0 + timedelta(seconds=599))
    assert value("cronlog_dags_stalled") == 0
    clock.set(T0 + timedelta(seconds=601))
    assert value("cronlog_dags_stalled") == 1
    feed(claimed("idle"), at=T0 + timedelta(seconds=601))
    assert value("cronlog_dags_stalled") == 0


def test_p99_is_the_nearest_rank() -> None:
    assert p99([3.0]) == 3.0
    assert p99([float(i) for i in range(1, 51)]) == 50.0
    assert p99([float(i) for i in range(1, 201)]) == 198.0
    with pytest.raises(ValueError, match="durations"):
        p99([])


@given(
    cap=st.integers(min_value=0, max_value=8),
    seen=st.lists(st.tuples(st.integers(0, 30), st.booleans()), max_size=120),
)
def test_distinct_job_labels_never_exceed_the_cap_plus_other(
    cap: int, seen: list[tuple[int, bool]]
) -> None:
    labels = JobLabels(cap)
    critical: set[str] = set()
    given_labels: set[str] = set()
    for n, is_critical in seen:
        job = f"job-{n}"
        if is_critical:  # a (re)registration that tags it critical
            labels.set_critical(job, True)
            critical.add(job)
        label = labels.label(job)
        assert label == job or (label == OTHER and job not in critical)
        given_labels.add(label)
    assert len(given_labels - critical) <= cap + 1
    assert critical <= given_labels | critical


@pytest.mark.parametrize(
    ("tags", "field"),
    [
        (("Critical",), "tags[0]"),
        (("ok", ""), "tags[1]"),
        (("ok", "-x"), "tags[1]"),
        (("a" * 64,), "tags[0]"),
        (("ok", "ok"), "tags[1]"),
        (tuple(f"t{i}" for i in range(17)), "tags"),
    ],
)
def test_bad_tags_are_refused_naming_the_field(tags: tuple[str, ...], field: str) -> None:
    with pytest.raises(InvalidDefinition) as refused:
        validate_tags(tags)
    assert refused.value.field == field


def test_good_tags_pass() -> None:
    validate_tags(("critical", "team.payments", "a" * 63, *(f"t{i}" for i in range(13))))


def test_the_live_index_forgets_ended_runs_and_ignores_late_events(store: Store) -> None:
    feed = Feeder(store, "late")
    feed.register()
    finished_run(feed, "r1", T0, 4.0)
    feed(claimed("r1"), at=T0 + timedelta(seconds=9))  # a late claim of the ended run
    feed(
        ev.LeaseRenewed(
            run_id="r1",
            task="main",
            attempt=1,
            epoch=1,
            worker_id="w1",
            lease_expires_at=T0 + timedelta(minutes=2),
        )
    )
    assert list(live_runs(store)) == []
    assert durations(store, "late") == [4.0]


@settings(max_examples=25, deadline=None)
@given(
    cap=st.integers(min_value=0, max_value=5),
    jobs=st.lists(st.integers(0, 12), min_size=1, max_size=40),
    critical=st.sets(st.integers(0, 12), max_size=3),
)
def test_dead_letter_series_never_have_more_job_labels_than_the_cap_plus_other(
    tmp_path_factory: pytest.TempPathFactory, cap: int, jobs: list[int], critical: set[int]
) -> None:
    prefix = f"prop{next(EXAMPLES)}-"
    store = Store(tmp_path_factory.mktemp("rm") / "rm")
    collector = metrics_live.attach(store, max_jobs=cap, stalled_s=600)
    try:
        other_before = value("cronlog_dead_letters_total", job=OTHER)
        for n in sorted(set(jobs) | critical):
            Feeder(store, f"{prefix}{n}").register(*(["critical"] if n in critical else []))
        for i, n in enumerate(jobs):
            Feeder(store, f"{prefix}{n}")(dead_lettered(f"{prefix}{n}-r{i}"))
        dead = scrape()["cronlog_dead_letters_total"]
        mine = {k[0][1]: v for k, v in dead.items() if k[0][1].startswith(prefix)}
        crit = {f"{prefix}{n}" for n in critical}
        assert len(set(mine) - crit) <= cap
        assert crit & {f"{prefix}{n}" for n in jobs} <= set(mine)
        folded = dead.get((("job", OTHER),), 0.0) - other_before
        assert sum(mine.values()) + folded == len(jobs)
    finally:
        metrics_live.detach(collector)
        store.close()


def test_a_critical_jobs_missed_series_exist_at_zero_before_its_first_miss() -> None:
    """So that the paging alert's increase() sees the first missed tick (alerts.yml)."""
    metrics.configure(200, {"pay"})
    text = generate_latest(metrics.REGISTRY).decode()
    for reason in ("caught_up", "catchup_policy", "catchup_window"):
        assert f'cronlog_ticks_missed_total{{job="pay",reason="{reason}"}} 0.0' in text


def test_suspended_jobs_are_counted_from_the_store_so_a_restart_keeps_them(
    tmp_path: Path, clock: Clock
) -> None:
    """The alert on ``cronlog_jobs_suspended`` must not resolve because the API restarted."""
    first = Store(tmp_path / "rm")
    feeds = [Feeder(first, j) for j in ("s1", "s2", "s3")]
    opened = ev.JobSuspended(
        reason=SuspendReason.CIRCUIT_OPEN,
        failed_attempts=3,
        window=timedelta(minutes=5),
        resume_at=T0 + timedelta(minutes=10),
    )
    for feed in feeds:
        feed.register()
        feed(opened)
    feeds[1](ev.JobUnsuspended(reason=UnsuspendReason.OPERATOR))
    finished_run(feeds[2], "r-s3", T0, 5.0)
    assert durations(first, "s3") == [5.0]
    feeds[2](ev.JobDeleted())
    first.close()
    reopened = Store(tmp_path / "rm")
    collector = metrics_live.attach(reopened, max_jobs=10, stalled_s=600, clock=clock)
    try:
        assert scrape()["cronlog_jobs_suspended"] == {(): 1.0}  # s1 only, after the restart
        assert durations(reopened, "s3") == []  # a deleted job leaves nothing
    finally:
        metrics_live.detach(collector)
        reopened.close()


def test_critical_labels_are_bounded_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any tenant admin may tag a job critical: past MAX_CRITICAL_JOBS it is labelled as any."""
    monkeypatch.setattr(metrics, "MAX_CRITICAL_JOBS", 2)
    labels = JobLabels(max_jobs=0)
    for job in ("c1", "c2", "c3"):
        labels.set_critical(job, True)
    assert labels.critical() == {"c1", "c2"}
    assert [labels.label(j) for j in ("c1", "c2", "c3")] == ["c1", "c2", OTHER]
    labels.set_critical("c1", False)  # untagged: no longer critical, its label stays pinned
    labels.set_critical("c3", True)  # still no room: pinned labels count
    assert labels.critical() == {"c2"}
    assert [labels.label(j) for j in ("c1", "c2", "c3")] == ["c1", "c2", OTHER]


def test_an_untagged_critical_job_keeps_its_series_whole() -> None:
    """Found by an adversarial run: untagging split a job's counts between its own label and
    ``other`` (and overshot the cap)."""
    labels = JobLabels(max_jobs=1)
    labels.label("first")  # takes the one own label
    labels.set_critical("pay", True)
    labels.set_critical("pay", False)
    assert labels.label("pay") == "pay"
    assert labels.label("late") == OTHER
    assert labels.critical() == set()


def test_history_before_the_window_is_not_counted_but_still_tracked(
    tmp_path: Path, clock: Clock
) -> None:
    """A read model rebuilt from offset 0 must not replay old misses into alerts: events
    older than CRONLOG_METRICS_HISTORY_S before start are history (not counted), while the
    critical tag they carry still counts."""
    store = Store(tmp_path / "rm")
    collector = metrics_live.attach(store, max_jobs=10, stalled_s=600, history_s=900, clock=clock)
    try:
        feed = Feeder(store, "old-news")
        old = datetime.fromtimestamp(clock() - 3600, UTC)
        feed(ev.JobRegistered(spec=replace(SPEC, tags=("critical",)), next_fire_at=None), at=old)
        skipped_before = value(
            "cronlog_ticks_missed_total", job="old-news", reason="catchup_policy"
        )
        miss = ev.TickSkipped(
            scheduled_for=old, reason=SkipReason.CATCHUP_POLICY, next_fire_at=None
        )
        feed(miss, at=old)
        assert (
            value("cronlog_ticks_missed_total", job="old-news", reason="catchup_policy")
            == skipped_before
        )  # history
        assert scrape()["cronlog_job_critical"] == {(("job", "old-news"),): 1.0}
        feed(miss, at=datetime.fromtimestamp(clock(), UTC))  # news
        assert (
            value("cronlog_ticks_missed_total", job="old-news", reason="catchup_policy")
            == skipped_before + 1
        )
    finally:
        metrics_live.detach(collector)
        store.close()
        metrics.configure(200, set())
