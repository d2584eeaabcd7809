"""Task logs in the API: the read model of ``cronlog.logs`` and ``GET .../attempts/{n}/log``.

``LogModel`` consumes the logs topic into its own rocksdict (beside the run read model's, so
a rebuild of one never wipes the other) with the run read model's consumer machinery:
manual assignment, offsets stored in the same atomic batch as the chunks. Key layout:

    lg:<run_id>\\x00<task>\\x00<attempt %06d>\\x00<epoch %010d>\\x00<seq %08d>   chunk data
    lm:<run_id>\\x00<task>\\x00<attempt %06d>\\x00<epoch %010d>                 JSON metadata

Idempotency: a re-delivered chunk rewrites the same key with the same bytes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from confluent_kafka import Message
from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi import Path as PathParam
from fastapi.responses import JSONResponse, Response

from cronlog.time import iso
from services.api.access.auth import Caller, principal
from services.api.access.scope import visible_run
from services.api.readmodel.reader import ReadModel
from services.api.readmodel.store import Batch
from services.api.shapes.responses import documented
from topology.kafka.config import KafkaSettings
from topology.kafka.topics import Topics
from topology.wire.log_chunks import LogChunk, decode_chunk

log = logging.getLogger("cronlog.api.logs")
router = APIRouter(prefix="/api/v1", dependencies=[Depends(principal)])
LOGS_FORMAT = b"cronlog-api-read-model/v4"
"""Format tag of the task-log store: its layout did not change with the run store's v5, v6."""


def _attempt_prefix(run_id: str, task: str, attempt: int) -> bytes:
    return b"%s\x00%s\x00%06d\x00" % (run_id.encode(), task.encode(), attempt)


def _epoch_part(run_id: str, task: str, attempt: int, epoch: int) -> bytes:
    return _attempt_prefix(run_id, task, attempt) + b"%010d" % epoch


@dataclass(frozen=True, slots=True)
class AttemptLog:
    """The kept output of one attempt under one epoch, as far as it has been read."""

    epoch: int | None
    """The epoch shown; None when no output of the attempt has arrived."""
    epochs: list[int]
    """Every epoch of the attempt with output, ascending (a released attempt has several)."""
    data: bytes
    """The kept output, chunks in seq order (what arrived, gaps skipped)."""
    complete: bool
    """True when the final chunk and every chunk before it have arrived."""
    gaps: bool
    """True when a chunk before the last one read is missing (dropped by the worker)."""
    truncated: bool
    """True when the attempt produced more than ``cap_bytes`` (the rest was not kept)."""
    cap_bytes: int | None
    """The worker's per-attempt cap, bytes; None without output."""
    bytes_total: int
    """Output produced so far (final: in all), bytes, kept or not."""
    worker_id: str | None
    """The worker that ran this epoch."""


class LogModel(ReadModel):
    """The logs topic projected into rocksdict; ``attempt_log`` reads it from any thread.

    Only the consumer lifecycle (``start``/``stop``/``ready``/``lag``) of ReadModel applies;
    its job and run reads do not (this store holds no jobs or runs).
    """

    thread_name = "log-model"
    store_format = LOGS_FORMAT

    def __init__(self, settings: KafkaSettings, path: Path) -> None:
        """Open the store at ``path`` (its own directory); nothing is read before ``start()``."""
        super().__init__(settings, path)
        self.topic = Topics.of(settings).logs

    def _apply(self, messages: list[Message]) -> None:
        self._apply_each(messages, self._put_record)

    def _put_record(self, batch: Batch, msg: Message, partition: int, offset: int) -> None:
        try:
            put_chunk(batch, decode_chunk(msg.value() or b""))
        except Exception as exc:  # a bad record is skipped and said, never wedges the API
            log.error(
                "unusable log chunk at %s/%d@%d: %s",
                msg.topic(),
                partition,
                offset,
                exc,
                extra={"action": "logs.undecodable"},
            )

    def attempt_log(
        self, run_id: str, task: str, attempt: int, epoch: int | None = None
    ) -> AttemptLog:
        """Return the kept output of ``(run_id, task, attempt)``.

        Args:
            run_id, task: the task instance.
            attempt: attempt number, from 1.
            epoch: which execution of the attempt; default: the highest with output.

        Returns:
            The log; ``epoch`` None and empty data when none of its output has arrived.
        """
        prefix = b"lm:" + _attempt_prefix(run_id, task, attempt)
        epochs = [int(key[len(prefix) :]) for key, _ in self.store.scan(prefix)]
        if epoch is None:
            epoch = max(epochs, default=None)
        meta = (
            None
            if epoch is None
            else self.store.get_json(b"lm:" + _epoch_part(run_id, task, attempt, epoch))
        )
        if epoch is None or meta is None:
            return AttemptLog(epoch, epochs, b"", False, False, False, None, 0, None)
        parts, gaps, expected_seq = [], False, 0
        for key, value in self.store.scan(
            b"lg:" + _epoch_part(run_id, task, attempt, epoch) + b"\x00"
        ):
            seq = int(key.rsplit(b"\x00", 1)[1])
            gaps = gaps or seq != expected_seq
            expected_seq = seq + 1
            parts.append(value)
        complete = (
            meta["final_seq"] is not None and not gaps and (expected_seq == meta["final_seq"] + 1)
        )
        return AttemptLog(
            epoch,
            epochs,
            b"".join(parts),
            complete,
            gaps,
            meta["truncated"],
            meta["cap_bytes"],
            meta["bytes_total"],
            meta["worker_id"],
        )


