"""Experiment 4: garbage on cronlog.commands; each must be dead-lettered (or harmless) and the
scheduler must keep folding (a canary job fires every 2 s throughout).

    PYTHONPATH=/work/main .venv/bin/python tests/chaos_findings/exp4_garbage_commands.py [tag] [cases]

cases: comma-separated names (default: all but the fatal ones, which run last and alone):
random,empty,null,huge900k,wrongpart,keymismatch,unknownbody,tickkey,confluent,trailing,
emptyjob,badtime, and the fatal ones: huge999k, bigstate
"""

from __future__ import annotations

import io
import os
import struct
import sys
import time
import uuid
from datetime import timedelta

from fastavro import schemaless_writer

from chaos_common import Exp, analyze, dead_letters, run_events
from cronlog import commands as cmd
from cronlog import events as ev
from cronlog.model import JobSpec, Schedule, ScheduleKind
from topology.codec import Codec, encode_command
from topology.partitioning import partition_for

TAG = sys.argv[1] if len(sys.argv) > 1 else "brk7"
DEFAULT = ("random,empty,null,huge900k,wrongpart,keymismatch,unknownbody,tickkey,confluent,"
           "trailing,emptyjob,badtime")
CASES = (sys.argv[2] if len(sys.argv) > 2 else DEFAULT).split(",")
exp = Exp(TAG)
exp.ensure()
codec = Codec()
kind = codec._kinds[cmd.Envelope]  # header + schema of cronlog.Command


def zz(n: int) -> bytes:  # Avro zigzag varint
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def avro_str(s: str) -> bytes:
    b = s.encode()
    return zz(len(b)) + b


def reg(job_id: str, argv: tuple[str, ...] = ("true",)) -> bytes:
    spec = JobSpec(name=job_id[:50] or "x", schedule=Schedule(ScheduleKind.MANUAL), command=argv)
    return encode_command(cmd.Envelope(uuid.uuid4().hex, job_id, cmd.RegisterJob(spec)))


def big_producer():
    from confluent_kafka import Producer
    return Producer(exp.settings.producer_config(**{"message.max.bytes": 1_048_000}))


def other_partition(key: bytes) -> int:
    return (partition_for(key, exp.partitions) + 1) % exp.partitions


def case(name: str) -> tuple[bytes | None, bytes | None, int | None, str]:
    """(key, value, partition, expectation)."""
    if name == "random":
        return b"g-random", os.urandom(300), None, "dead letter: bad magic"
    if name == "empty":
        return b"g-empty", b"", None, "dead letter: empty"
    if name == "null":
        return b"g-null", None, None, "dead letter (tombstone)"
    if name == "huge900k":
        return b"g-huge", b"\xc3\x01" + os.urandom(900_000), None, "dead letter (unknown fp)"
    if name == "huge999k":
        # ~1,020,000 bytes: accepted by the broker (max.message.bytes 1048588) and by e.g. a Java
        # producer (max.request.size 1048576); the dead letter wrapping it is bigger still.
        return b"g-huge2", b"\xc3\x01" + os.urandom(1_020_000), None, \
            "dead letter -- but the dead letter itself is > message.max.bytes"
    if name == "wrongpart":
        return b"g-wrongpart", reg("g-wrongpart"), other_partition(b"g-wrongpart"), \
            "dead letter or forwarded: wrong partition"
    if name == "keymismatch":
        return b"g-key-other", reg("g-keymismatch"), partition_for(b"g-keymismatch", 4), \
            "dead letter: key != job_id"
    if name == "unknownbody":
        body = avro_str(uuid.uuid4().hex) + avro_str("g-unknown") + zz(42)
        return b"g-unknown", kind.header + body, None, "dead letter: union index"
    if name == "tickkey":
        v = encode_command(cmd.Envelope(uuid.uuid4().hex, "g-tickkey", cmd.Tick()))
        return b"g-tickkey", v, None, "harmless or dead letter"
    if name == "confluent":
        return b"g-confluent", b"\x00\x00\x00\x00\x01" + b"\x02x", None, "dead letter: no registry"
    if name == "trailing":
        return b"g-trailing", reg("g-trailing") + b"\x00\x00", None, "dead letter: trailing"
    if name == "emptyjob":
        return b"", reg(""), None, "dead letter? (job_id empty)"
    if name == "badtime":
        # CompleteTask whose started_at is far beyond datetime's range
        env = cmd.Envelope(uuid.uuid4().hex, "g-badtime", cmd.ClaimTask("r", "main", 1, "w"))
        raw = encode_command(env)
        # rebuild by hand: ... body index 9 (CompleteTask) with started_at = 2**62 ms
        body = (avro_str(uuid.uuid4().hex) + avro_str("g-badtime") + zz(9) + avro_str("r")
                + avro_str("main") + zz(1) + zz(1) + avro_str("w") + b"\x01" + b"\x00" + b"\x00"
                + avro_str("") + zz(2 ** 62) + zz(2 ** 62))
        return b"g-badtime", kind.header + body, None, "dead letter: timestamp out of range"
    if name == "bigstate":
        # a valid RegisterJob whose Avro is ~200 KB but whose JSON state record is ~1.2 MB
        return b"g-bigstate", reg("g-bigstate", ("echo", "\x01" * 200_000)), None, \
            "registered or rejected; never a stuck scheduler"
    raise SystemExit(f"unknown case {name}")


