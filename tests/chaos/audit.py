"""The chaos run's verdict, computed from ``cronlog.run-events`` (and dead-letters) alone.

Pure: records in, counts out. Every count in ``Audit.failures()`` must be zero; the rest are
figures printed beside them. What each count means is in the ``Audit`` docstring.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from cronlog import events as ev
from cronlog.firing import ON_TIME_GRACE
from cronlog.vocabulary import RunTrigger, SkipReason
from topology.wire.codec import Codec

LEGITIMATE_SKIPS = frozenset(
    {
        SkipReason.MAX_ACTIVE_RUNS,
        SkipReason.QUEUE_FULL,
        SkipReason.OVERLAP,
        SkipReason.EXCLUDED,
        SkipReason.END_AT,
        SkipReason.MAX_RUNS,
    }
)
"""Skip reasons that account for a tick whenever they come. ``catchup_*`` account for it only
when the skip was decided more than the jobs' misfire grace after the tick (``MISFIRE_GRACE``):
only then was it missed (its fold behind for that long: on an overloaded box a stalled
scheduler's partitions went unfolded for 60-90 s); earlier, the skip is a loss."""
CATCHUP_SKIPS = frozenset({SkipReason.CATCHUP_POLICY, SkipReason.CATCHUP_WINDOW})
MISFIRE_GRACE = ON_TIME_GRACE
"""The chaos jobs' misfire grace (the default)."""
LATE = timedelta(seconds=5)
"""A tick first decided more than this after its instant is counted late (a figure)."""
SCHEDULED_TRIGGERS = frozenset({RunTrigger.SCHEDULE, RunTrigger.CATCHUP})


@dataclass(frozen=True, slots=True)
class Rec:
    """One record as read: where, its timestamp (epoch ms) and raw value."""

    partition: int
    offset: int
    timestamp_ms: int
    value: bytes


@dataclass(frozen=True, slots=True)
class JobPlan:
    """A job of the run whose ticks are checked: every ``period_s`` seconds, aligned to
    multiples of it (``every`` with the epoch anchor, or 6-field cron ``*/N`` with N | 60)."""

    job_id: str
    period_s: int


@dataclass(frozen=True, slots=True)
class Injected:
    """A bad record the run appended to the commands topic.

    Attributes:
        kind: what was wrong with it (``malformed``, ``wrong_partition``, …).
        partition, offset: where the broker stored it (delivery report).
        idem_key: its idem_key if it decodes (stale completions, duplicates), else None.
        expect: ``dead_letter`` (must appear on dead-letters at that partition/offset),
            ``rejected`` (a CommandRejected caused by it, no task outcome) or ``once`` (a
            duplicate: its effects exactly once).
    """

    kind: str
    partition: int
    offset: int
    idem_key: str | None
    expect: str


@dataclass
class Audit:
    """Counts over run-events. ``failures()`` must all be zero.

    Attributes:
        lost_ticks: due ticks of the checked jobs in the window with neither a RunScheduled
            (or RunQueued) nor a TickSkipped of a legitimate reason (``LEGITIMATE_SKIPS``, or a
            catch-up skip decided past ``MISFIRE_GRACE``).
        double_ticks: (job_id, scheduled_for) pairs with more than one scheduled run.
        double_success: attempts (run_id, task, attempt) with more than one TaskSucceeded
            (distinct event_ids), plus task instances that succeeded on two attempts.
        stuck_attempts: claims with no outcome whose lease had lapsed by the fold's clock
            (``fold_clocks``: the last Tick folded on the claim's partition; without it,
            ``end``; ``end`` for a partition it lacks): a Tick passed the expiry and did not
            expire it.
        leased_attempts: claims with no outcome whose lease was still valid at ``end``.
        event_id_conflicts: event_ids seen with different bytes.
        not_dead_lettered: injected records expected on dead-letters but absent.
        stale_accepted: injected stale/foreign completions that led to a task outcome, or
            were not rejected at all.
        duplicates_applied_twice: duplicated commands whose effects appear more than once.
        undecodable_events: run-event records the codec could not read.
    """

    lost_ticks: int = 0
    double_ticks: int = 0
    double_success: int = 0
    stuck_attempts: int = 0
    leased_attempts: int = 0
    event_id_conflicts: int = 0
    not_dead_lettered: int = 0
    stale_accepted: int = 0
    duplicates_applied_twice: int = 0
    undecodable_events: int = 0
    ticks_expected: int = 0
    ticks_run: int = 0
    late_ticks: int = 0
    """Ticks accounted for whose first decision came more than ``LATE`` after the tick."""
    max_tick_lag_s: float = 0.0
    """The latest first decision of a tick, seconds after it."""
    missed_ticks: int = 0
    """Ticks skipped by the catch-up policy after their fold was behind past the grace."""
    lapsed_at_teardown: int = 0
    """Claims with no outcome whose lease lapsed after the last Tick their fold folded: no
    scheduler was left to expire them (a teardown artefact, not a stuck lease)."""
    skipped: dict[str, int] = field(default_factory=dict)
    events: int = 0
    redelivered: int = 0
    runs: int = 0
    queued: int = 0
    """Ticks whose run was queued (RunQueued) rather than started at once."""
    lease_expiries: int = 0
    """Leases that lapsed (the attempt given back, not failed)."""
    succeeded_attempts: int = 0
    failed_attempts: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    injected: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)

    def failures(self) -> dict[str, int]:
        """The counts that must be zero."""
        return {
            k: getattr(self, k)
            for k in (
                "lost_ticks",
                "double_ticks",
                "double_success",
                "stuck_attempts",
                "leased_attempts",
                "event_id_conflicts",
                "not_dead_lettered",
                "stale_accepted",
                "duplicates_applied_twice",
                "undecodable_events",
            )
        }

    def note(self, what: str, example: str) -> None:
        """Keep up to 5 examples of a failure for the report."""
        bucket = self.examples.setdefault(what, [])
        if len(bucket) < 5:
            bucket.append(example)


