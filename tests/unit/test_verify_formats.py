"""``replay --verify`` compares like with like: a job record the live fold wrote in an older
format (``topology.wire.state_codec``; v2, before the one shape of issue 23) is the same state as
the replay's v3 record of it, while records of one format must be equal byte for byte."""

from __future__ import annotations

import json
from dataclasses import replace

from tests.old_shape import as_v2, v2_record
from topology.snapshots.replay import first_state_difference
from topology.wire.state_codec import dump_state, load_state


def test_replay_verify_reads_a_record_in_the_old_format_as_the_same_state() -> None:
    old = v2_record("one_task")
    new = dump_state(load_state(old))
    assert first_state_difference({b"legacy": old}, {b"legacy": new}) is None
    assert first_state_difference({b"legacy": as_v2(load_state(new))}, {b"legacy": new}) is None
    paused = dump_state(replace(load_state(old), runs_fired=9))
    assert first_state_difference({b"legacy": old}, {b"legacy": paused}) == (
        "job 'legacy': runs_fired: 0 != 9 (live != replay)"
    )
    # records of one format must be equal byte for byte
    spaced = b"v3:" + json.dumps(json.loads(new[3:])).encode()
    assert first_state_difference({b"legacy": spaced}, {b"legacy": new}) == (
        "job 'legacy': bytes differ (live != replay)"
    )
