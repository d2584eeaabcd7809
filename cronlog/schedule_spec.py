"""The schedule part of a job definition: when it fires, and what overlap and missed ticks do.

Re-exported by ``cronlog.model``; the schedule maths are ``cronlog.schedule``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum


class ScheduleKind(StrEnum):
    """How a job's ticks are produced."""

    CRON = "cron"
    """A cron expression (5 fields, or 6 with seconds first) read in an IANA time zone."""
    ONCE = "once"
    """One tick at ``run_at`` (UTC); a ``run_at`` already past at registration fires at once."""
    MANUAL = "manual"
    """No ticks: runs only on TriggerJob."""
    EVERY = "every"
    """A fixed interval: ticks at ``anchor_at + k * interval`` for every integer k (default
    anchor: the Unix epoch, so ticks fall on interval boundaries). Temporal's IntervalSpec."""
    AFTER = "after"
    """No ticks: a run for each run of the upstream job ``after_job_id`` that ended as
    ``after_on`` asks (an UpstreamRunEnded command; docs/schedules.md, "After")."""


class AfterOn(StrEnum):
    """Which ends of an upstream run start a run of an ``after`` job."""

    SUCCESS = "success"
    """The upstream run succeeded (RunSucceeded). The default."""
    DONE = "done"
    """The upstream run ended in any way: succeeded, failed or cancelled."""


class OverlapPolicy(StrEnum):
    """What a tick does while an earlier run of the job is still active.

    After Temporal's ``ScheduleOverlapPolicy`` (docs/schedules.md, "Overlap").
    """

    ALLOW = "allow"
    """Start the run anyway, up to ``max_active_runs`` (cron's behaviour). The default."""
    SKIP = "skip"
    """Do not start it: TickSkipped ``overlap``."""
    BUFFER_ONE = "buffer_one"
    """Keep one tick (RunBuffered) and start it when the active runs have ended; a further tick
    while one is buffered is skipped (TickSkipped ``overlap``)."""
    CANCEL_PREVIOUS = "cancel_previous"
    """Cancel the active runs (RunCancelled; their leases are revoked), then start the new one."""


class CatchupPolicy(StrEnum):
    """What happens to ticks that came due while nothing was folding (see docs/schedules.md)."""

    ALL = "all"
    """Fire every missed tick inside ``catchup_window``."""
    LATEST = "latest"
    """Fire one run, for the latest missed tick (cron, Kubernetes and Airflow users' default)."""
    NONE = "none"
    """Fire none of the missed ticks."""


class DstGapPolicy(StrEnum):
    """What a fixed-time cron tick whose wall time falls in a spring-forward gap does.

    Fixed-time: neither the minute nor the hour field (nor seconds, for 6 fields) starts with
    ``*``. Other jobs never fire inside a gap. See docs/schedules.md.
    """

    SHIFT = "shift"
    """Fire once, at the first real instant after the gap (the transition). The default."""
    SKIP = "skip"
    """Do not fire: that wall time does not exist on that day."""


class DstOverlapPolicy(StrEnum):
    """What a fixed-time cron tick whose wall time occurs twice (fall-back overlap) does.

    Other (wildcard) jobs fire at every real instant whose wall time matches, both passes
    included. See docs/schedules.md.
    """

    FIRST = "first"
    """Fire once, on the first pass (the earlier UTC instant). The default."""
    LAST = "last"
    """Fire once, on the second pass (the later UTC instant)."""
    BOTH = "both"
    """Fire on both passes: two ticks, one wall time."""


@dataclass(frozen=True, slots=True)
class Exclusion:
    """A window in which a schedule's ticks are not fired (TickSkipped ``excluded``).

    Read in the schedule's ``timezone``. Every constraint that is set must hold for a tick to
    be excluded; at least one must be set.

    Attributes:
        start_date: first excluded local date, ``YYYY-MM-DD``, inclusive. None: no date bound.
        end_date: last excluded local date, ``YYYY-MM-DD``, inclusive. None: ``start_date``
            alone (a single day), or no date bound when ``start_date`` is None too.
        weekdays: local weekdays, ``mon`` .. ``sun``; empty means any day.
        start_time: local time of day the window opens, ``HH:MM:SS``, inclusive. None: 00:00.
        end_time: local time of day it closes, ``HH:MM:SS``, exclusive. None: end of day.
            An ``end_time`` not after ``start_time`` wraps past midnight (``22:00``-``06:00``).
    """

    start_date: str | None = None
    end_date: str | None = None
    weekdays: tuple[str, ...] = ()
    start_time: str | None = None
    end_time: str | None = None


@dataclass(frozen=True, slots=True)
class Schedule:
    """When a job fires.

    Attributes:
        kind: cron, once or manual.
        expression: the cron expression (``kind=cron`` only), 5 fields or 6 with seconds first.
        timezone: IANA zone the cron expression is read in. Default ``"UTC"``.
        run_at: the instant of a ``once`` job, aware UTC.
        catchup: policy for ticks missed while nothing was folding. Default ``latest``.
        catchup_window: how far back missed ticks may be fired. Default 1 day.
        dst_gap: fixed-time cron ticks inside a spring-forward gap: ``shift`` (default) fires
            once at the first real instant after the gap, ``skip`` drops them.
        dst_overlap: fixed-time cron ticks whose wall time occurs twice: ``first`` (default),
            ``last`` or ``both`` passes.
        interval: the period of an ``every`` schedule (at least 1 s). None for other kinds.
        anchor_at: the phase of an ``every`` schedule: ticks at ``anchor_at + k * interval``.
            None: the Unix epoch (ticks aligned on interval boundaries).
        start_at: no tick before this instant fires (the first tick is the first one at or
            after it). None: unbounded.
        end_at: no tick after this instant fires; the first tick past it is skipped
            (TickSkipped ``end_at``) and the schedule ends. None: unbounded.
        max_runs: most runs the schedule fires (manual triggers do not count); the tick after
            the last is skipped (TickSkipped ``max_runs``) and the schedule ends. None: no limit.
        exclusions: windows whose ticks are skipped (TickSkipped ``excluded``).
        misfire_grace: a tick folded at most this late is on time and always fires; later ones
            follow ``catchup``. Default 60 s (APScheduler's ``misfire_grace_time``).
        after_job_id: the upstream job of an ``after`` schedule; None for other kinds.
        after_on: which upstream run ends start a run (``after`` only). Default ``success``.
    """

    kind: ScheduleKind
    expression: str | None = None
    timezone: str = "UTC"
    run_at: datetime | None = None
    catchup: CatchupPolicy = CatchupPolicy.LATEST
    catchup_window: timedelta = timedelta(days=1)
    dst_gap: DstGapPolicy = DstGapPolicy.SHIFT
    dst_overlap: DstOverlapPolicy = DstOverlapPolicy.FIRST
    interval: timedelta | None = None
    anchor_at: datetime | None = None
    start_at: datetime | None = None
    end_at: datetime | None = None
    max_runs: int | None = None
    exclusions: tuple[Exclusion, ...] = ()
    misfire_grace: timedelta = timedelta(seconds=60)
    after_job_id: str | None = None
    after_on: AfterOn = AfterOn.SUCCESS