def audit_run(
    events: Iterable[Rec],
    dead_letters: Iterable[tuple[int, int]],
    jobs: list[JobPlan],
    window: tuple[datetime, datetime],
    end: datetime,
    injected: list[Injected],
    codec: Codec | None = None,
    fold_clocks: dict[int, datetime] | None = None,
) -> Audit:
    """Check a run's invariants from its run-events.

    Args:
        events: every run-events record of the run.
        dead_letters: (partition, offset) on the commands topic of every dead letter.
        jobs: the jobs whose every tick in ``window`` is owed a run or a legitimate skip.
        window: (start, end], aware UTC; leave margins around the run's own start and end.
        end: when the run stopped (after quiescing): leases are judged at this instant.
        injected: the bad records the run appended.
        codec: the Avro codec (default: a new one).
        fold_clocks: partition → the time of the last Tick its fold folded (the run-events
            partition is the command partition): a lease that lapsed after it is a teardown
            artefact, one that lapsed before it is stuck. None: every lease is judged at
            ``end``.

    Returns:
        The counts and figures.
    """
    codec = codec or Codec()
    a = Audit()
    raw_by_eid: dict[str, set[bytes]] = collections.defaultdict(set)
    decoded: dict[str, ev.RunEvent] = {}
    partition_of: dict[str, int] = {}
    for rec in events:
        a.events += 1
        try:
            run_event = codec.decode_event(rec.value)
        except Exception as exc:  # any failure to read is a finding, not a crash of the audit
            a.undecodable_events += 1
            a.note("undecodable_events", f"p{rec.partition}@{rec.offset}: {exc}")
            continue
        raw_by_eid[run_event.event_id].add(rec.value)
        if run_event.event_id in decoded:
            a.redelivered += 1
        else:
            decoded[run_event.event_id] = run_event
            partition_of[run_event.event_id] = rec.partition
    for eid, raws in raw_by_eid.items():
        if len(raws) > 1:
            a.event_id_conflicts += 1
            a.note("event_id_conflicts", eid)
    distinct = list(decoded.values())
    _ticks(a, distinct, jobs, window)
    _attempts(a, distinct, end, partition_of, fold_clocks)
    _injected(a, distinct, set(dead_letters), injected, raw_by_eid)
    return a


