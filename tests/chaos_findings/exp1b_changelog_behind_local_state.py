"""Experiment 1b: kill -9 between the job-table write and its changelog ack.

The fold writes job records to faust's table: RocksDB gets the put at once, the changelog
message is produced asynchronously afterwards. A kill -9 in between leaves the local RocksDB
*ahead* of the changelog. On restart with the same state dir the redelivered Tick finds the
job not due (its cursor already moved in the local store), so nothing re-puts the record
(Ticks carry no dedupe marker, so the "re-put on duplicate" rule of the adapter protocol does
not apply) and the changelog stays stale until the job's next write -- for a once job, never.

When the partition is later recovered from the changelog (another instance, a lost disk, a
new machine), the stale record fires the same tick again, under a new Tick's idem_key:
a second RunScheduled for the same (job_id, scheduled_for) with a different event_id.

    PYTHONPATH=/work/main .venv/bin/python tests/chaos_findings/exp1b_changelog_behind_local_state.py [tag] [N] [extra_delay_ms]
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import sys
import time
import uuid
from datetime import UTC, datetime

from confluent_kafka import Consumer, TopicPartition

from chaos_common import Exp, read_topic, run_events
from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.model import JobSpec, Schedule, ScheduleKind
from topology.codec import encode_command

TAG = sys.argv[1] if len(sys.argv) > 1 else "brk2"
N = int(sys.argv[2]) if len(sys.argv) > 2 else 3000
EXTRA_MS = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0

exp = Exp(TAG)
exp.ensure()
# Since a2b99a4 the scheduler wipes its local state at start (keep_local_state=False), which
# closes this hole by default; CHAOS_KEEP_LOCAL=1 runs with CRONLOG_KEEP_LOCAL_STATE=true.
KEEP = {"CRONLOG_KEEP_LOCAL_STATE": "true"} if os.environ.get("CHAOS_KEEP_LOCAL") == "1" else {}


def hw_sum(consumer: Consumer, topic: str) -> int:
    return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5, cached=False)[1]
               for p in range(exp.partitions))


def changelog_states() -> dict[str, dict]:
    last = {}
    for m in read_topic(exp.settings, exp.topics.job_table_changelog):
        if m.value() is None:
            continue
        last[m.key().decode()] = json.loads(m.value()[3:])
    return last


def local_fired() -> int:
    """Job records in the dead scheduler's RocksDB whose once tick already fired."""
    from rocksdict import AccessType, Options, Rdict
    n = 0
    for p in range(exp.partitions):
        path = exp.dir / "state-s1" / "v1" / "tables" / f"jobs-{p}.db"
        if not path.exists():
            continue
        db = Rdict(str(path), options=Options(raw_mode=True),
                   access_type=AccessType.read_only())
        for k, v in db.items():
            if v.startswith(b"v1:") and json.loads(v[3:]).get("next_fire_at") is None:
                n += 1
        db.close()
    return n


