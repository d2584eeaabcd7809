"""Traces (docs/architecture.md, "Traces"): off by default, on through ``OTEL_*``; the fold's
spans per batch, decision and grant, and a worker's per claim, execution and renewal, read
from the SDK's in-memory exporter."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode, Tracer

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.errors import CronlogError
from cronlog.ids import run_id_for_trigger
from cronlog.model import JobSpec, Schedule, ScheduleKind, main_task
from services import tracing
from services.worker import spans as worker_spans
from services.worker.execute import ProcessExecution
from topology.fold.due_index import DueIndex
from topology.fold.folder import BatchFolder, BatchResult, Record
from topology.fold.spans import batch_attributes, batch_span, sdk_tracer
from topology.kafka.config import KafkaSettings
from topology.kafka.partitioning import partition_for
from topology.kafka.topics import Topics
from topology.wire.codec import Codec, encode_command

N = 4
T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
TOPICS = Topics.of(KafkaSettings(partitions=N))
MANUAL = JobSpec(name="m", schedule=Schedule(ScheduleKind.MANUAL), task_specs=main_task(("true",)))
OTEL_VARS = (
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """The process environment without any of the OTEL_* variables tracing reads."""
    for name in OTEL_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.fixture(scope="module")
def provider() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    """An SDK provider exporting synchronously to memory; never installed as the global one."""
    exporter = InMemorySpanExporter()
    p = TracerProvider(shutdown_on_exit=False)
    p.add_span_processor(SimpleSpanProcessor(exporter))
    yield p, exporter
    p.shutdown()


@pytest.fixture
def tracer(provider: tuple[TracerProvider, InMemorySpanExporter]) -> Tracer:
    provider[1].clear()
    return provider[0].get_tracer("test")


@pytest.fixture
def finished(provider: tuple[TracerProvider, InMemorySpanExporter]) -> InMemorySpanExporter:
    return provider[1]


# -- setup: off by default -------------------------------------------------------------------


def test_tracing_is_off_with_no_otel_variables(clean_env: pytest.MonkeyPatch) -> None:
    assert tracing.exporter_names({}) == []
    assert tracing.setup("cronlog-test") is None
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)  # the API's
    assert sdk_tracer("cronlog.fold") is None  # so the fold makes no span at all


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({"OTEL_TRACES_EXPORTER": "none"}, []),
        ({"OTEL_TRACES_EXPORTER": "console"}, ["console"]),
        ({"OTEL_TRACES_EXPORTER": "otlp, console"}, ["otlp", "console"]),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, ["otlp"]),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, ["otlp"]),
        ({"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"}, []),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "TRUE"}, []),
        ({"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "false"}, ["console"]),
    ],
)
def test_exporters_follow_the_otel_variables(env: dict[str, str], names: list[str]) -> None:
    assert tracing.exporter_names(env) == names


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"OTEL_TRACES_EXPORTER": "jaeger"}, "OTEL_TRACES_EXPORTER"),
        (
            {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ),
    ],
)
def test_an_exporter_that_cannot_be_made_is_refused_naming_the_variable(
    env: dict[str, str], variable: str
) -> None:
    with pytest.raises(CronlogError, match=variable):
        tracing.exporter_names(env)


def test_console_exporter_builds_an_sdk_provider_named_for_the_service(
    clean_env: pytest.MonkeyPatch,
) -> None:
    clean_env.setenv("OTEL_TRACES_EXPORTER", "console")
    built = tracing.provider_from_env("cronlog-scheduler")
    assert isinstance(built, TracerProvider)
    try:
        assert built.resource.attributes["service.name"] == "cronlog-scheduler"
        assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)  # built only
    finally:
        built.shutdown()


def test_otel_service_name_wins_over_the_default_name(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("OTEL_TRACES_EXPORTER", "console")
    clean_env.setenv("OTEL_SERVICE_NAME", "sched-eu-1")
    clean_env.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=prod")
    built = tracing.provider_from_env("cronlog-scheduler")
    assert built is not None
    try:
        attrs = built.resource.attributes
        assert (attrs["service.name"], attrs["deployment.environment"]) == ("sched-eu-1", "prod")
    finally:
        built.shutdown()


def test_sdk_disabled_builds_nothing(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("OTEL_TRACES_EXPORTER", "console")
    clean_env.setenv("OTEL_SDK_DISABLED", "true")
    assert tracing.provider_from_env("cronlog-worker") is None


# -- the fold's spans --------------------------------------------------------------------------


class World:
    """A folder owning every partition with a dict store, tracing to ``tracer``."""

    def __init__(self, tracer: Tracer | None) -> None:
        self.store: dict[str, bytes] = {}
        due = DueIndex()
        due.reset(range(N))
        self.folder = BatchFolder(
            TOPICS, N, lambda _, j: self.store.get(j), due, Codec(), tracer=tracer
        )
        self.offset = 0

    def record(self, job_id: str, command: cmd.Command, partition: int = 0) -> Record:
        self.offset += 1
        value = encode_command(
            cmd.Envelope(idem_key=f"k{self.offset}", job_id=job_id, command=command)
        )
        at = T0 + timedelta(seconds=self.offset)
        p = partition_for(job_id, N) if job_id else partition
        return Record(p, self.offset, int(at.timestamp() * 1000), job_id.encode() or None, value)

    def fold(self, *records: Record) -> BatchResult:
        out = self.folder.fold(list(records))
        self.store.update({j: w.value for j, w in out.writes.items()})
        return out


def _named(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def test_each_decision_is_a_fold_command_span_and_a_grant_a_claim_span(
    tracer: Tracer, finished: InMemorySpanExporter
) -> None:
    world = World(tracer)
    world.fold(world.record("nightly", cmd.RegisterJob(spec=MANUAL)))
    world.fold(world.record("nightly", cmd.TriggerJob()))
    run_id = run_id_for_trigger("nightly", f"k{world.offset}")
    p = partition_for("nightly", N)
    world.fold(world.record("", cmd.PollTasks(worker_id="w1", slots=1, poll_id="p1"), p))
    renew = cmd.RenewLease(run_id=run_id, task="main", attempt=1, epoch=1, worker_id="w1")
    stale = cmd.RenewLease(run_id=run_id, task="main", attempt=1, epoch=7, worker_id="w1")
    world.fold(world.record("nightly", renew), world.record("nightly", stale))
    spans = finished.get_finished_spans()
    decided = _named(spans, "fold.command")
    assert [s.attributes["command"] for s in decided if s.attributes] == [
        "RegisterJob",
        "TriggerJob",
        "PollTasks",
        "RenewLease",
        "RenewLease",
    ]
    assert {s.attributes["job_id"] for s in decided if s.attributes} == {"nightly"}
    trigger = decided[1].attributes or {}
    assert trigger["run_id"] == run_id  # from the run it scheduled (a trigger names none)
    [claim] = _named(spans, "claim")
    assert dict(claim.attributes or {}) == {
        "job_id": "nightly",
        "run_id": run_id,
        "task": "main",
        "attempt": 1,
        "epoch": 1,
        "worker_id": "w1",
    }
    poll = decided[2]
    assert claim.parent is not None and poll.context is not None
    assert claim.parent.span_id == poll.context.span_id  # the grant is the poll's decision
    renewed, refused = (dict(s.attributes or {}) for s in decided[3:])
    assert {k: renewed[k] for k in ("run_id", "task", "attempt", "epoch", "worker_id")} == {
        "run_id": run_id,
        "task": "main",
        "attempt": 1,
        "epoch": 1,
        "worker_id": "w1",
    }
    assert "rejected" not in renewed
    assert (refused["epoch"], refused["rejected"]) == (7, "stale_epoch")


def test_a_batch_span_holds_its_decisions_and_counts_them(
    tracer: Tracer, finished: InMemorySpanExporter
) -> None:
    world = World(tracer)
    jobs = [f"job{i}" for i in range(6)]
    records = [world.record(j, cmd.RegisterJob(spec=MANUAL)) for j in jobs]
    with batch_span(tracer):
        out = world.fold(*records)
        batch_attributes(len(records), {r.partition for r in records}, out.decisions)
    spans = finished.get_finished_spans()
    [batch] = _named(spans, "fold.batch")
    assert dict(batch.attributes or {}) == {
        "records": 6,
        "partitions": tuple(sorted({partition_for(j, N) for j in jobs})),
        "decisions": 6,
    }
    decided = _named(spans, "fold.command")
    assert len(decided) == 6
    assert batch.context is not None
    assert {s.parent.span_id for s in decided if s.parent} == {batch.context.span_id}


def test_without_a_tracer_the_fold_makes_no_span(
    clean_env: pytest.MonkeyPatch, finished: InMemorySpanExporter
) -> None:
    finished.clear()
    world = World(None)  # no global provider installed: tracing is off
    assert world.folder.tracer is None
    out = world.fold(world.record("quiet", cmd.RegisterJob(spec=MANUAL)))
    assert out.decisions == 1
    assert finished.get_finished_spans() == ()
    with batch_span(None):
        batch_attributes(1, [0], 1)  # no current span: nothing to set, nothing raised


# -- the worker's spans ------------------------------------------------------------------------


def _grant(run_id: str = "r1", epoch: int = 2) -> ev.TaskClaimed:
    return ev.TaskClaimed(
        run_id=run_id,
        task="main",
        attempt=1,
        epoch=epoch,
        worker_id="w1",
        lease_expires_at=T0 + timedelta(seconds=60),
        lease_ttl=timedelta(seconds=60),
        scheduled_for=T0,
        command=("sh", "-c", "exit 3"),
        timeout=timedelta(seconds=30),
    )


def test_an_execution_that_fails_is_an_error_span_with_its_exit_code_under_its_claim(
    tracer: Tracer, finished: InMemorySpanExporter
) -> None:
    grant = _grant()
    with worker_spans.claim(tracer, "nightly", grant):
        parent = otel_context.get_current()  # what Attempts.start hands the attempt thread
    with worker_spans.executing(tracer, "nightly", grant, parent) as span:
        outcome = ProcessExecution(["sh", "-c", "exit 3"], env={}, timeout_s=30).run()
        worker_spans.ended(span, outcome, revoked=False)
    with worker_spans.renewing(tracer, "nightly", grant, 1, span):
        pass
    spans = finished.get_finished_spans()
    [claim] = _named(spans, "claim")
    [execute] = _named(spans, "task.execute")
    [renew] = _named(spans, "lease.renew")
    lease = {
        "job_id": "nightly",
        "run_id": "r1",
        "task": "main",
        "attempt": 1,
        "epoch": 2,
        "worker_id": "w1",
    }
    assert dict(claim.attributes or {}) == lease
    assert dict(execute.attributes or {}) == {
        **lease,
        "timeout_s": 30.0,
        "exit_code": 3,
        "failure_kind": "nonzero_exit",
    }
    assert (execute.status.status_code, execute.status.description) == (
        StatusCode.ERROR,
        "nonzero_exit",
    )
    assert dict(renew.attributes or {}) == {**lease, "renewal": 1}
    assert execute.parent is not None and claim.context is not None
    assert execute.parent.span_id == claim.context.span_id
    assert renew.parent is not None and execute.context is not None
    assert renew.parent.span_id == execute.context.span_id


def test_a_successful_execution_is_not_an_error(
    tracer: Tracer, finished: InMemorySpanExporter
) -> None:
    grant = _grant()
    with worker_spans.executing(tracer, "nightly", grant, None) as span:
        outcome = ProcessExecution(["true"], env={}, timeout_s=30).run()
        worker_spans.ended(span, outcome, revoked=False)
    [execute] = _named(finished.get_finished_spans(), "task.execute")
    assert execute.status.status_code is StatusCode.UNSET
    assert (execute.attributes or {})["exit_code"] == 0
    assert "failure_kind" not in (execute.attributes or {})


class Raising(SimpleSpanProcessor):
    """A span processor whose every hook raises: a broken exporter or SDK."""

    def __init__(self) -> None:
        super().__init__(InMemorySpanExporter())

    def on_start(self, span: object, parent_context: object = None) -> None:
        raise RuntimeError("processor broke on start")

    def on_end(self, span: object) -> None:
        raise RuntimeError("processor broke on end")


def _scenario(world: World) -> list[BatchResult]:
    """Register three cron jobs and a manual one, trigger it, let a worker poll and renew,
    and tick: one decision of each kind the fold makes spans for."""
    cron = JobSpec(
        name="c", schedule=Schedule(ScheduleKind.CRON, "* * * * *"), task_specs=main_task(("true",))
    )
    jobs = ["a", "b", "c"]
    outs = [world.fold(*(world.record(j, cmd.RegisterJob(spec=cron)) for j in jobs))]
    outs.append(world.fold(world.record("nightly", cmd.RegisterJob(spec=MANUAL))))
    outs.append(world.fold(world.record("nightly", cmd.TriggerJob())))
    p = partition_for("nightly", N)
    poll = cmd.PollTasks(worker_id="w1", slots=1, poll_id="p1")
    outs.append(world.fold(world.record("", poll, p)))
    for q in range(N):
        tick = world.record("", cmd.Tick(), q)
        late = Record(q, tick.offset, tick.timestamp_ms + 3_600_000, None, tick.value)
        outs.append(world.fold(late))  # an hour on: every cron job is due
    return outs


def _shape(out: BatchResult) -> tuple[int, object, object]:
    """Everything a batch hands the transaction: decisions, state writes, records sent."""
    return (
        out.decisions,
        sorted(out.writes.items()),
        [(s.topic, s.key, s.value, s.partition) for s in out.sends],
    )


def test_a_tracing_sdk_that_raises_changes_no_decision(caplog: pytest.LogCaptureFixture) -> None:
    """Spans never change what is decided: with a processor raising on every span, each batch's
    writes, sends and decisions are those of a fold without tracing (nothing dead-lettered)."""
    broken = TracerProvider()
    broken.add_span_processor(Raising())
    plain, traced = World(None), World(broken.get_tracer("test"))
    with batch_span(broken.get_tracer("test")):  # the batch span's own failures too
        expected = [_shape(o) for o in _scenario(plain)]
        got = [_shape(o) for o in _scenario(traced)]
        batch_attributes(1, [0], 1)
    assert got == expected
    assert (
        sum(decisions for decisions, _, _ in got) >= 8
    )  # registrations, trigger, grant, three ticks fired
    assert "tracing_failed" in [getattr(r, "action", None) for r in caplog.records]


def test_a_worker_span_that_cannot_open_runs_its_body_once_and_lets_its_errors_through() -> None:
    broken = TracerProvider()
    broken.add_span_processor(Raising())
    tracer = broken.get_tracer("test")
    ran: list[object] = []
    with worker_spans.executing(tracer, "nightly", _grant(), None) as span:
        ran.append(span)
        worker_spans.ended(
            span, ProcessExecution(["true"], env={}, timeout_s=30).run(), revoked=False
        )
    with worker_spans.renewing(tracer, "nightly", _grant(), 1, None) as renewal:
        ran.append(renewal)
    with pytest.raises(KeyError), worker_spans.claim(tracer, "nightly", _grant()):
        ran.append("claim body")
        raise KeyError("the body's own error")
    assert ran == [None, None, "claim body"]
