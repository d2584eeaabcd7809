"""Experiment 7: Invariant 4 -- replay an experiment's command topic from offset 0 into empty
state (offline, with the same BatchFolder the scheduler uses) and compare the run-events it
produces with what the live system published (after dropping exact redeliveries).

    PYTHONPATH=/work/main .venv/bin/python tests/chaos_findings/exp7_replay_determinism.py <tag> [batch]

<tag> is an earlier experiment's prefix without the dot (e.g. brk1, after exp1 ran).
"""

from __future__ import annotations

import collections
import sys

from chaos_common import Exp, read_topic
from cronlog import events as ev
from topology.codec import Codec, decode_event
from topology.due_index import DueIndex
from topology.fold import BatchFolder, Record

TAG = sys.argv[1]
BATCH = int(sys.argv[2]) if len(sys.argv) > 2 else 500
exp = Exp(TAG)
codec = Codec()
table: dict[str, bytes] = {}
due = DueIndex()
due.reset(range(exp.partitions))
folder = BatchFolder(exp.topics, exp.partitions, table.get, due, codec)

cmds = read_topic(exp.settings, exp.topics.commands, max_s=300)
by_part = collections.defaultdict(list)
for m in cmds:
    by_part[m.partition()].append(m)
replayed = collections.defaultdict(list)  # partition -> [(event_id, raw)]
for p, msgs in sorted(by_part.items()):
    msgs.sort(key=lambda m: m.offset())
    for i in range(0, len(msgs), BATCH):
        recs = [Record(m.partition(), m.offset(), m.timestamp()[1], m.key(), m.value() or b"")
                for m in msgs[i:i + BATCH]]
        out = folder.fold(recs)
        for s in out.sends:
            if s.topic == exp.topics.run_events:
                r = decode_event(s.value)
                replayed[p].append((r.event_id, r))
        for job_id, (_ctx, _p, value) in out.writes.items():
            table[job_id] = value

live = collections.defaultdict(list)
seen = set()
for m in sorted(read_topic(exp.settings, exp.topics.run_events, max_s=300),
                key=lambda m: (m.partition(), m.offset())):
    e = decode_event(m.value())
    if e.event_id in seen:
        continue
    seen.add(e.event_id)
    live[m.partition()].append((e.event_id, e))

print(f"commands: {len(cmds)}; live events (deduped): {sum(map(len, live.values()))}; "
      f"replayed: {sum(map(len, replayed.values()))}")
ok = True
for p in sorted(set(live) | set(replayed)):
    a, b = live[p], replayed[p]
    ids_a, ids_b = [x[0] for x in a], [x[0] for x in b]
    if a == b:
        print(f"partition {p}: identical ({len(a)} events)")
        continue
    if len(b) > len(a) and b[:len(a)] == a:
        print(f"partition {p}: identical for all {len(a)} live events; the replay has "
              f"{len(b) - len(a)} more at the end (commands the live fold had not folded yet "
              f"when it was stopped)")
        continue
    ok = False
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    only_live = set(ids_a) - set(ids_b)
    only_replay = set(ids_b) - set(ids_a)
    same_id_diff = [i for i, r in dict(a).items() if i in dict(b) and dict(b)[i] != r]
    print(f"   same event_id, different content: {len(same_id_diff)}")
    print(f"partition {p}: DIFFERENT; live {len(a)} replay {len(b)}; first difference at #{first}; "
          f"only live {len(only_live)}, only replay {len(only_replay)}")
    for label, seq in (("live", a), ("replay", b)):
        for eid, r in seq[first:first + 4]:
            print(f"   {label:6} {eid[:10]} {r.job_id} {type(r.event).__name__} "
                  f"{getattr(r.event, 'scheduled_for', '')} idem={r.idem_key[:40]}")
print("DETERMINISTIC" if ok else "NOT DETERMINISTIC")
