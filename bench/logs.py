"""Benchmark: task-log throughput, worker sink -> cronlog.logs -> the API's log read model.

Usage: ``.venv/bin/python bench/logs.py [--mib 64] [--attempts 4]`` (needs a broker:
``KAFKA_BOOTSTRAP`` or the local one from ``ops/kafka start``).

``--attempts`` sinks (as if that many attempts ran at once) each write ``--mib / attempts``
MiB in 8 KiB writes (the pipe reader's pace is not the limit here) through one LogShipper;
a LogModel consumes the topic into RocksDB. Printed: ship rate (writes until the producer's
queue is delivered) and end-to-end rate (first write until every log reads complete).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from services.api.routes.logs import LogModel  # noqa: E402
from services.worker.logsink import AttemptRef, LogShipper  # noqa: E402
from topology.kafka.bootstrap import ensure_topics  # noqa: E402
from topology.kafka.config import KafkaSettings  # noqa: E402
from topology.kafka.topics import Topics  # noqa: E402


def main() -> None:
    """Run the benchmark and print its figures."""
    args = argparse.ArgumentParser(description=__doc__)
    args.add_argument("--mib", type=int, default=64)
    args.add_argument("--attempts", type=int, default=4)
    opts = args.parse_args()
    settings = KafkaSettings(topic_prefix=f"bench{uuid.uuid4().hex[:6]}.", partitions=4)
    ensure_topics(settings)
    per = opts.mib * 1024 * 1024 // opts.attempts
    block = os.urandom(8192)
    with tempfile.TemporaryDirectory() as tmp:
        model = LogModel(settings, Path(tmp) / "logs")
        model.start()
        shipper = LogShipper(settings, Topics.of(settings).logs, cap_bytes=per, flush_s=0.5)
        refs = [AttemptRef("bench", f"run-{i}", "main", 1, 1, "w") for i in range(opts.attempts)]
        t0 = time.monotonic()
        sinks = [shipper.open(ref) for ref in refs]
        for _ in range(per // len(block)):
            for sink in sinks:
                sink.write(block)
        for sink in sinks:
            sink.close()
        shipper.producer.flush(60)
        shipped = time.monotonic() - t0
        while not all(model.attempt_log(r.run_id, "main", 1).complete for r in refs):
            time.sleep(0.05)
        seen = time.monotonic() - t0
        shipper.close()
        model.stop()
    total = per * opts.attempts / 2**20
    print(
        f"{total:.0f} MiB in {opts.attempts} logs: shipped in {shipped:.2f} s "
        f"({total / shipped:.0f} MiB/s); all complete in the API's model after {seen:.2f} s "
        f"({total / seen:.0f} MiB/s end to end)"
    )


if __name__ == "__main__":
    main()
