"""Experiment 4d: a job's table record grows without bound while runs stay active, until the
scheduler can no longer write it and dies -- and keeps dying after every restart.

Active runs live inside the job record (``JobState.runs``); nothing bounds them (no overlap
policy, no cap). With no worker claiming (workers down, or simply slower than the schedule),
each tick adds a run: ~220 bytes for a one-task job, so an every-second job passes 1 MiB after
~80 minutes of worker outage. A DAG job with many tasks gets there in seconds: this script
registers a 200-task job every second with no worker running (after d747a2e: 200 tasks
and max_active_runs=256 are the allowed maxima). When the JSON record passes
aiokafka's max_request_size, faust's ProducerBuffer crashes and the scheduler process exits;
after a restart the next Tick touches the same job and it exits again.

    PYTHONPATH=/work/main .venv/bin/python tests/chaos_findings/exp4d_unbounded_job_record.py [tag]
"""

from __future__ import annotations

import sys
import time
import uuid

from chaos_common import Exp, read_topic
from cronlog import commands as cmd
from cronlog.model import JobSpec, Schedule, ScheduleKind

TAG = sys.argv[1] if len(sys.argv) > 1 else "brk14"
exp = Exp(TAG)
exp.ensure()


def record_sizes() -> dict[bytes, list[int]]:
    out: dict[bytes, list[int]] = {}
    for m in read_topic(exp.settings, exp.topics.job_table_changelog, idle_s=2):
        out.setdefault(m.key(), []).append(len(m.value() or b""))
    return out


try:
    s1 = exp.scheduler("s1")
    time.sleep(8)
    one = JobSpec(name="one-task", schedule=Schedule(ScheduleKind.CRON, "* * * * * *"),
                  command=("true",))
    dag = JobSpec(name="dag", schedule=Schedule(ScheduleKind.CRON, "* * * * * *"),
                  command=("true",), tasks=tuple(f"task-{i:03d}" for i in range(200)))
    # after d747a2e (max_active_runs x tasks <= 2000, record <= 512 KiB): task names are not
    # bounded, so 100 tasks with 2 KB names make each run ~200 KB of job record.
    fat = JobSpec(name="fat", schedule=Schedule(ScheduleKind.CRON, "* * * * * *"),
                  command=("true",), tasks=tuple(f"t{i:03d}-" + "x" * 2000 for i in range(100)))
    exp.send(cmd.Envelope(uuid.uuid4().hex, "one-task", cmd.RegisterJob(one)))
    exp.send(cmd.Envelope(uuid.uuid4().hex, "dag", cmd.RegisterJob(dag)))
    exp.send(cmd.Envelope(uuid.uuid4().hex, "fat", cmd.RegisterJob(fat)))
    t0 = time.time()
    while s1.alive() and time.time() - t0 < 90:
        time.sleep(1)
    from chaos_common import run_events
    from cronlog import events as ev
    import collections
    recs = run_events(exp)
    kinds = collections.Counter(
        (r.job_id, type(r.event).__name__ + (f"/{r.event.command}/{r.event.reason.value}"
                                              if isinstance(r.event, ev.CommandRejected) else ""))
        for _m, r, _ in recs)
    print("run-events per job:", dict(kinds))
    print(f"scheduler alive: {s1.alive()} after {time.time() - t0:.0f}s "
          f"(exit code {s1.popen.returncode})")
    print("  ", (s1.grep("MessageSizeTooLargeError") or ["-"])[0][:240])
    sizes = record_sizes()
    for k, v in sizes.items():
        print(f"changelog record sizes of {k.decode()}: first {v[:3]} ... last {v[-3:]} "
              f"({len(v)} writes)")
    for attempt in range(2 if not s1.alive() else 0):
        s1 = exp.scheduler("s1")
        t1 = time.time()
        while s1.alive() and time.time() - t1 < 60:
            time.sleep(1)
        print(f"restart #{attempt + 1}: alive={s1.alive()} after {time.time() - t1:.0f}s")
finally:
    exp.stop_all()
