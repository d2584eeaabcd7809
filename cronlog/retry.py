"""Retry maths: when the next attempt of a failed task instance is released."""

from __future__ import annotations

from datetime import datetime, timedelta

from cronlog.ids import stable_fraction
from cronlog.model import BackoffKind, RetryPolicy


def backoff_delay(policy: RetryPolicy, failed_attempt: int, jitter: float = 0.0) -> timedelta:
    """Return the delay before the attempt after ``failed_attempt``.

    By ``policy.kind``, with ``base = policy.backoff`` and n = ``failed_attempt``:
    constant ``base``; linear ``n * base``; exponential ``base * coefficient**(n-1)``
    (Temporal's RetryPolicy rule). Capped at ``max_backoff``, then shortened by
    ``policy.jitter * jitter`` of itself, so retries of many runs spread out.

    Args:
        policy: the retry policy.
        failed_attempt: the attempt that just failed, 1-based.
        jitter: a deterministic fraction in [0, 1) (see ``next_attempt_at``).
    """
    cap = policy.max_backoff.total_seconds()
    base = policy.backoff.total_seconds()
    match policy.kind:
        case BackoffKind.CONSTANT:
            raw = base
        case BackoffKind.LINEAR:
            raw = base * failed_attempt
        case BackoffKind.EXPONENTIAL:
            try:
                raw = base * policy.backoff_coefficient ** (failed_attempt - 1)
            except OverflowError:  # a huge exponent is simply "more than the cap"
                raw = cap
    capped = min(raw, cap)
    return timedelta(seconds=capped * (1.0 - policy.jitter * jitter))


def next_attempt_at(
    policy: RetryPolicy, run_id: str, task: str, failed_attempt: int, now: datetime
) -> datetime | None:
    """Return when the next attempt is released, or None when attempts are exhausted.

    Args:
        policy: the task's retry policy.
        run_id: the task instance's run (it seeds the jitter).
        task: the task instance's task (it seeds the jitter).
        failed_attempt: the attempt that just failed, 1-based.
        now: the fold's now, aware UTC.

    Determinism: jitter is a hash of (run_id, task, attempt), never a random draw.
    """
    if failed_attempt >= policy.max_attempts:
        return None
    jitter = stable_fraction(run_id, task, str(failed_attempt))
    return now + backoff_delay(policy, failed_attempt, jitter)
