"""The tenant ledger: where every tenant's task slots are counted, capped and shared.

A grant of a task instance is decided in the partition of its job (docs/dispatch.md), and a
tenant's jobs are spread over every partition, so no partition alone can cap a tenant or
share the fleet between tenants. The ledger is one record, keyed ``LEDGER_KEY`` on the
commands topic: exactly one partition, and so one scheduler process at a time, folds it, in
log order (the partition's owner, as for any job; a ``kill -9`` hands it to the next owner,
which folds the same commands to the same grants).

- A job of a tenant other than ``default`` asks for a slot for each ready task instance
  (``AskSlots``, appended by the fold with the job's ``TenantSlotsAsked``, in the same
  transaction) and gives it back when the lease ends (``ReturnSlots``) (``cronlog.slots``).
- The ledger gives slots (``GrantSlots`` to the job) while the tenant is under its cap
  (``max_running_tasks``) and the fleet under its size (``SetTenantLimits`` for ``*``),
  choosing between tenants that wait by **deficit round-robin** weighted by ``weight``
  (Shreedhar & Varghese, "Efficient fair queuing using deficit round robin", 1995: each turn
  a tenant's deficit grows by its weight and each slot costs 1), and within a tenant the
  smallest rank first (``cronlog.priority``). A tenant alone takes every free slot
  (work-conserving); a tenant without waiting work keeps no credit.

So at most ``max_running_tasks`` task instances of a tenant hold a slot at once, whichever
partitions and processes grant them, and while the fleet is full the slots freed are handed
out in proportion to the weights of the tenants that wait. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace
from datetime import datetime

from cronlog import commands as cmd
from cronlog.errors import CronlogError
from cronlog.ids import idem_marker
from cronlog.tenants import DEFAULT_TENANT, is_tenant_name
from cronlog.time import EPOCH

LEDGER_KEY = "~tenant-ledger"
"""The ledger's job_id and record key. ``~`` cannot start a job_id the API accepts, and the
fold refuses any other command for this key."""
FLEET = "*"
"""``SetTenantLimits.tenant`` naming the whole fleet."""
MAX_COUNT = 2**31 - 1
"""Largest count of a waiting entry (a merged ask saturates: the wire's range)."""
MAX_WEIGHT = 1000
"""Largest ``SetTenantLimits.weight``."""
MAX_LEDGER_MARKERS = 512
"""How many recent idem_keys the ledger remembers (a re-delivered command is a no-op)."""
MAX_LEDGER_BYTES = 448 * 1024
"""Most bytes the ledger's record may take (the fold refuses job records past 512 KiB, and
the changelog's messages must stay under 1 MB). An ask that would need a new waiting entry
past it is refused (``GrantSlots.refused``): about 4,000 jobs with 40-character ids waiting
at once."""
WAITING_BYTES = 80
"""A waiting entry's stored bytes besides its job_id, from above (JSON field names, a
count, an ISO instant)."""
BOOK_BYTES = 200
"""A tenant book's stored bytes besides its waiting entries, from above."""


@dataclass(frozen=True, slots=True)
class Waiting:
    """A job's ask for slots the ledger has not met yet."""

    job_id: str
    count: int
    rank_at: datetime
    """Its best waiting task instance's rank (``AskSlots.rank_at``)."""


@dataclass(frozen=True, slots=True)
class TenantBook:
    """One tenant in the ledger.

    Attributes:
        tenant: its name.
        weight: its share of a full fleet against other waiting tenants.
        max_running: its cap, or None.
        running: slots given and not returned.
        deficit: its deficit round-robin credit, in slots.
        waiting: the asks not met, by (rank_at, job_id).
    """

    tenant: str
    weight: int = 1
    max_running: int | None = None
    running: int = 0
    deficit: int = 0
    waiting: tuple[Waiting, ...] = ()

    def waiting_slots(self) -> int:
        """Return how many slots its jobs wait for."""
        return sum(w.count for w in self.waiting)

    def can_take(self) -> bool:
        """Return whether it waits and is under its cap."""
        return bool(self.waiting) and (self.max_running is None or self.running < self.max_running)

    def idle(self) -> bool:
        """Return whether the book holds nothing worth keeping (default limits, no work)."""
        return (
            self.running == 0 and not self.waiting and self.weight == 1 and self.max_running is None
        )


@dataclass(frozen=True, slots=True)
class LedgerState:
    """The ledger's record.

    Attributes:
        books: one per tenant with limits or work, by tenant name.
        fleet_slots: most slots given at once over all tenants, None for no limit.
        turn: the deficit round-robin's position: the first tenant (by name, cyclically)
            served next.
        applied: markers (``idem_marker``) of the most recent commands folded.
        clock: the fold's now at the last command.
    """

    books: tuple[TenantBook, ...] = ()
    fleet_slots: int | None = None
    turn: str = ""
    applied: tuple[str, ...] = ()
    clock: datetime = EPOCH

    def book(self, tenant: str) -> TenantBook:
        """Return ``tenant``'s book (a default one when it has none)."""
        return next((b for b in self.books if b.tenant == tenant), TenantBook(tenant))

    def running(self) -> int:
        """Return the slots given and not returned, over all tenants."""
        return sum(b.running for b in self.books)


@dataclass(frozen=True, slots=True)
class Grant:
    """Slots given to one job by one decision (sent as a GrantSlots), or an ask refused."""

    tenant: str
    job_id: str
    count: int
    refused: int = 0


def decide_ledger(
    state: LedgerState | None, envelope: cmd.Envelope, record_time: datetime
) -> tuple[LedgerState, list[Grant]]:
    """Fold one command into the ledger and give what it frees.

    Args:
        state: the ledger's record, None before its first command.
        envelope: an AskSlots, ReturnSlots or SetTenantLimits addressed to ``LEDGER_KEY``.
        record_time: the record's timestamp, aware UTC.

    Returns:
        ``(state after, grants)``: grants in the order decided, one per (tenant, job). An
        AskSlots that would need a new waiting entry past ``MAX_LEDGER_BYTES`` is refused
        instead: one Grant of 0 with ``refused`` = its count, nothing else changed.

    Raises:
        CronlogError: any other command (the fold dead-letters it).
    """
    state = state if state is not None else LedgerState()
    if idem_marker(envelope.idem_key) in state.applied:
        return state, []
    command = envelope.command
    _check(command)
    books = {b.tenant: b for b in state.books}
    fleet = state.fleet_slots
    match command:
        case cmd.AskSlots(tenant=tenant, asker=job_id, count=count, rank_at=rank_at):
            book = books.get(tenant, TenantBook(tenant))
            if _full(state, book, job_id):  # refused: the job asks again on a later decision
                return _applied(state, envelope, record_time), [
                    Grant(tenant, job_id, 0, refused=count)
                ]
            books[tenant] = replace(book, waiting=_ask(book.waiting, job_id, count, rank_at))
        case cmd.ReturnSlots(tenant=tenant, count=count, asker=job_id, withdraw=withdraw):
            book = books.get(tenant, TenantBook(tenant))
            waiting = tuple(w for w in book.waiting if w.job_id != job_id or not withdraw)
            books[tenant] = replace(book, running=max(0, book.running - count), waiting=waiting)
        case cmd.SetTenantLimits(tenant=tenant) if tenant == FLEET:
            fleet = command.max_running_tasks
        case cmd.SetTenantLimits(tenant=tenant, weight=weight, max_running_tasks=cap):
            book = books.get(tenant, TenantBook(tenant))
            books[tenant] = replace(book, weight=weight, max_running=cap)
        case _:
            raise AssertionError("refused by _check")
    books, turn, grants = _admit(books, fleet, state.turn)
    new = LedgerState(
        books=tuple(b for _, b in sorted(books.items()) if not b.idle()),
        fleet_slots=fleet,
        turn=turn,
    )
    return _applied(new, envelope, record_time, state), grants


def _check(command: cmd.Command) -> None:
    """Refuse what the ledger must never count (found by an adversarial run).

    Raises:
        CronlogError: not a ledger command; a tenant that is not a ledger tenant (``default``,
            a malformed name; ``*`` only in SetTenantLimits); an asker that is the ledger
            itself (its grant could not be delivered: the slots would be lost).
    """
    if not isinstance(command, (cmd.AskSlots, cmd.ReturnSlots, cmd.SetTenantLimits)):
        raise CronlogError(
            f"{type(command).__name__} is not a tenant ledger command "
            f"(job_id {LEDGER_KEY!r} takes AskSlots, ReturnSlots, SetTenantLimits)"
        )
    tenant = command.tenant
    fleet_ok = isinstance(command, cmd.SetTenantLimits) and tenant == FLEET
    if not fleet_ok and (tenant == DEFAULT_TENANT or not is_tenant_name(tenant)):
        raise CronlogError(f"tenant {tenant[:80]!r} is not a tenant of the ledger")
    if getattr(command, "asker", None) == LEDGER_KEY:
        raise CronlogError(f"the asker may not be the ledger ({LEDGER_KEY!r})")


def _applied(
    new: LedgerState,
    envelope: cmd.Envelope,
    record_time: datetime,
    before: LedgerState | None = None,
) -> LedgerState:
    """Return ``new`` with the command's marker and the clock (from ``before``, else ``new``)."""
    before = before if before is not None else new
    return replace(
        new,
        applied=(*before.applied, idem_marker(envelope.idem_key))[-MAX_LEDGER_MARKERS:],
        clock=max(before.clock, record_time),
    )


def _full(state: LedgerState, book: TenantBook, job_id: str) -> bool:
    """Return whether a new waiting entry for ``job_id`` would pass ``MAX_LEDGER_BYTES``.

    An estimate from above of the stored record (``WAITING_BYTES`` per entry plus its
    job_id), so the record written stays under the fold's record limit.
    """
    if any(w.job_id == job_id for w in book.waiting):
        return False  # merged into its entry: no growth
    size = len(state.applied) * 40 + sum(
        BOOK_BYTES + sum(WAITING_BYTES + len(w.job_id) for w in b.waiting) for b in state.books
    )
    return size + WAITING_BYTES + len(job_id) > MAX_LEDGER_BYTES


def _ask(
    waiting: tuple[Waiting, ...], job_id: str, count: int, rank_at: datetime
) -> tuple[Waiting, ...]:
    """Return ``waiting`` with the job's ask added (merged with its earlier one).

    The merged ask takes the new ask's rank: the job's best ready task instance without a
    slot now (``cronlog.slots.waiting_rank_ms``). Keeping the first ask's rank instead would
    keep a job with a steady backlog ahead of better-ranked work for ever (found by review).
    """
    old = next((w for w in waiting if w.job_id == job_id), None)
    count = min(MAX_COUNT, count if old is None else old.count + count)
    merged = Waiting(job_id, count, rank_at)
    rest = [w for w in waiting if w.job_id != job_id]
    return tuple(sorted((*rest, merged), key=lambda w: (w.rank_at, w.job_id)))


def _admit(
    books: dict[str, TenantBook], fleet: int | None, turn: str
) -> tuple[dict[str, TenantBook], str, list[Grant]]:
    """Give free slots to waiting tenants by weighted deficit round-robin.

    A tenant's turn tops its credit up by its weight (when spent) and gives its best-ranked
    jobs up to that credit, its cap and the fleet's room, several slots to one job at once;
    then the turn passes to the next tenant by name (unless the fleet's room stopped it).
    Linear in the waiting jobs served plus the turns taken.

    Returns:
        ``(books, turn, grants)`` after giving every slot the fleet size and the caps allow.
    """
    given: dict[tuple[str, str], int] = {}
    queues = {t: deque(b.waiting) for t, b in books.items() if b.waiting}
    running = {t: b.running for t, b in books.items()}
    deficit = {t: b.deficit for t, b in books.items()}
    room = None if fleet is None else fleet - sum(running.values())

    def can_take(t: str) -> bool:
        cap = books[t].max_running
        return bool(queues.get(t)) and (cap is None or running[t] < cap)

    while room is None or room > 0:
        eligible = sorted(t for t in queues if can_take(t))
        if not eligible:
            break
        tenant = next((t for t in eligible if t >= turn), eligible[0])
        if deficit[tenant] <= 0:  # a round's quantum: the weight, scaled to the room left
            share = sum(books[t].weight for t in eligible)
            rounds = 1 if room is None else max(1, room // share)
            deficit[tenant] = max(0, deficit[tenant]) + books[tenant].weight * rounds
        queue, cap = queues[tenant], books[tenant].max_running
        while deficit[tenant] > 0 and can_take(tenant) and (room is None or room > 0):
            head = queue[0]
            # without a fleet size nobody is short: no credit to spend, all at once
            limits = [head.count] if room is None else [head.count, deficit[tenant]]
            limits += [] if cap is None else [cap - running[tenant]]
            limits += [] if room is None else [room]
            k = min(limits)
            if k == head.count:
                queue.popleft()
            else:
                queue[0] = replace(head, count=head.count - k)
            running[tenant] += k
            if room is not None:  # credit is spent only when the fleet is short
                deficit[tenant] -= k
                room -= k
            given[(tenant, head.job_id)] = given.get((tenant, head.job_id), 0) + k
        # stopped by the fleet's room, its turn goes on with the next slot; else the turn
        # passes to the next tenant by name (cyclically)
        turn = tenant if deficit[tenant] > 0 and can_take(tenant) else tenant + "\x00"
    out = {
        t: replace(
            b,
            running=running[t],
            waiting=tuple(queues.get(t, ())),
            deficit=deficit[t] if queues.get(t) else 0,  # no credit kept without waiting work
        )
        for t, b in books.items()
    }
    grants = [Grant(tenant, job_id, count) for (tenant, job_id), count in given.items()]
    return out, turn, grants