def _ticks(
    a: Audit, events: list[ev.RunEvent], jobs: list[JobPlan], window: tuple[datetime, datetime]
) -> None:
    runs: dict[tuple[str, int], set[str]] = collections.defaultdict(set)
    skips: dict[tuple[str, int], list[tuple[SkipReason, int]]] = collections.defaultdict(list)
    first: dict[tuple[str, int], int] = {}  # tick -> when its first decision came, epoch ms
    skipped: collections.Counter[str] = collections.Counter()
    for e in events:
        body = e.event
        if isinstance(body, ev.RunScheduled | ev.RunQueued | ev.TickSkipped):
            key = (e.job_id, _ms(body.scheduled_for))
            first[key] = min(first.get(key, _ms(e.at)), _ms(e.at))
        if isinstance(body, ev.RunScheduled):
            a.runs += 1
            if body.trigger in SCHEDULED_TRIGGERS:
                runs[(e.job_id, _ms(body.scheduled_for))].add(body.run_id)
        elif isinstance(body, ev.RunQueued) and body.trigger in SCHEDULED_TRIGGERS:
            # delayed, not dropped: the run starts (RunScheduled, same run_id) when a slot frees
            runs[(e.job_id, _ms(body.scheduled_for))].add(body.run_id)
            a.queued += 1
        elif isinstance(body, ev.TickSkipped):
            skips[(e.job_id, _ms(body.scheduled_for))].append((body.reason, _ms(e.at)))
            skipped[body.reason.value] += 1
    a.skipped = dict(skipped)
    for key, run_ids in runs.items():
        if len(run_ids) > 1:
            a.double_ticks += 1
            a.note("double_ticks", f"{key[0]}@{key[1]}: {sorted(run_ids)}")
    lo, hi = _ms(window[0]), _ms(window[1])
    grace_ms = _ms_of(MISFIRE_GRACE)
    for job in jobs:
        step = job.period_s * 1000
        t = (lo // step + 1) * step
        while t <= hi:
            a.ticks_expected += 1
            key = (job.job_id, t)
            reasons = skips.get(key, [])
            if key in runs:
                a.ticks_run += 1
            elif any(r in LEGITIMATE_SKIPS for r, _ in reasons):
                pass
            elif any(r in CATCHUP_SKIPS and at - t > grace_ms for r, at in reasons):
                a.missed_ticks += 1
            else:
                a.lost_ticks += 1
                a.note("lost_ticks", f"{job.job_id}@{t} skips={[r.value for r, _ in reasons]}")
            if key in first:  # decided (run, queued or skipped): how late
                lag = first[key] - t
                a.max_tick_lag_s = max(a.max_tick_lag_s, lag / 1000)
                a.late_ticks += lag > _ms_of(LATE)
            t += step


def _attempts(
    a: Audit,
    events: list[ev.RunEvent],
    end: datetime,
    partition_of: dict[str, int],
    fold_clocks: dict[int, datetime] | None,
) -> None:
    successes: dict[tuple[str, str, int], int] = collections.Counter()
    instance_successes: dict[tuple[str, str], set[int]] = collections.defaultdict(set)
    claims: dict[tuple[str, str, int], tuple[int, datetime]] = {}
    claim_partition: dict[tuple[str, str, int], int] = {}
    ended: set[tuple[str, str, int]] = set()
    released: set[tuple[str, str, int, int]] = set()
    runs_ended: set[str] = set()
    for e in events:
        body = e.event
        match body:
            case ev.TaskClaimed():
                claims[(body.run_id, body.task, body.attempt)] = (body.epoch, body.lease_expires_at)
                claim_partition[(body.run_id, body.task, body.attempt)] = partition_of[e.event_id]
            case ev.LeaseRenewed():
                key = (body.run_id, body.task, body.attempt)
                if key in claims and claims[key][0] == body.epoch:
                    claims[key] = (body.epoch, body.lease_expires_at)
            case ev.TaskSucceeded():
                key = (body.run_id, body.task, body.attempt)
                successes[key] += 1
                instance_successes[(body.run_id, body.task)].add(body.attempt)
                ended.add(key)
                a.succeeded_attempts += 1
            case ev.TaskFailed():
                ended.add((body.run_id, body.task, body.attempt))
                a.failed_attempts += 1
            case ev.TaskCancelled() | ev.TaskDeadLettered():
                ended.add((body.run_id, body.task, body.attempt))
            case ev.LeaseExpired():  # given back: the next attempt is ready again at once
                ended.add((body.run_id, body.task, body.attempt))
                a.lease_expiries += 1
            case ev.TaskReleased():
                released.add((body.run_id, body.task, body.attempt, body.epoch))
            case ev.RunSucceeded() | ev.RunFailed() | ev.RunCancelled():
                runs_ended.add(body.run_id)
            case ev.CommandRejected():
                key_r = f"{body.command}/{body.reason.value}"
                a.rejected[key_r] = a.rejected.get(key_r, 0) + 1
            case _:
                pass
    for key, n in successes.items():
        if n > 1:
            a.double_success += 1
            a.note("double_success", f"{key} x{n}")
    for inst, attempts in instance_successes.items():
        if len(attempts) > 1:
            a.double_success += 1
            a.note("double_success", f"{inst} succeeded on attempts {sorted(attempts)}")
    for key, (epoch, expires) in claims.items():
        if key in ended or key[0] in runs_ended or (*key, epoch) in released:
            continue
        clock = end if fold_clocks is None else fold_clocks.get(claim_partition[key], end)
        if expires > end:
            a.leased_attempts += 1
            a.note("leased_attempts", f"{key} epoch {epoch} lease to {expires.isoformat()}")
        elif clock is not None and expires <= clock:  # a Tick at/after it expires it
            a.stuck_attempts += 1
            a.note(
                "stuck_attempts",
                f"{key} epoch {epoch} lease lapsed {expires.isoformat()}, "
                f"fold clock {clock.isoformat()}",
            )
        else:
            a.lapsed_at_teardown += 1


def _injected(
    a: Audit,
    events: list[ev.RunEvent],
    dead: set[tuple[int, int]],
    injected: list[Injected],
    raw_by_eid: dict[str, set[bytes]],
) -> None:
    by_idem: dict[str, list[ev.RunEvent]] = collections.defaultdict(list)
    for e in events:
        by_idem[e.idem_key].append(e)
    counts: collections.Counter[str] = collections.Counter()
    checked_dups: set[str] = set()
    for bad in injected:
        counts[bad.kind] += 1
        if bad.expect == "dead_letter":
            if (bad.partition, bad.offset) not in dead:
                a.not_dead_lettered += 1
                a.note("not_dead_lettered", f"{bad.kind} p{bad.partition}@{bad.offset}")
        elif bad.expect == "rejected":
            caused = by_idem.get(bad.idem_key or "", [])
            outcome = [
                e
                for e in caused
                if isinstance(e.event, ev.TaskSucceeded | ev.TaskFailed | ev.LeaseRenewed)
            ]
            if outcome or not any(isinstance(e.event, ev.CommandRejected) for e in caused):
                a.stale_accepted += 1
                a.note(
                    "stale_accepted", f"{bad.idem_key}: {[type(e.event).__name__ for e in caused]}"
                )
        elif bad.expect == "once" and bad.idem_key and bad.idem_key not in checked_dups:
            checked_dups.add(bad.idem_key)
            caused = by_idem.get(bad.idem_key, [])
            scheduled = {e.event.run_id for e in caused if isinstance(e.event, ev.RunScheduled)}
            conflicting = [e for e in caused if len(raw_by_eid[e.event_id]) > 1]
            if len(scheduled) > 1 or conflicting:
                a.duplicates_applied_twice += 1
                a.note("duplicates_applied_twice", f"{bad.idem_key}: runs {sorted(scheduled)}")
    a.injected = dict(counts)


def _ms(instant: datetime) -> int:
    return round(instant.timestamp() * 1000)


def _ms_of(span: timedelta) -> int:
    return round(span.total_seconds() * 1000)
