"""Task logs without Kafka: chunking and the cap, each kind's output, the API's log endpoint."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from cronlog import events as ev
from cronlog.ids import event_id
from cronlog.model import HttpTask, JobSpec, Schedule, ScheduleKind, TaskKind, TaskSpec
from cronlog.vocabulary import RunTrigger
from services.api.app import create_app
from services.api.readmodel.projection import apply
from services.api.readmodel.reader import ReadModel
from services.api.readmodel.store import Batch
from services.api.routes.logs import LogModel, put_chunk
from services.worker.kinds import PythonPool
from services.worker.logsink import AttemptRef, LogSink
from services.worker.reach import AddressPolicy, Reach
from tests.unit.authed import authed
from tests.unit.task_runs import run_task
from topology.wire.codec import DecodeError, encode_event
from topology.wire.log_chunks import CHUNK_BYTES, LogChunk, decode_chunk

REF = AttemptRef("job", "r1", "main", 1, 1, "w1")
NOOP = "tests.unit.tasks_for_tests:noop"
KIB = 1024
T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


class Sent:
    """A ``send`` that decodes what it is given."""

    def __init__(self) -> None:
        self.chunks: list[LogChunk] = []

    def __call__(self, run_id: str, value: bytes) -> None:
        chunk = decode_chunk(value)
        assert chunk.run_id == run_id
        self.chunks.append(chunk)

    def data(self) -> bytes:
        return b"".join(c.data for c in self.chunks)


def _sink(cap: int = 1024 * KIB, ref: AttemptRef = REF) -> tuple[LogSink, Sent]:
    sent = Sent()
    return LogSink(ref, cap, sent), sent


# -- the sink ----------------------------------------------------------------------------------


def test_small_output_is_one_final_chunk_with_the_exact_bytes() -> None:
    sink, sent = _sink()
    sink.write(b"hello\n")
    sink.write(b"\xff not utf-8\n")
    sink.close()
    [chunk] = sent.chunks
    assert chunk.data == b"hello\n\xff not utf-8\n"
    assert (chunk.seq, chunk.offset, chunk.final, chunk.truncated) == (0, 0, True, False)
    assert (chunk.bytes_total, chunk.cap_bytes) == (18, 1024 * KIB)
    assert (
        chunk.job_id,
        chunk.run_id,
        chunk.task,
        chunk.attempt,
        chunk.epoch,
        chunk.worker_id,
    ) == ("job", "r1", "main", 1, 1, "w1")


def test_output_is_cut_into_chunks_of_at_most_64_kib_with_contiguous_offsets() -> None:
    sink, sent = _sink()
    data = os.urandom(150 * KIB)
    for i in range(0, len(data), 10_000):
        sink.write(data[i : i + 10_000])
    sink.close()
    assert [len(c.data) for c in sent.chunks] == [
        CHUNK_BYTES,
        CHUNK_BYTES,
        150 * KIB - 2 * CHUNK_BYTES,
    ]
    assert [c.seq for c in sent.chunks] == [0, 1, 2]
    assert [c.offset for c in sent.chunks] == [0, CHUNK_BYTES, 2 * CHUNK_BYTES]
    assert [c.final for c in sent.chunks] == [False, False, True]
    assert sent.data() == data


def test_output_past_the_cap_is_counted_not_kept_and_the_final_chunk_says_so() -> None:
    sink, sent = _sink(cap=100 * KIB)
    data = os.urandom(300 * KIB)
    sink.write(data)
    sink.count(5)  # bytes an execution saw but did not pass on
    sink.close()
    assert sent.data() == data[: 100 * KIB]
    final = sent.chunks[-1]
    assert (final.final, final.truncated, final.cap_bytes) == (True, True, 100 * KIB)
    assert final.bytes_total == 300 * KIB + 5


def test_flush_sends_what_waits_and_close_is_idempotent() -> None:
    sink, sent = _sink()
    sink.flush()
    assert sent.chunks == []
    sink.write(b"partial")
    sink.flush()
    assert [(c.data, c.final) for c in sent.chunks] == [(b"partial", False)]
    sink.close()
    sink.close()
    sink.write(b"late")
    assert [(c.data, c.final, c.seq) for c in sent.chunks] == [
        (b"partial", False, 0),
        (b"", True, 1),
    ]


def test_a_completion_without_any_output_sends_no_log_record() -> None:
    sink, sent = _sink()
    sink.close(skip_if_empty=True)
    sink.close()  # closed: the finally's second close sends nothing either
    sink.write(b"late")
    assert sent.chunks == []


def test_output_written_flushed_or_only_counted_still_ends_with_a_final_chunk() -> None:
    written, sent = _sink()
    written.write(b"x")
    written.close(skip_if_empty=True)
    assert [(c.data, c.final, c.seq) for c in sent.chunks] == [(b"x", True, 0)]
    counted, sent = _sink(cap=0)
    counted.write(b"abc")
    counted.close(skip_if_empty=True)
    assert [(c.data, c.final, c.bytes_total, c.truncated) for c in sent.chunks] == [
        (b"", True, 3, True)
    ]
    flushed, sent = _sink()
    flushed.write(b"step")
    flushed.flush()
    flushed.close(skip_if_empty=True)
    assert [(c.data, c.final) for c in sent.chunks] == [(b"step", False), (b"", True)]


def test_cap_zero_keeps_nothing_and_a_negative_cap_is_refused() -> None:
    sink, sent = _sink(cap=0)
    sink.write(b"abc")
    sink.close()
    assert [(c.data, c.truncated, c.bytes_total) for c in sent.chunks] == [(b"", True, 3)]
    with pytest.raises(ValueError, match="cap_bytes"):
        LogSink(REF, -1, Sent())


def test_a_log_chunk_is_not_a_run_event() -> None:
    record = ev.RunEvent(
        event_id=event_id("k", "j", 0),
        job_id="j",
        at=T0,
        idem_key="k",
        index=0,
        event=ev.RunSucceeded(run_id="r1"),
    )
    with pytest.raises(DecodeError, match="unknown fingerprint"):
        decode_chunk(encode_event(record))


# -- each kind's output ----------------------------------------------------------------------

BASE = TaskSpec("main", ("true",))
LOCAL = Reach(http=AddressPolicy.parse("127.0.0.1/32"))
"""The task policy of these tests: their http server listens on loopback."""


def _log_of(spec: TaskSpec, pool: PythonPool, cap: int = 1024 * KIB) -> tuple[bytes, LogChunk]:
    sink, sent = _sink(cap)
    run_task(spec, pool, LOCAL, output=sink, capture_bytes=cap)
    sink.close()
    return sent.data(), sent.chunks[-1]


def test_exec_log_has_stdout_and_stderr_whole(pool: PythonPool) -> None:
    script = "printf 'out1\\n'; printf 'err1\\n' >&2; head -c 10000 /dev/zero | tr '\\0' x"
    data, final = _log_of(replace(BASE, command=("sh", "-c", script)), pool)
    assert data == b"out1\nerr1\n" + b"x" * 10_000
    assert (final.bytes_total, final.truncated) == (10_010, False)


def test_exec_spawn_error_is_in_the_log(pool: PythonPool) -> None:
    data, _ = _log_of(replace(BASE, command=("/no/such/binary",)), pool)
    assert data.startswith(b"cannot start '/no/such/binary'")


def test_python_log_has_prints_then_the_result_and_the_cap_counts_the_rest(
    pool: PythonPool,
) -> None:
    spec = replace(
        BASE, kind=TaskKind.PYTHON, command=(), callable="tests.unit.tasks_for_tests:chatty"
    )
    data, final = _log_of(spec, pool)
    assert data == b"to stdout\nto stderr\n" + b"y" * 5000 + b"\ndone"
    data, final = _log_of(spec, pool, cap=10)
    assert data == b"to stdout\n"
    # kept output ends in a newline: the result follows without a separator
    assert final.truncated and final.bytes_total == 10 + 10 + 5000 + 4


def test_a_no_op_python_task_has_an_empty_tail_and_one_that_only_prints_ends_with_them(
    pool: PythonPool,
) -> None:
    noop = replace(BASE, kind=TaskKind.PYTHON, command=(), callable=NOOP)
    sink, sent = _sink()
    out = run_task(noop, pool, LOCAL, output=sink, capture_bytes=KIB)
    sink.close(skip_if_empty=out.output_tail == "")
    assert (out.output_tail, sent.chunks) == ("", [])
    prints = replace(noop, callable="tests.unit.tasks_for_tests:prints_only")
    out = run_task(prints, pool, LOCAL, capture_bytes=KIB)
    assert (out.exit_code, out.output_tail) == (0, "printed, returned nothing\n")


class _Teapot(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"short and stout\n"
        self.send_response(418)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return


def test_http_log_has_the_status_line_and_the_body(pool: PythonPool) -> None:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Teapot)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/pot"
        data, _ = _log_of(replace(BASE, kind=TaskKind.HTTP, command=(), http=HttpTask(url)), pool)
    finally:
        httpd.shutdown()
        httpd.server_close()
    httpd.server_close()
    assert data == b"HTTP/1.0 418 I'm a Teapot\nshort and stout\n"
    closed = replace(BASE, kind=TaskKind.HTTP, command=(), http=HttpTask("http://127.0.0.1:9/"))
    data, _ = _log_of(closed, pool)
    assert data.startswith(b"ConnectError")


# -- the API ---------------------------------------------------------------------------------


@pytest.fixture
def logs(rm: ReadModel, tmp_path: Path) -> Iterator[LogModel]:
    model = LogModel(rm.settings, tmp_path / "logs")
    yield model
    model.store.close()


@pytest.fixture
def api(rm: ReadModel, logs: LogModel) -> TestClient:
    return authed(create_app(rm.settings, read_model=rm, log_model=logs))


def _events(rm: ReadModel, *events: ev.Event, key: str = "k") -> None:
    batch = Batch(rm.store)
    for i, event in enumerate(events):
        apply(
            batch,
            ev.RunEvent(
                event_id=event_id(f"{key}{i}", "job", 0),
                job_id="job",
                at=T0,
                idem_key=f"{key}{i}",
                index=0,
                event=event,
            ),
        )
    batch.commit()


def _claimed(rm: ReadModel, epoch: int = 1, attempt: int = 1) -> None:
    spec = JobSpec("kinds", Schedule(ScheduleKind.MANUAL), (BASE,))
    _events(
        rm,
        ev.JobRegistered(spec=spec, next_fire_at=None),
        ev.RunScheduled(
            run_id="r1",
            scheduled_for=T0,
            trigger=RunTrigger.MANUAL,
            tasks=("main",),
            next_fire_at=None,
        ),
        ev.TaskReady(run_id="r1", task="main", attempt=attempt, scheduled_for=T0),
        ev.TaskClaimed(
            run_id="r1",
            task="main",
            attempt=attempt,
            epoch=epoch,
            worker_id="w1",
            lease_expires_at=T0 + timedelta(seconds=60),
            lease_ttl=timedelta(seconds=60),
            scheduled_for=T0,
            command=BASE.command,
            timeout=spec.timeout,
        ),
    )


def _feed(logs: LogModel, sent: Sent, *, drop: tuple[int, ...] = ()) -> None:
    batch = Batch(logs.store)
    for chunk in sent.chunks:
        if chunk.seq not in drop:
            put_chunk(batch, chunk)
            put_chunk(batch, chunk)  # a re-delivery changes nothing
    batch.commit()


URL = "/api/v1/runs/r1/tasks/main/attempts/1/log"


def test_finished_log_is_served_whole_with_its_totals(
    rm: ReadModel, logs: LogModel, api: TestClient
) -> None:
    _claimed(rm)
    sink, sent = _sink(cap=100 * KIB)
    data = os.urandom(200 * KIB)
    sink.write(data)
    sink.close()
    _feed(logs, sent)
    answer = api.get(URL)
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "text/plain; charset=utf-8"
    assert answer.content == data[: 100 * KIB]
    h = answer.headers
    assert (h["x-cronlog-log-complete"], h["x-cronlog-log-truncated"]) == ("true", "true")
    assert (h["x-cronlog-log-cap-bytes"], h["x-cronlog-log-bytes-total"]) == (
        str(100 * KIB),
        str(200 * KIB),
    )
    assert (h["x-cronlog-log-bytes"], h["x-cronlog-log-epoch"]) == (str(100 * KIB), "1")
    assert h["x-cronlog-attempt-state"] == "running"


def test_running_attempt_answers_its_partial_log_as_incomplete(
    rm: ReadModel, logs: LogModel, api: TestClient
) -> None:
    _claimed(rm)
    empty = api.get(URL, params={"format": "json"}).json()
    assert (empty["text"], empty["complete"], empty["epoch"], empty["state"]) == (
        "",
        False,
        1,
        "running",
    )
    sink, sent = _sink()
    sink.write(b"step 1\n")
    sink.flush()
    _feed(logs, sent)
    doc = api.get(URL, params={"format": "json"}).json()
    assert (doc["text"], doc["complete"], doc["bytes_total"], doc["truncated"]) == (
        "step 1\n",
        False,
        7,
        False,
    )


def test_a_missing_chunk_is_a_gap_and_the_log_is_not_complete(
    rm: ReadModel, logs: LogModel, api: TestClient
) -> None:
    _claimed(rm)
    sink, sent = _sink()
    sink.write(b"a" * CHUNK_BYTES + b"b" * CHUNK_BYTES + b"c")
    sink.close()
    _feed(logs, sent, drop=(1,))
    doc = api.get(URL, params={"format": "json"}).json()
    assert (doc["gaps"], doc["complete"], doc["bytes"]) == (True, False, CHUNK_BYTES + 1)


def test_a_released_attempt_shows_its_latest_epoch_and_lists_both(
    rm: ReadModel, logs: LogModel, api: TestClient
) -> None:
    _claimed(rm, epoch=2)
    for epoch, text in ((1, b"first try\n"), (2, b"second try\n")):
        sink, sent = _sink(ref=replace(REF, epoch=epoch))
        sink.write(text)
        sink.close()
        _feed(logs, sent)
    answer = api.get(URL)
    assert (answer.content, answer.headers["x-cronlog-log-epochs"]) == (b"second try\n", "1,2")
    assert api.get(URL, params={"epoch": 1}).content == b"first try\n"
    assert api.get(URL, params={"epoch": 7}).status_code == 404


def _succeeded(rm: ReadModel, output_tail: str) -> None:
    _claimed(rm)
    done = ev.TaskSucceeded(
        run_id="r1",
        task="main",
        attempt=1,
        epoch=1,
        worker_id="w1",
        exit_code=0,
        output_tail=output_tail,
        started_at=T0,
        finished_at=T0 + timedelta(seconds=1),
    )
    _events(rm, done, key="done")


def test_an_attempt_completed_without_output_reads_as_a_complete_empty_log(
    rm: ReadModel, api: TestClient
) -> None:
    _succeeded(rm, output_tail="")
    doc = api.get(URL, params={"format": "json"}).json()
    assert (doc["text"], doc["complete"], doc["bytes_total"], doc["epoch"], doc["state"]) == (
        "",
        True,
        0,
        1,
        "succeeded",
    )
    assert (doc["epochs"], doc["worker_id"], doc["gaps"], doc["truncated"]) == (
        [],
        "w1",
        False,
        False,
    )
    answer = api.get(URL)
    assert (answer.content, answer.headers["x-cronlog-log-complete"]) == (b"", "true")
    assert api.get(URL, params={"epoch": 1, "format": "json"}).json()["complete"] is True


def test_a_completed_attempt_with_output_waits_for_its_log_records(
    rm: ReadModel, logs: LogModel, api: TestClient
) -> None:
    _succeeded(rm, output_tail="hello\n")
    assert api.get(URL, params={"format": "json"}).json()["complete"] is False
    sink, sent = _sink()
    sink.write(b"hello\n")
    sink.close(skip_if_empty=True)
    _feed(logs, sent)
    doc = api.get(URL, params={"format": "json"}).json()
    assert (doc["text"], doc["complete"], doc["bytes_total"]) == ("hello\n", True, 6)


def test_unknown_run_or_attempt_is_404_and_a_bad_attempt_422(
    rm: ReadModel, api: TestClient
) -> None:
    assert api.get("/api/v1/runs/nope/tasks/main/attempts/1/log").json() == {
        "detail": "run 'nope' not found"
    }
    _claimed(rm)
    missing = api.get("/api/v1/runs/r1/tasks/main/attempts/2/log")
    assert (missing.status_code, missing.json()["detail"]) == (
        404,
        "attempt 2 of task 'main' of run 'r1' not found",
    )
    assert api.get("/api/v1/runs/r1/tasks/other/attempts/1/log").status_code == 404
    bad = api.get("/api/v1/runs/r1/tasks/main/attempts/0/log")
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["path", "attempt"]
    assert api.get(URL, params={"format": "xml"}).status_code == 422
