"""Keys of the read model's job and run documents and of each job's run index (``store``)."""

from __future__ import annotations

from datetime import datetime

from cronlog.time import to_ms

MAX_MS = 10**13 - 1
"""Epoch ms are inverted as ``MAX_MS - ms`` (13 digits) so newer instants sort first."""


def job_key(job_id: str) -> bytes:
    """Return the key of a job document."""
    return b"job:" + job_id.encode()


def run_key(run_id: str) -> bytes:
    """Return the key of a run document."""
    return b"run:" + run_id.encode()


def job_runs_prefix(job_id: str) -> bytes:
    """Return the key prefix of a job's run index (iterates newest scheduled_for first)."""
    return b"jr:" + job_id.encode() + b"\x00"


def inverted_ms(ms: int) -> bytes:
    """Return ``MAX_MS - ms`` as 13 digits: ascending key order is descending time.

    ``ms`` is clamped to ``0..MAX_MS`` (a listing bound may lie outside what keys hold)."""
    return b"%013d" % (MAX_MS - min(max(ms, 0), MAX_MS))


def tick_runs_prefix(job_id: str, scheduled_for: datetime) -> bytes:
    """Return the key prefix of a job's runs for one tick (the run index, by scheduled_for)."""
    return job_runs_prefix(job_id) + inverted_ms(to_ms(scheduled_for)) + b"\x00"
