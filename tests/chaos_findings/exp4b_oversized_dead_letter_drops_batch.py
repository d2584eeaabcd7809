"""Experiment 4b: one oversized garbage record crashes the fold agent and drops its whole batch.

A record of ~1,020,000 bytes is legal on cronlog.commands (broker max.message.bytes 1048588; a
Java producer's max.request.size is 1048576). It does not decode, so the fold dead-letters it;
the dead letter wraps the whole value and exceeds the Delivery producer's message.max.bytes
(1,000,000): ``Producer.produce`` raises KafkaException(MSG_SIZE_TOO_LARGE), which
``Delivery._produce_all`` does not catch (only BufferError), so it escapes the agent. faust's
supervisor restarts the agent and the batch's offsets are acked anyway:

- the garbage record is silently dropped (no dead letter) -- Invariant 7;
- every other command folded in the same batch loses its state write, while the events already
  queued in librdkafka before the exception are still published: "ghost" jobs whose
  JobRegistered is on run-events but which the fold does not know (they never fire; later
  commands for them are rejected unknown_job) -- Invariant 6 (events without state; state never
  written).

    PYTHONPATH=/work/main .venv/bin/python tests/chaos_findings/exp4b_oversized_dead_letter_drops_batch.py [tag]
"""

from __future__ import annotations

import collections
import os
import sys
import time
import uuid

from confluent_kafka import Producer

from chaos_common import Exp, dead_letters, run_events
from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.model import JobSpec, Schedule, ScheduleKind
from topology.codec import encode_command
from topology.partitioning import partition_for

TAG = sys.argv[1] if len(sys.argv) > 1 else "brk10"
exp = Exp(TAG)
exp.ensure()
try:
    s1 = exp.scheduler("s1")
    time.sleep(10)
    spec = JobSpec(name="every2", schedule=Schedule(ScheduleKind.CRON, "*/2 * * * * *"),
                   command=("true",))
    jobs = [f"b{i:03d}" for i in range(200)]
    jobs = [j for j in jobs if partition_for(j.encode(), 4) != 0]
    big = Producer(exp.settings.producer_config(**{"message.max.bytes": 1_048_000,
                                                   "linger.ms": 200}))
    s1.signal(__import__("signal").SIGSTOP)  # let everything pile up so it is fetched together
    big.produce(exp.topics.commands, key=b"g-huge", value=b"\xc3\x01" + os.urandom(1_020_000),
                partition=0)
    for j in jobs:
        big.produce(exp.topics.commands, key=j.encode(),
                    value=encode_command(cmd.Envelope(uuid.uuid4().hex, j, cmd.RegisterJob(spec))))
    big.flush(10)
    time.sleep(1)
    s1.signal(__import__("signal").SIGCONT)
    print(f"sent one 1,020,002-byte garbage record on partition 0 and {len(jobs)} RegisterJob "
          f"on partitions 1-3 while the scheduler was paused (SIGSTOP 1 s), so one fetch "
          f"returns them together", flush=True)
    time.sleep(20)
    s1.stop()
    recs = run_events(exp)
    reg = {r.job_id for _m, r, _ in recs if isinstance(r.event, ev.JobRegistered)}
    runs = collections.Counter(r.job_id for _m, r, _ in recs if isinstance(r.event, ev.RunScheduled))
    ghosts = [j for j in jobs if j in reg and runs[j] == 0]
    lost = [j for j in jobs if j not in reg]
    firing = [j for j in jobs if runs[j] > 0]
    print(f"JobRegistered published for {len(reg & set(jobs))}/{len(jobs)}; firing: {len(firing)}; "
          f"ghosts (registered on run-events, never fire): {len(ghosts)}; "
          f"commands lost without any event: {len(lost)}")
    dls = dead_letters(exp)
    print(f"dead letters: {len(dls)}", [d.reason[:80] for d in dls])
    print("scheduler log:", *[l[:200] for l in s1.grep("Crashed") + s1.grep("Restarting dead")],
          sep="\n  ")
finally:
    exp.stop_all()
