"""The error hierarchy: CronlogError and what derives from it (refusals are data: RejectReason)."""

from __future__ import annotations


class CronlogError(Exception):
    """Root of every error cronlog raises on purpose."""


class InvalidDefinition(CronlogError):
    """A job definition (schedule, command, policy) is invalid.

    Attributes:
        field: dotted path of the offending field, e.g. ``"schedule.expression"``.
        reason: what is wrong, for a human.
    """

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class InvariantViolation(CronlogError):
    """A bug: the core reached a state its rules forbid. Never raised for bad input."""
