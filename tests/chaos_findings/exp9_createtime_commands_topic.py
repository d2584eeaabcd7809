"""Experiment 9: the topic bootstrap does not check message.timestamp.type of an existing
commands topic; with CreateTime, one producer's clock (or a deliberate timestamp) moves a job's
fold clock into the future for good.

The commands topic is pre-created (as infrastructure-as-code often does) with the default
CreateTime. ensure_topics accepts it (it checks partition counts only) and the scheduler runs.
One PauseJob+ResumeJob pair stamped 50 minutes ahead (brokers refuse > 1 h by default) moves the job clock 50 min forward
(now = max(clock, record time) never moves back): the every-10-seconds job stops firing for 50 minutes
-- its cursor was recomputed from the future now.

    PYTHONPATH=/work/main .venv/bin/python tests/chaos_findings/exp9_createtime_commands_topic.py [tag]
"""

from __future__ import annotations

import sys
import time
import uuid

from confluent_kafka.admin import AdminClient, NewTopic

from chaos_common import Exp, run_events
from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.model import JobSpec, Schedule, ScheduleKind
from topology.bootstrap import ensure_topics
from topology.codec import encode_command

TAG = sys.argv[1] if len(sys.argv) > 1 else "brk81"
exp = Exp(TAG)
admin = AdminClient({"bootstrap.servers": exp.bootstrap})
fut = admin.create_topics([NewTopic(exp.topics.commands, 4, 1)])  # broker default: CreateTime
fut[exp.topics.commands].result(30)
print("pre-created", exp.topics.commands, "with default configs (CreateTime);",
      "ensure_topics created:", ensure_topics(exp.settings))
try:
    s1 = exp.scheduler("s1")
    time.sleep(10)
    spec = JobSpec(name="every10", schedule=Schedule(ScheduleKind.CRON, "*/10 * * * * *"),
                   command=("true",))
    exp.send(cmd.Envelope(uuid.uuid4().hex, "victim", cmd.RegisterJob(spec)))
    time.sleep(25)
    future_ms = int((time.time() + 3000) * 1000)
    p = exp.producer()
    for c in (cmd.PauseJob(), cmd.ResumeJob()):
        p.produce(exp.topics.commands, key=b"victim",
                  value=encode_command(cmd.Envelope(uuid.uuid4().hex, "victim", c)),
                  timestamp=future_ms)
    p.flush(10)
    t_skew = time.time()
    print("sent PauseJob + ResumeJob stamped 50 min in the future", flush=True)
    time.sleep(40)
    exp.stop_all()
    recs = run_events(exp)
    before = [r.event.scheduled_for for _m, r, _ in recs if r.job_id == "victim"
              and isinstance(r.event, ev.RunScheduled) and r.event.scheduled_for.timestamp() < t_skew]
    after = [r.event.scheduled_for for _m, r, _ in recs if r.job_id == "victim"
             and isinstance(r.event, ev.RunScheduled) and r.event.scheduled_for.timestamp() >= t_skew]
    resumed = [r.event.next_fire_at for _m, r, _ in recs if isinstance(r.event, ev.JobResumed)]
    print(f"runs before the skewed commands: {len(before)}; in the 40 s after: {len(after)} "
          f"(expected ~4); JobResumed.next_fire_at = {resumed}")
finally:
    exp.stop_all()