try:
    s1 = exp.scheduler("s1")
    time.sleep(8)
    canary = JobSpec(name="canary", schedule=Schedule(ScheduleKind.CRON, "*/2 * * * * *"),
                     command=("true",))
    exp.send(cmd.Envelope(uuid.uuid4().hex, "canary", cmd.RegisterJob(canary)))
    # a canary on every partition
    canaries = []
    i = 0
    while len({partition_for(c.encode(), 4) for c in canaries}) < 4:
        c = f"canary{i}"
        i += 1
        if partition_for(c.encode(), 4) not in {partition_for(x.encode(), 4) for x in canaries}:
            canaries.append(c)
            exp.send(cmd.Envelope(uuid.uuid4().hex, c, cmd.RegisterJob(canary)))
    time.sleep(6)
    sent = {}
    for name in CASES:
        key, value, part, expect = case(name)
        try:
            if value is not None and len(value) > 990_000:
                exp._producer = big_producer()
            exp.send_raw(key, value, part)
            sent[name] = (key, part, expect, time.time())
            print(f"sent {name}: key={key!r} value={'None' if value is None else len(value)} "
                  f"bytes partition={part} (expect: {expect})", flush=True)
        except Exception as e:
            print(f"could not send {name}: {e!r}")
        time.sleep(3)
    time.sleep(10)
    alive = s1.alive()
    t_end = time.time()
    print("scheduler alive at the end:", alive, "exit code:", None if alive else s1.popen.returncode)
    s1.stop()
    dls = dead_letters(exp)
    print(f"\n{len(dls)} dead letters:")
    for d in dls:
        print(f"  key={d.key!r:.40} p{d.partition}@{d.offset} {d.error_type}: {d.reason[:150]}")
    recs = run_events(exp)
    an = analyze(recs)
    print("\nrun-events types:", an["types"], "rejected:", an["rejected"])
    for c in canaries:
        ticks = sorted(r.event.scheduled_for.timestamp() for _m, r, _ in recs
                       if r.job_id == c and isinstance(r.event, ev.RunScheduled))
        gaps = [round(b - a) for a, b in zip(ticks, ticks[1:]) if b - a > 2]
        print(f"canary {c} (p{partition_for(c.encode(), 4)}): {len(ticks)} runs, last "
              f"{t_end - ticks[-1]:.0f}s before the end, gaps > 2s: {gaps}")
    odd = [r for _m, r, _ in recs if r.job_id.startswith("g-") or r.job_id == ""]
    for r in odd:
        print(f"  event for garbage job {r.job_id!r}: {type(r.event).__name__}")
    errs = [l for l in s1.log.read_text(errors="replace").splitlines()
            if "Traceback" in l or "ERROR" in l or "CRITICAL" in l or "crashed" in l.lower()]
    print("\nscheduler log errors:", *errs[:12], sep="\n  ")
finally:
    exp.stop_all()
