"""The short form of ``bench/year.py``: on a small simulated system, the newest snapshot
decoded, seeded and its tail folded gives the same job records as a replay from offset 0, at
every age, and the tail stays one snapshot interval long however old the log. Values only;
the figures are the bench's business."""

from __future__ import annotations

from bench.year import replay_from_snapshot, replay_from_zero, run
from topology.wire.state_codec import load_state


def test_snapshot_plus_tail_equals_the_replay_from_zero_as_the_log_ages() -> None:
    world, rows = run(jobs=30, days=[0.25, 0.5, 1.0], tick_s=300, every_h=3)
    assert [r.days for r in rows] == [0.25, 0.5, 1.0]
    assert rows[0].records < rows[1].records < rows[2].records
    assert len({r.tail for r in rows}) == 1  # one interval of tail, whatever the age
    _, full = replay_from_zero(world)
    jobs = [load_state(v) for k, v in full.items() if k.startswith(b"job-")]
    assert len(jobs) == 30 and all(j.runs_fired >= 20 for j in jobs)  # hourly, for a day
    for stored in world.snapshots:  # every snapshot of the day, not only the newest
        _, _, bounded = replay_from_snapshot(world, stored)
        assert bounded == full
