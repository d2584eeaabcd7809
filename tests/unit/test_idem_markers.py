"""Dedupe markers are fixed-size digests: the longest idem_keys cannot wedge a job (issue 11).

Before, the job record kept each applied idem_key itself: 128 user markers and 64 worker
markers of 512-character keys (6 bytes a character in the stored JSON) took ~590 KB, past the
fold's 512 KiB ``MAX_RECORD_BYTES``, so every later command to the job was refused
``record_too_large`` and, the record never being rewritten, the markers never rotated out.
These tests fold through the real adapter (``BatchFolder``), which makes that refusal.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.ids import command_digest, idem_marker
from cronlog.job import MAX_APPLIED_MARKERS, MAX_RENEWAL_MARKERS, JobState
from cronlog.limits import MAX_IDEM_KEY_CHARS
from cronlog.model import JobSpec, Schedule, ScheduleKind, main_task
from cronlog.vocabulary import JobStatus, RejectReason
from tests.unit.fold_world import TOPICS, N, folder_over
from topology.fold.folder import MAX_RECORD_BYTES, Record
from topology.kafka.partitioning import partition_for
from topology.wire.codec import decode_event, encode_command
from topology.wire.state_codec import WORST_CHAR, dump_state, load_state

JOB = "wedge"
T0_MS = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp() * 1000)
MANUAL = JobSpec(name="m", schedule=Schedule(ScheduleKind.MANUAL), task_specs=main_task(("true",)))


def worst_key(n: int) -> str:
    """The ``n``-th distinct idem_key of the wire's longest, costliest form."""
    return f"{n:04d}".ljust(MAX_IDEM_KEY_CHARS, WORST_CHAR)


class Job:
    """One job folded record by record through the adapter, its table in a dict."""

    def __init__(self) -> None:
        self.store: dict[str, bytes] = {}
        self.folder = folder_over(self.store)
        self.offset = 0

    def send(self, key: str, command: cmd.Command) -> list[ev.Event]:
        value = encode_command(cmd.Envelope(idem_key=key, job_id=JOB, command=command))
        rec = Record(partition_for(JOB, N), self.offset, T0_MS + self.offset, JOB.encode(), value)
        self.offset += 1
        out = self.folder.fold([rec])
        assert not [m for m in out.sends if m.topic == TOPICS.dead_letters]
        self.store.update({job_id: w.value for job_id, w in out.writes.items()})
        return [decode_event(m.value).event for m in out.sends if m.topic == TOPICS.run_events]

    @property
    def state(self) -> JobState:
        return load_state(self.store[JOB])


def filled(*, short: bool = False) -> Job:
    """A job whose user and worker marker windows are full, of worst keys (or short ones)."""
    make = (lambda n: f"k{n}") if short else worst_key
    job = Job()
    refused: list[ev.Event] = []
    refused += job.send(make(0), cmd.RegisterJob(spec=MANUAL))
    for n in range(1, MAX_APPLIED_MARKERS + 1):  # ends with a resume: the job is active
        refused += job.send(make(n), cmd.PauseJob() if n % 2 else cmd.ResumeJob())
    for n in range(MAX_RENEWAL_MARKERS):  # refused (no such run), but marked applied
        renew = cmd.RenewLease(run_id="r0", task="main", attempt=1, epoch=1, worker_id="w")
        refused += job.send(make(1000 + n), renew)
    too_large = [e for e in refused if getattr(e, "reason", None) is RejectReason.RECORD_TOO_LARGE]
    assert too_large == []
    return job


def test_worst_char_is_the_costliest_character_of_a_stored_record() -> None:
    def cost(c: str) -> int:  # the codec's own bytes for one more character of a text field
        clock = datetime(2026, 1, 1, tzinfo=UTC)
        one, two = (JobState(JOB + c * n, MANUAL, JobStatus.ACTIVE, clock) for n in (1, 2))
        return len(dump_state(two)) - len(dump_state(one))

    samples = [chr(i) for i in range(0x80)] + ["é", "\u2028", "\uffff", "\U0001f600", "\U0010ffff"]
    assert max(map(cost, samples)) == cost(WORST_CHAR) == 6


def test_a_job_whose_markers_were_filled_by_the_worst_keys_still_accepts_pause_and_trigger() -> (
    None
):
    job = filled()
    state = job.state
    assert len(state.applied) == MAX_APPLIED_MARKERS and len(state.renewals) == MAX_RENEWAL_MARKERS
    assert state.status is JobStatus.ACTIVE
    events = job.send(worst_key(2000), cmd.TriggerJob())
    assert [type(e) for e in events] == [ev.RunScheduled, ev.TaskReady]
    events = job.send(worst_key(2001), cmd.PauseJob())
    assert events == [ev.JobPaused()]
    assert job.state.status is JobStatus.PAUSED and len(job.state.runs) == 1
    # the dedupe window still works on those keys: a re-delivery is a no-op
    assert job.send(worst_key(2001), cmd.PauseJob()) == []
    renew = cmd.RenewLease(run_id="r0", task="main", attempt=1, epoch=1, worker_id="w")
    assert job.send(worst_key(1000 + MAX_RENEWAL_MARKERS - 1), renew) == []


def test_the_record_does_not_grow_with_the_length_of_the_keys() -> None:
    worst, short = filled().store[JOB], filled(short=True).store[JOB]
    assert len(worst) == len(short) < 16 * 1024


def test_a_v1_record_of_raw_keys_loads_as_markers_of_those_keys() -> None:
    """A record the previous version wrote, wedged past the limit by long keys, heals on load."""
    job = filled(short=True)
    stored = json.loads(job.store[JOB][len(b"v3:") :])
    stored["applied"] = [worst_key(n) for n in range(MAX_APPLIED_MARKERS)]
    stored["renewals"] = [worst_key(1000 + n) for n in range(MAX_RENEWAL_MARKERS)]
    v1 = b"v1:" + json.dumps(stored, ensure_ascii=False).encode()
    assert len(v1) > MAX_RECORD_BYTES
    old = load_state(v1)
    assert old.applied == tuple(idem_marker(worst_key(n)) for n in range(MAX_APPLIED_MARKERS))
    assert old.has_applied(worst_key(1000)) and not old.has_applied(worst_key(999))
    # the digests stay aligned with the end of the window: the newest key keeps its digest
    assert old.applied_digest(worst_key(MAX_APPLIED_MARKERS - 1)) == command_digest(cmd.ResumeJob())
    assert len(dump_state(old)) < 16 * 1024
    job.store[JOB] = v1
    assert job.send(worst_key(MAX_APPLIED_MARKERS - 1), cmd.ResumeJob()) == []  # a re-delivery
    assert job.send(worst_key(3000), cmd.PauseJob()) == [ev.JobPaused()]
    assert job.store[JOB].startswith(b"v3:")
