"""The fold's group membership: its consumer's settings, and the bound on rejoins after a
fenced static member (services/scheduler/membership.py)."""

from __future__ import annotations

import pytest

from services.scheduler.membership import REJOIN_LIMIT, Rejoins, fold_consumer_config
from services.scheduler.settings import SchedulerSettings
from services.scheduler.transaction import Fenced


def test_the_fold_consumer_is_a_static_cooperative_member_of_its_group() -> None:
    conf = fold_consumer_config(SchedulerSettings(instance_id="s-7", session_timeout_s=9), "g")
    assert conf["group.id"] == "g"
    assert conf["group.instance.id"] == "s-7"
    assert conf["partition.assignment.strategy"] == "cooperative-sticky"
    assert (conf["session.timeout.ms"], conf["heartbeat.interval.ms"]) == (9000, 3000)
    dynamic = fold_consumer_config(SchedulerSettings(static_membership=False), "g")
    assert "group.instance.id" not in dynamic


def test_rejoins_past_the_limit_in_a_minute_end_the_process() -> None:
    now = [0.0]
    rejoins = Rejoins(clock=lambda: now[0])
    for _ in range(REJOIN_LIMIT):
        rejoins.allow(RuntimeError("fenced"))
        now[0] += 1.0
    with pytest.raises(Fenced, match=f"fenced {REJOIN_LIMIT + 1} times in a minute"):
        rejoins.allow(RuntimeError("fenced"))


def test_rejoins_a_minute_apart_go_on_for_ever() -> None:
    now = [0.0]
    rejoins = Rejoins(clock=lambda: now[0])
    for _ in range(5 * REJOIN_LIMIT):
        rejoins.allow(RuntimeError("fenced"))
        now[0] += 61.0
    assert len(rejoins.at) == 1
