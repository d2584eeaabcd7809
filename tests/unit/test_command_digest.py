"""``cronlog.ids.command_digest``: the fingerprint of a command's content that tells a
re-delivery (a no-op) from another command re-using its idem_key (issue 11).

It must be deterministic and stable across schema evolution: fields at their defaults do not
count, values are in a canonical form, and the format is pinned (records hold digests).
"""

from __future__ import annotations

import hashlib
from dataclasses import field, make_dataclass, replace
from datetime import UTC, datetime, timedelta, timezone

import pytest

from cronlog import commands as cmd
from cronlog.ids import command_digest
from cronlog.model import JobSpec, RetryPolicy, Schedule, ScheduleKind, TaskSpec
from tests.builders import JOB, SPEC, T0
from topology.wire.codec import decode_command, encode_command

PAUSE_DIGEST = command_digest(cmd.PauseJob())


def test_the_fingerprint_ignores_fields_at_their_defaults() -> None:
    explicit = replace(
        SPEC,
        retry_policy=RetryPolicy(max_attempts=1, backoff=timedelta(seconds=10)),
        max_active_tasks=16,
        schedule=replace(SPEC.schedule, timezone="UTC", exclusions=()),
    )
    assert explicit == SPEC
    assert command_digest(cmd.RegisterJob(spec=explicit)) == command_digest(
        cmd.RegisterJob(spec=SPEC)
    )
    assert command_digest(cmd.ResumeJob(catchup=False)) == command_digest(cmd.ResumeJob())
    assert command_digest(cmd.CancelRun(run_id="r1", task=None)) == command_digest(
        cmd.CancelRun(run_id="r1")
    )


def test_a_field_added_later_with_its_default_keeps_the_fingerprint() -> None:
    """The same command decoded before and after an upgrade that added a defaulted field
    (to the command and to a nested record)."""
    nested_v1 = make_dataclass("Nested", [("size", int), ("unit", str, field(default="ms"))])
    v1 = make_dataclass("Hypothetical", [("name", str), ("nested", object)], frozen=True)
    nested_v2 = make_dataclass(
        "Nested",
        [("size", int), ("unit", str, field(default="ms")), ("scale", float, field(default=1.0))],
    )
    v2 = make_dataclass(
        "Hypothetical",
        [("name", str), ("nested", object), ("priority", int, field(default=0))],
        frozen=True,
    )
    before = v1(name="a", nested=nested_v1(size=1))
    assert command_digest(v2(name="a", nested=nested_v2(size=1))) == command_digest(before)
    assert command_digest(v2(name="a", nested=nested_v2(size=1, scale=1.0), priority=0)) == (
        command_digest(before)
    )
    assert command_digest(v2(name="a", nested=nested_v2(size=1), priority=1)) != (
        command_digest(before)
    )
    assert command_digest(v2(name="a", nested=nested_v2(size=1, scale=2.0))) != (
        command_digest(before)
    )


def test_the_fingerprint_sees_every_difference_in_content_and_type() -> None:
    digests = {
        command_digest(c)
        for c in (
            cmd.PauseJob(),
            cmd.ResumeJob(),
            cmd.TriggerJob(),
            cmd.DeleteJob(),
            cmd.ResumeJob(catchup=True),
            cmd.CancelRun(run_id="r1"),
            cmd.CancelRun(run_id="r1", task="main"),
            cmd.CancelRun(run_id="r2"),
            cmd.RegisterJob(spec=SPEC),
            cmd.RegisterJob(spec=replace(SPEC, retry_policy=RetryPolicy(max_attempts=2))),
            cmd.RegisterJob(spec=replace(SPEC, schedule=Schedule(ScheduleKind.MANUAL))),
        )
    }
    assert len(digests) == 11
    assert all(len(d) == 16 and int(d, 16) >= 0 for d in digests)


def test_the_fingerprint_is_canonical_in_units() -> None:
    """Instants are epoch ms whatever their zone, durations ms, tuples and lists alike."""
    tick = datetime(2024, 6, 10, 12, 0, tzinfo=UTC)
    berlin = tick.astimezone(timezone(timedelta(hours=2)))
    assert command_digest(cmd.BackfillJob(ticks=(tick,))) == command_digest(
        cmd.BackfillJob(ticks=(berlin,))
    )
    assert command_digest(cmd.BackfillJob(ticks=(tick,))) == command_digest(
        cmd.BackfillJob(ticks=[tick])  # type: ignore[arg-type]
    )


def test_the_fingerprint_format_is_pinned() -> None:
    """Records hold digests: a change of the canonical form would turn re-deliveries into
    conflicts (and conflicts into no-ops) for every marker in every record."""
    tick = datetime(2024, 6, 10, 12, 0, tzinfo=UTC)
    h = hashlib.blake2b(digest_size=8)
    for part in (b"command", b"BackfillJob", b'{"ticks":[1718020800000]}'):
        h.update(part + b"\x00")
    assert command_digest(cmd.BackfillJob(ticks=(tick,))) == h.hexdigest() == "e3c51586de7a07b3"
    assert PAUSE_DIGEST == "ddce674890a32d8f"


def test_the_fingerprint_refuses_what_it_cannot_put_in_canonical_form() -> None:
    with pytest.raises(TypeError, match=r"CancelRun\.task: no canonical form for a bytes"):
        command_digest(cmd.CancelRun(run_id="r1", task=b"main"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="expected a command dataclass"):
        command_digest("PauseJob")


def test_the_fingerprint_survives_the_wire() -> None:
    """The fold fingerprints decoded commands: encoding and decoding must not change it."""
    spec = JobSpec(
        "wire",
        Schedule(ScheduleKind.CRON, expression="*/5 * * * *", timezone="Europe/Berlin"),
        (TaskSpec("a", ("echo", "hi")), TaskSpec("b", ("echo", "hi"))),
        retry_policy=RetryPolicy(max_attempts=3, backoff=timedelta(seconds=5)),
    )
    for command in (
        cmd.RegisterJob(spec=spec),
        cmd.BackfillJob(ticks=(T0, T0 + timedelta(minutes=5))),
        cmd.CancelRun(run_id="r1", task="a"),
        cmd.ResumeJob(catchup=True),
    ):
        env = cmd.Envelope(idem_key="k", job_id=JOB, command=command)
        assert command_digest(decode_command(encode_command(env)).command) == command_digest(
            command
        )
