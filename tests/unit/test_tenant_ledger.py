"""The tenant ledger (``cronlog.ledger``) and a job's slots (``cronlog.slots``).

Pure decisions first (caps, weighted deficit round-robin, work conservation, dedupe), then
the fold adapter without Kafka: several partitions, the commands the fold appends fed back
as the log would, a worker polling every partition. A tenant's cap holds over all partitions,
and a full fleet is shared by weight.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pytest import MonkeyPatch

from cronlog import commands as cmd
from cronlog import events as ev
from cronlog import ledger
from cronlog.errors import CronlogError
from cronlog.ledger import FLEET, LEDGER_KEY, Grant, LedgerState, decide_ledger
from cronlog.model import JobSpec, Schedule, ScheduleKind, main_task
from cronlog.time import to_ms
from tests.builders import completed
from tests.unit.fold_world import TOPICS, N, folder_over
from topology.fold import folder as fold
from topology.fold.folder import BatchResult, Record
from topology.kafka.partitioning import partition_for
from topology.wire.codec import decode_event, encode_command
from topology.wire.state_codec import dump_state, load_ledger, load_state

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def _env(key: str, command: cmd.Command) -> cmd.Envelope:
    return cmd.Envelope(idem_key=key, job_id=LEDGER_KEY, command=command)


class Ledger:
    """decide_ledger with generated keys; collects the grants."""

    def __init__(self) -> None:
        self.state: LedgerState | None = None
        self.n = 0
        self.grants: list[Grant] = []

    def send(self, command: cmd.Command) -> list[Grant]:
        self.n += 1
        self.state, grants = decide_ledger(self.state, _env(f"k{self.n}", command), T0)
        self.grants += grants
        return grants

    def ask(self, tenant: str, job: str, count: int = 1, minute: int = 0) -> list[Grant]:
        at = T0 + timedelta(minutes=minute)
        return self.send(cmd.AskSlots(tenant=tenant, asker=job, count=count, rank_at=at))

    def give_back(self, tenant: str, count: int = 1) -> list[Grant]:
        return self.send(cmd.ReturnSlots(tenant=tenant, asker="x", count=count))

    def limits(self, tenant: str, weight: int = 1, cap: int | None = None) -> list[Grant]:
        return self.send(cmd.SetTenantLimits(tenant=tenant, weight=weight, max_running_tasks=cap))


def test_a_tenant_gets_at_most_its_cap_and_the_rest_when_slots_come_back() -> None:
    led = Ledger()
    led.limits("a", cap=2)
    assert led.ask("a", "j1", 3) == [Grant("a", "j1", 2)]
    assert led.ask("a", "j2", 1) == []
    assert led.state is not None and led.state.book("a").running == 2
    assert led.give_back("a") == [Grant("a", "j1", 1)]  # j1 asked first
    assert led.give_back("a", 2) == [Grant("a", "j2", 1)]
    assert led.state.book("a").running == 1 and led.state.book("a").waiting == ()


def test_within_a_tenant_the_best_rank_goes_first() -> None:
    led = Ledger()
    led.limits("a", cap=1)
    led.ask("a", "first", minute=0)
    led.ask("a", "late", minute=9)
    led.ask("a", "urgent", minute=-30)  # a high class ranks earlier (cronlog.priority)
    led.give_back("a")
    led.give_back("a")
    assert [g.job_id for g in led.grants] == ["first", "urgent", "late"]


def test_a_full_fleet_is_shared_by_weight_and_a_lone_tenant_takes_everything() -> None:
    led = Ledger()
    led.send(cmd.SetTenantLimits(tenant=FLEET, max_running_tasks=4))
    led.limits("a", weight=3)
    led.ask("a", "ja", 1000)
    assert sum(g.count for g in led.grants) == 4  # alone: the whole fleet (work-conserving)
    led.ask("b", "jb", 1000)
    led.grants.clear()
    for _ in range(400):  # slots come back one at a time, each from whoever held it
        led.give_back(led.grants[-1].tenant if led.grants else "a")
    given = Counter(g.tenant for g in led.grants for _ in range(g.count))
    assert given == {"a": 300, "b": 100}


def test_a_tenant_without_waiting_work_keeps_no_credit() -> None:
    led = Ledger()
    led.send(cmd.SetTenantLimits(tenant=FLEET, max_running_tasks=1))
    led.limits("a", weight=5)
    led.ask("a", "ja", 1)  # granted at once, no one else waits
    led.ask("b", "jb", 3)
    led.ask("a", "ja", 3)
    order = []
    for _ in range(6):
        led.grants.clear()
        led.give_back(order[-1] if order else "a")
        order += [g.tenant for g in led.grants]
    assert order[:4] == ["b", "a", "a", "a"]  # b's turn came; a banked nothing while idle


def test_a_redelivered_command_changes_nothing() -> None:
    led = Ledger()
    led.limits("a", cap=1)
    first = decide_ledger(
        led.state, _env("same", cmd.AskSlots(tenant="a", asker="j", count=1, rank_at=T0)), T0
    )
    again = decide_ledger(
        first[0], _env("same", cmd.AskSlots(tenant="a", asker="j", count=1, rank_at=T0)), T0
    )
    assert first[1] == [Grant("a", "j", 1)] and again == (first[0], [])


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["ask", "return", "limits", "fleet"]),
            st.sampled_from(["a", "b", "c"]),
            st.integers(1, 5),
        ),
        max_size=60,
    )
)
def test_running_never_passes_a_cap_or_the_fleet(
    steps: list[tuple[str, str, int]],
) -> None:
    led = Ledger()
    held: Counter[str] = Counter()
    for kind, tenant, n in steps:
        if kind == "ask":
            led.ask(tenant, f"j{tenant}{n}", n)
        elif kind == "return" and held[tenant]:
            led.give_back(tenant, min(n, held[tenant]))
            held[tenant] -= min(n, held[tenant])
        elif kind == "limits":
            led.limits(tenant, weight=n, cap=n - 1)
        elif kind == "fleet":
            led.send(cmd.SetTenantLimits(tenant=FLEET, max_running_tasks=n + 1))
        given = Counter[str]()
        for g in led.grants:
            given[g.tenant] += g.count
        held.update(given)
        led.grants.clear()
        state = led.state
        if state is None:
            continue
        for book in state.books:
            assert book.running == held[book.tenant]  # the ledger counts what it gave
            if given[book.tenant] and book.max_running is not None:
                assert book.running <= book.max_running  # a grant never passes the cap
        if given and state.fleet_slots is not None:
            assert state.running() <= state.fleet_slots  # nor the fleet


# -- the fold adapter: several partitions, the ledger's commands fed back as the log would --


def _spec(tenant: str) -> JobSpec:
    return JobSpec(
        name="m",
        schedule=Schedule(ScheduleKind.MANUAL),
        task_specs=main_task(("true",)),
        tenant=tenant,
    )


class Sim:
    """One folder owning every partition; what it appends to the commands topic is read back."""

    def __init__(self) -> None:
        self.store: dict[str, bytes] = {}
        self.folder = folder_over(self.store)
        self.log: list[Record] = []
        self.offset = 0
        self.at = T0
        self.events: list[ev.RunEvent] = []
        self.running: Counter[str] = Counter()
        self.peak: Counter[str] = Counter()
        self.claims: list[ev.RunEvent] = []

    def append(self, job_id: str, command: cmd.Command, tenant: str = "default") -> None:
        self.offset += 1
        env = cmd.Envelope(
            idem_key=f"k{self.offset}", job_id=job_id, command=command, tenant=tenant
        )
        self._add(job_id.encode() if job_id else None, encode_command(env), None)

    def _add(self, key: bytes | None, value: bytes, partition: int | None) -> None:
        self.offset += 1
        self.at += timedelta(milliseconds=10)
        p = partition if partition is not None else partition_for(key or b"", N)
        self.log.append(Record(p, self.offset, int(self.at.timestamp() * 1000), key, value))

    def pump(self) -> None:
        """Fold everything in the log, and what that appends, until the log is empty."""
        while self.log:
            batch, self.log = self.log, []
            out = self.folder.fold(batch)
            self.store.update({j: w.value for j, w in out.writes.items()})
            self._sent(out)

    def _sent(self, out: BatchResult) -> None:
        for s in out.sends:
            if s.topic == TOPICS.commands:
                self._add(s.key, s.value, s.partition)
            elif s.topic == TOPICS.run_events:
                record = decode_event(s.value)
                self.events.append(record)
                tenant = self.tenant(record.job_id)
                if isinstance(record.event, ev.TaskClaimed):
                    self.claims.append(record)
                    self.running[tenant] += 1
                    self.peak[tenant] = max(self.peak[tenant], self.running[tenant])
                elif isinstance(record.event, (ev.TaskSucceeded, ev.TaskFailed, ev.TaskReleased)):
                    self.running[tenant] -= 1

    def tenant(self, job_id: str) -> str:
        return load_state(self.store[job_id]).spec.tenant if job_id in self.store else "?"

    def poll(self, worker: str, slots: int) -> list[ev.RunEvent]:
        """Poll every partition for up to ``slots``; return the grants."""
        before = len(self.claims)
        for p in range(N):
            self.offset += 1
            env = cmd.Envelope(
                idem_key=f"poll{self.offset}",
                job_id="",
                command=cmd.PollTasks(worker_id=worker, slots=slots, poll_id=f"p{self.offset}"),
            )
            self._add(None, encode_command(env), p)
        self.pump()
        return self.claims[before:]

    def complete(self, claim: ev.RunEvent) -> None:
        c = claim.event
        assert isinstance(c, ev.TaskClaimed)
        done = completed(
            c.run_id, task=c.task, attempt=c.attempt, epoch=c.epoch, worker=c.worker_id, at=self.at
        )
        self.append(claim.job_id, done)


def _jobs(sim: Sim, tenant: str, jobs: int, runs: int) -> list[str]:
    ids = [f"{tenant}-{i}" for i in range(jobs)]
    for j in ids:
        sim.append(j, cmd.RegisterJob(spec=_spec(tenant)), tenant)
        for _ in range(runs):
            sim.append(j, cmd.TriggerJob(), tenant)
    sim.pump()
    return ids


def test_a_cap_holds_across_partitions_and_every_run_ends() -> None:
    sim = Sim()
    sim.append(LEDGER_KEY, cmd.SetTenantLimits(tenant="team-a", max_running_tasks=3))
    jobs = _jobs(sim, "team-a", jobs=8, runs=3)  # 24 tasks over all 4 partitions
    assert len({partition_for(j, N) for j in jobs}) == N
    held: list[ev.RunEvent] = []
    for _ in range(40):
        held += sim.poll("w1", 8)
        assert sim.running["team-a"] <= 3
        for claim in held:
            sim.complete(claim)
        held = []
        sim.pump()
    assert sim.peak["team-a"] == 3
    assert sum(isinstance(r.event, ev.RunSucceeded) for r in sim.events) == 24
    ledger = load_ledger(sim.store[LEDGER_KEY])
    assert ledger.book("team-a").running == 0 and ledger.book("team-a").waiting == ()
    assert all(load_state(sim.store[j]).slots_held == 0 for j in jobs)
    waiting = [r.event for r in sim.events if isinstance(r.event, ev.TenantSlotsAsked)]
    assert waiting and all(e.tenant == "team-a" for e in waiting)


def test_the_default_tenant_never_asks_the_ledger() -> None:
    sim = Sim()
    _jobs(sim, "default", jobs=3, runs=2)
    for claim in sim.poll("w1", 8):
        sim.complete(claim)
    sim.pump()
    assert LEDGER_KEY not in sim.store
    assert sum(isinstance(r.event, ev.RunSucceeded) for r in sim.events) == 6


def test_a_full_fleet_is_shared_three_to_one_across_partitions() -> None:
    sim = Sim()
    sim.append(LEDGER_KEY, cmd.SetTenantLimits(tenant=FLEET, max_running_tasks=4))
    sim.append(LEDGER_KEY, cmd.SetTenantLimits(tenant="team-a", weight=3))
    sim.append(LEDGER_KEY, cmd.SetTenantLimits(tenant="team-b", weight=1))
    _jobs(sim, "team-a", jobs=10, runs=20)
    _jobs(sim, "team-b", jobs=10, runs=20)
    started: Counter[str] = Counter()
    for _ in range(40):  # each round: the worker's 4 slots fill, then the tasks end
        claims = sim.poll("w1", 4)
        started.update(sim.tenant(c.job_id) for c in claims)
        assert sum(sim.running.values()) <= 4
        for claim in claims:
            sim.complete(claim)
        sim.pump()
    total = started["team-a"] + started["team-b"]
    assert total >= 150
    assert abs(started["team-a"] / total - 0.75) <= 0.05, started


def test_the_golden_ledger_log_keeps_the_cap_and_the_fleet() -> None:
    # tests/replay/logs/tenant_ledger: team-a capped at 1, a fleet of 2 ledger slots, 20 s
    # attempts; the golden test freezes its decisions, this reads what they were.
    path = Path(__file__).parents[1] / "replay" / "logs" / "tenant_ledger.events.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    running: Counter[str] = Counter()
    peak: Counter[str] = Counter()
    fleet = 0
    for r in sorted(records, key=lambda r: (r["at"], r["type"] != "TaskSucceeded")):
        tenant = {"a": "team-a", "b": "team-b"}.get(r["job_id"][0], "default")
        if r["type"] in ("TaskClaimed", "TaskSucceeded"):
            running[tenant] += 1 if r["type"] == "TaskClaimed" else -1
            peak[tenant] = max(peak[tenant], running[tenant])
            fleet = max(fleet, running["team-a"] + running["team-b"])
    assert peak == {"team-a": 1, "team-b": 1, "default": 1} and fleet == 2
    kinds = Counter(r["type"] for r in records)
    assert (
        kinds["TenantSlotsAsked"] and kinds["TenantSlotsReceived"] and kinds["TenantSlotsReturned"]
    )


# -- found by review ------------------------------------------------------------------------


def test_a_job_with_a_steady_backlog_does_not_keep_its_first_rank() -> None:
    # A merged ask takes the new ask's rank: the job's best task without a slot now. J1 has
    # a backlog and asks every minute; J2's task of minute 2 must come once J1's older tasks
    # are served, not after all of J1's (a merged ask that kept its first rank starved it).
    led = Ledger()
    led.limits("a", cap=1)
    led.ask("a", "X")  # holds the one slot
    led.ask("a", "J1", 2, minute=0)  # tasks of minutes 0 and 1
    led.ask("a", "J2", minute=2)
    led.give_back("a")  # → J1's minute-0 task
    led.ask("a", "J1", minute=1)  # a task of minute 3; its best without a slot: minute 1
    led.give_back("a")  # → J1's minute-1 task
    led.ask("a", "J1", minute=3)  # a task of minute 4; best without a slot: minute 3
    led.give_back("a")  # → J2 (minute 2)
    led.give_back("a")  # → J1 (minute 3)
    assert [g.job_id for g in led.grants] == ["X", "J1", "J1", "J2", "J1"]


def test_lifting_a_cap_grants_a_large_backlog_in_one_decision() -> None:
    led = Ledger()
    led.limits("a", cap=0)
    for i in range(2000):
        led.ask("a", f"j{i:04d}", 20, minute=i)
    assert led.grants == []
    grants = led.limits("a", cap=30_000)
    assert sum(g.count for g in grants) == 30_000
    assert [g.job_id for g in grants][:2] == ["j0000", "j0001"]  # best rank first
    state = led.state
    assert state is not None and state.book("a").waiting_slots() == 10_000


def test_a_grant_is_never_refused_for_the_record_size(monkeypatch: MonkeyPatch) -> None:
    sim = Sim()
    sim.append(LEDGER_KEY, cmd.SetTenantLimits(tenant="team-a", max_running_tasks=1))
    _jobs(sim, "team-a", jobs=1, runs=2)
    job = "team-a-0"
    assert load_state(sim.store[job]).slots_held == 1  # the first run's slot
    for claim in sim.poll("w1", 4):
        monkeypatch.setattr(fold, "MAX_RECORD_BYTES", len(sim.store[job]))  # full
        sim.complete(claim)
        sim.pump()  # the slot goes back and comes again as a grant to the same job
    state = load_state(sim.store[job])
    assert state.slots_held == 1 and state.slots_asked == 0  # the grant was taken


def test_a_grant_to_a_job_without_a_record_goes_back() -> None:
    sim = Sim()
    sim.append(LEDGER_KEY, cmd.SetTenantLimits(tenant="team-a", max_running_tasks=1))
    sim.append(LEDGER_KEY, cmd.AskSlots(tenant="team-a", asker="ghost", count=1, rank_at=T0))
    sim.pump()
    ledger = load_ledger(sim.store[LEDGER_KEY])
    assert ledger.book("team-a").running == 0  # granted to "ghost", returned by it


def test_ready_tasks_from_before_the_ledger_ask_for_slots_on_the_next_poll() -> None:
    sim = Sim()
    _jobs(sim, "team-a", jobs=1, runs=1)
    job = "team-a-0"
    legacy = replace(load_state(sim.store[job]), slots_held=0, slots_asked=0)
    sim.store[job] = dump_state(legacy)  # as a record written before the ledger
    assert legacy.ready_rank() is not None  # still polled, so a decision settles it
    sim.folder.ready.set(partition_for(job, N), job, to_ms(T0))
    claims = sim.poll("w1", 4)  # the poll asks; the grant's notification, polled again
    claims += sim.poll("w1", 4)
    assert [c.job_id for c in claims] == [job]


def test_a_ready_task_without_a_slot_sends_no_notification() -> None:
    sim = Sim()
    sim.append(LEDGER_KEY, cmd.SetTenantLimits(tenant="team-a", max_running_tasks=0))
    sim.append("team-a-0", cmd.RegisterJob(spec=_spec("team-a")), "team-a")
    sim.append("team-a-0", cmd.TriggerJob(), "team-a")
    batch, sim.log = sim.log, []
    out = sim.folder.fold(batch)
    assert not [s for s in out.sends if s.topic == TOPICS.ready]


def test_a_full_ledger_refuses_an_ask_and_the_job_asks_again_later(
    monkeypatch: MonkeyPatch,
) -> None:
    # past MAX_LEDGER_BYTES a new waiting job is refused (the record stays writable: a full
    # one would abort the partition's every batch); the job asks again on a later poll
    sim = Sim()
    sim.append(LEDGER_KEY, cmd.SetTenantLimits(tenant="team-a", max_running_tasks=1))
    first = _jobs(sim, "team-a", jobs=1, runs=2)[0]  # one slot held, one task waiting
    monkeypatch.setattr(ledger, "MAX_LEDGER_BYTES", len(sim.store[LEDGER_KEY]) + 50)
    late = _jobs(sim, "team-a", jobs=2, runs=1)[1]  # "team-a-1": refused
    refusals = [
        r.event
        for r in sim.events
        if isinstance(r.event, ev.TenantSlotsReceived) and r.event.refused
    ]
    assert refusals and load_state(sim.store[late]).slots_asked == 0
    assert load_state(sim.store[late]).ready_rank() is not None  # polled, so asked again
    monkeypatch.setattr(ledger, "MAX_LEDGER_BYTES", 448 * 1024)
    for _ in range(6):
        for claim in sim.poll("w1", 4):
            sim.complete(claim)
        sim.pump()
    done = {r.job_id for r in sim.events if isinstance(r.event, ev.RunSucceeded)}
    assert {first, late} <= done


# -- found by an adversarial run ------------------------------------------------------------


def test_the_ledger_refuses_what_it_must_never_count() -> None:
    led = Ledger()
    for bad in (
        cmd.AskSlots(tenant="team-a", asker=LEDGER_KEY, count=2, rank_at=T0),  # undeliverable
        cmd.AskSlots(tenant="default", asker="j", count=1, rank_at=T0),  # not a ledger tenant
        cmd.SetTenantLimits(tenant="default", max_running_tasks=0),
        cmd.SetTenantLimits(tenant="Team A", max_running_tasks=0),
        cmd.ReturnSlots(tenant=FLEET, asker="j", count=1),  # '*' names the fleet only in limits
    ):
        with pytest.raises(CronlogError):
            led.send(bad)
    assert led.state is None  # nothing was counted


def test_a_huge_ask_without_a_fleet_size_is_one_grant_not_a_loop() -> None:
    led = Ledger()
    grants = led.ask("team-a", "j", 2**31 - 1)
    assert grants == [Grant("team-a", "j", 2**31 - 1)]
    led.ask("team-a", "k", 2**31 - 1)
    led.ask("team-a", "k", 2**31 - 1)  # merged asks saturate at the wire's range
    assert sum(g.count for g in led.grants) == 3 * (2**31 - 1)


def test_a_full_fleet_with_a_huge_room_shares_in_few_steps() -> None:
    led = Ledger()
    led.send(cmd.SetTenantLimits(tenant=FLEET, max_running_tasks=2**30))
    led.limits("team-a", weight=3)
    led.ask("team-a", "a", 2**31 - 1)
    led.ask("team-b", "b", 2**31 - 1)
    state = led.state
    assert state is not None and state.running() == 2**30  # the whole fleet, at once
    assert state.book("team-a").running > state.book("team-b").running


def test_a_grant_to_a_job_without_a_record_withdraws_its_ask() -> None:
    # a forged ask for a job that does not exist: granted once, given back with its ask
    # withdrawn (it was granted and returned for ever, starving the tenant's real jobs)
    sim = Sim()
    sim.append(LEDGER_KEY, cmd.SetTenantLimits(tenant=FLEET, max_running_tasks=4))
    sim.append(
        LEDGER_KEY, cmd.AskSlots(tenant="team-a", asker="phantom", count=2**31 - 1, rank_at=T0)
    )
    sim.pump()
    ledger_state = load_ledger(sim.store[LEDGER_KEY])
    assert ledger_state.book("team-a").waiting == () and ledger_state.running() == 0
    job = _jobs(sim, "team-a", jobs=1, runs=2)[0]
    for claim in sim.poll("w1", 4):
        sim.complete(claim)
    sim.pump()
    assert sum(r.job_id == job and isinstance(r.event, ev.RunSucceeded) for r in sim.events) == 2


def test_slots_given_without_a_fleet_size_cost_no_credit_later() -> None:
    # a huge grant while the fleet was unbounded must not leave a debt that the next
    # fleet-bounded decision pays off one weight at a time (a hang of hours)
    led = Ledger()
    led.limits("team-a", cap=2**31 - 2)
    led.ask("team-a", "j", 2**31 - 1)  # all but one granted, one waits at the cap
    led.send(cmd.SetTenantLimits(tenant=FLEET, max_running_tasks=2**31 - 1))
    led.give_back("team-a", 5)
    state = led.state
    assert state is not None and state.book("team-a").deficit >= 0
    assert led.grants[-1] == Grant("team-a", "j", 1)
