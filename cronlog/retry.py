"""Retry maths: when the next attempt of a failed task instance is released."""

from __future__ import annotations

from datetime import datetime, timedelta

from cronlog.ids import stable_fraction
from cronlog.model import RetryPolicy


def backoff_delay(policy: RetryPolicy, failed_attempt: int, jitter: float = 0.0) -> timedelta:
    """Return the delay before the attempt after ``failed_attempt``.

    ``backoff * coefficient**(failed_attempt-1)``, capped at ``max_backoff``, then shortened
    by up to 20 % by ``jitter`` (a fraction in [0, 1)) so retries of many runs spread out.

    Args:
        policy: the retry policy.
        failed_attempt: the attempt that just failed, 1-based.
        jitter: a deterministic fraction in [0, 1).
    """
    cap = policy.max_backoff.total_seconds()
    try:
        raw = policy.backoff.total_seconds() * policy.backoff_coefficient ** (failed_attempt - 1)
    except OverflowError:  # a huge exponent is simply "more than the cap"
        raw = cap
    capped = min(raw, cap)
    return timedelta(seconds=capped * (1.0 - 0.2 * jitter))


def next_attempt_at(
    policy: RetryPolicy, run_id: str, task: str, failed_attempt: int, now: datetime
) -> datetime | None:
    """Return when the next attempt is released, or None when attempts are exhausted.

    Args:
        policy: the task's retry policy.
        run_id, task: the task instance (they seed the jitter).
        failed_attempt: the attempt that just failed, 1-based.
        now: the fold's now, aware UTC.

    Determinism: jitter is a hash of (run_id, task, attempt), never a random draw.
    """
    if failed_attempt >= policy.max_attempts:
        return None
    jitter = stable_fraction(run_id, task, str(failed_attempt))
    return now + backoff_delay(policy, failed_attempt, jitter)