try:
    s1 = exp.scheduler("s1", **KEEP)
    for _ in range(60):
        if s1.grep("due index rebuilt"):
            break
        time.sleep(0.5)
    run_at = datetime.fromtimestamp(int(time.time()) + 15, UTC)
    spec = JobSpec(name="once", schedule=Schedule(ScheduleKind.ONCE, run_at=run_at),
                   command=("true",))
    jobs = [f"once{i:05d}" for i in range(N)]
    for j in jobs:
        exp.send_raw(j.encode(), encode_command(cmd.Envelope(uuid.uuid4().hex, j,
                                                             cmd.RegisterJob(spec))), flush=False)
    exp.producer().flush(30)
    print(f"registered {N} once jobs for {run_at.isoformat()}", flush=True)
    c = Consumer(exp.settings.consumer_config("chaos-hw"))
    # Kill -9 once all the firing's events are on run-events (delivery done, so the fold is now
    # writing the records: RocksDB puts in one synchronous loop, changelog sends after it),
    # EXTRA_MS later. The window is timing-dependent: sweep EXTRA_MS (0..150) if one run misses.
    # EXTRA_MS < 0: instead kill -9 the moment the first changelog message of the firing lands
    # (the synchronous put loop of that batch is then complete; most sends still queued).
    target = 3 * N  # JobRegistered + RunScheduled + TaskReady
    if EXTRA_MS == -2:
        # kill -9 the moment the fold's consumer group has COMMITTED past the firing Ticks,
        # if the changelog does not yet hold every record that firing wrote.
        from confluent_kafka import TopicPartition as TP
        while time.time() < run_at.timestamp() + 0.3:
            time.sleep(0.01)
        snap = {p: c.get_watermark_offsets(TP(exp.topics.commands, p), timeout=5,
                                           cached=False)[1] for p in range(exp.partitions)}
        grp = Consumer(exp.settings.consumer_config(exp.topics.scheduler_app))
        tps = [TP(exp.topics.commands, p) for p in range(exp.partitions)]
        while True:
            com = {t.partition: t.offset for t in grp.committed(tps, timeout=5)}
            if all(com[p] >= snap[p] for p in snap):
                break
            time.sleep(0.002)
        cl = hw_sum(c, exp.topics.job_table_changelog)
        print(f"commands offsets committed past the firing Ticks while the changelog holds "
              f"{cl} of {2 * N} records", flush=True)
    elif EXTRA_MS < 0:
        while hw_sum(c, exp.topics.job_table_changelog) < N:
            time.sleep(0.05)
        while hw_sum(c, exp.topics.job_table_changelog) <= N:
            time.sleep(0.001)
    else:
        while hw_sum(c, exp.topics.run_events) < target:
            time.sleep(0.002)
        time.sleep(EXTRA_MS / 1000)
    s1.kill9()
    cl_at_kill = hw_sum(c, exp.topics.job_table_changelog)
    print(f"kill -9 {EXTRA_MS} ms after run-events reached {target}; changelog records at kill: {cl_at_kill} "
          f"(N registrations + N firings would be {2 * N})", flush=True)

    time.sleep(3)
    print(f"changelog records 3 s after the kill (nothing running): "
          f"{hw_sum(c, exp.topics.job_table_changelog)}", flush=True)
    print(f"local RocksDB right after the kill: {local_fired()} of {N} job records show the "
          f"tick fired", flush=True)
    # Restart with the same state dir: the local store is ahead, the redelivered Tick is a no-op.
    s1 = exp.scheduler("s1", **KEEP)
    time.sleep(15)
    s1.stop()
    states = changelog_states()
    stale = [j for j in jobs if states.get(j, {}).get("next_fire_at") is not None]
    print(f"after restart with the same state dir + 15 s of folding: changelog still shows "
          f"{len(stale)}/{N} jobs as not yet fired (next_fire_at set, no run)", flush=True)
    cl_now = hw_sum(c, exp.topics.job_table_changelog)
    print(f"changelog records now: {cl_now}")

    # The partition is recovered from the changelog (simulate a new machine: fresh state dir).
    shutil.rmtree(exp.dir / "state-s1", ignore_errors=True)
    s1 = exp.scheduler("s1", **KEEP)
    time.sleep(20)
    s1.stop()
    recs = run_events(exp)
    per_tick = collections.defaultdict(set)
    for _m, r, _raw in recs:
        if isinstance(r.event, ev.RunScheduled):
            per_tick[(r.job_id, r.event.run_id)].add(r.event_id)
    doubles = {k: v for k, v in per_tick.items() if len(v) > 1}
    print(f"RunScheduled for distinct (job, run): {len(per_tick)}; with >1 distinct event_id: "
          f"{len(doubles)}")
    for k, v in list(doubles.items())[:5]:
        print("  ", k, sorted(v))
    ready = collections.defaultdict(set)
    for _m, r, _raw in recs:
        if isinstance(r.event, ev.TaskReady):
            ready[r.event.run_id].add(r.event_id)
    print(f"runs whose attempt-1 TaskReady was published under >1 distinct event_id: "
          f"{sum(1 for v in ready.values() if len(v) > 1)}")
finally:
    exp.stop_all()