def put_chunk(batch: Batch, chunk: LogChunk) -> None:
    """Store one chunk and fold it into its epoch's metadata (idempotent per seq)."""
    part = _epoch_part(chunk.run_id, chunk.task, chunk.attempt, chunk.epoch)
    batch.put(b"lg:" + part + b"\x00%08d" % chunk.seq, chunk.data)
    meta_key = b"lm:" + part
    meta = batch.get_json(meta_key) or {
        "worker_id": chunk.worker_id,
        "bytes_total": 0,
        "truncated": False,
        "final_seq": None,
        "updated_at": None,
    }
    meta.update(
        cap_bytes=chunk.cap_bytes,
        bytes_total=max(meta["bytes_total"], chunk.bytes_total),
        truncated=meta["truncated"] or chunk.truncated,
        updated_at=iso(chunk.at),
    )
    if chunk.final:
        meta["final_seq"] = chunk.seq
    batch.put_json(meta_key, meta)


def _completed_empty(
    entry: dict[str, Any] | None, epoch: int | None, got: AttemptLog
) -> AttemptLog | None:
    """Return the empty, complete log of an attempt that completed without any output.

    The worker sends no log record for it (``services/worker/logsink.py``,
    ``skip_if_empty``): the completion's empty ``output_tail`` (the attempt entry's
    ``output_empty``) says the log is empty. None for any other attempt, or when a record of
    its epoch did arrive.
    """
    if entry is None or not entry.get("output_empty"):
        return None
    claimed = entry.get("epoch")
    if entry.get("state") not in ("succeeded", "failed") or claimed is None:
        return None
    if claimed in got.epochs or epoch not in (None, claimed):
        return None
    return AttemptLog(claimed, got.epochs, b"", True, False, False, None, 0, entry["worker_id"])


# -- the endpoint --------------------------------------------------------------------------------


@router.get(
    "/runs/{run_id}/tasks/{task}/attempts/{attempt}/log",
    responses={200: {"content": {"text/plain": {}}}, **documented(404)},
)
def attempt_log(
    run_id: str,
    task: str,
    request: Request,
    caller: Caller,
    attempt: Annotated[int, PathParam(ge=1, le=1_000_000)],
    epoch: Annotated[int | None, Query(ge=0)] = None,
    format: Annotated[Literal["text", "json"], Query()] = "text",
) -> Any:
    """The full output (stdout and stderr, interleaved as read) of one attempt, up to the cap.

    ``text`` (default) answers the bytes as ``text/plain`` with headers ``X-Cronlog-Log-Complete``
    (``true`` once the final chunk and all before it arrived; ``false`` while the attempt runs),
    ``-Truncated``, ``-Cap-Bytes``, ``-Bytes-Total`` (output produced, kept or not), ``-Bytes``
    (served), ``-Epoch``, ``-Epochs`` and ``X-Cronlog-Attempt-State``. ``json`` answers the
    same as fields, with the output in ``text`` (UTF-8, invalid bytes replaced). ``epoch``
    picks one execution of a released attempt (default: the latest). 404: unknown run, task
    or attempt. An attempt without output yet answers an empty, incomplete log; one that
    completed without any output (no log record: its completion's ``output_tail`` is empty),
    an empty, complete one.
    """
    rm: ReadModel | None = request.app.state.read_model
    logs: LogModel | None = getattr(request.app.state, "log_model", None)
    if rm is None:
        raise HTTPException(503, "the read model is not running")
    run = visible_run(rm, caller, run_id)  # another tenant's run: 404 whatever else is down
    if logs is None:
        raise HTTPException(503, "the read model is not running")
    entry = next(
        (
            a
            for a in (run or {}).get("attempts", [])
            if a["task"] == task and a["attempt"] == attempt
        ),
        None,
    )
    got = logs.attempt_log(run_id, task, attempt, epoch)
    claimed = (entry or {}).get("epoch")
    if epoch is None and claimed is not None and claimed > (got.epoch or -1):
        # Claimed again (released, or retried under a new lease) and none of its output here
        # yet: answer that epoch's empty log rather than pass an older one off as current.
        got = logs.attempt_log(run_id, task, attempt, claimed)
    got = _completed_empty(entry, epoch, got) or got
    if entry is None and not got.epochs:
        if run is None:
            raise HTTPException(404, f"run {run_id!r} not found")
        raise HTTPException(404, f"attempt {attempt} of task {task!r} of run {run_id!r} not found")
    if epoch is not None and epoch not in got.epochs and claimed != epoch:
        raise HTTPException(404, f"attempt {attempt} of task {task!r} has no epoch {epoch}")
    state = entry["state"] if entry else None
    fields = {
        "run_id": run_id,
        "task": task,
        "attempt": attempt,
        "epoch": got.epoch,
        "epochs": got.epochs,
        "state": state,
        "worker_id": got.worker_id,
        "complete": got.complete,
        "gaps": got.gaps,
        "truncated": got.truncated,
        "cap_bytes": got.cap_bytes,
        "bytes_total": got.bytes_total,
        "bytes": len(got.data),
    }
    if format == "json":
        return JSONResponse({**fields, "text": got.data.decode("utf-8", "replace")})
    headers = {
        "X-Cronlog-Log-Complete": str(got.complete).lower(),
        "X-Cronlog-Log-Truncated": str(got.truncated).lower(),
        "X-Cronlog-Log-Cap-Bytes": "" if got.cap_bytes is None else str(got.cap_bytes),
        "X-Cronlog-Log-Bytes-Total": str(got.bytes_total),
        "X-Cronlog-Log-Bytes": str(len(got.data)),
        "X-Cronlog-Log-Epoch": "" if got.epoch is None else str(got.epoch),
        "X-Cronlog-Log-Epochs": ",".join(map(str, got.epochs)),
        "X-Cronlog-Attempt-State": state or "",
    }
    return Response(got.data, media_type="text/plain; charset=utf-8", headers=headers)
