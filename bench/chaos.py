"""The long chaos run: kills, broker restarts and bad input against a broker of its own.

    .venv/bin/python bench/chaos.py [--duration 900] [--jobs 500] [--kills 30] \\
        [--schedulers 2] [--workers 3] [--broker-restarts 1] [--seed N]

    # a replicated cluster: 3 nodes, one killed with -9 (the transaction coordinator) 3 times
    .venv/bin/python bench/chaos.py --nodes 3 --broker-kills 3 --broker-restarts 0 \\
        --duration 300 --kills 6 --jobs 300

Starts a private broker (``ops/kafka`` with a temporary CRONLOG_KAFKA_HOME, a free port), or
with ``--nodes 3`` a private 3-node cluster (free ports in 31000-32767), so the shared one is never
touched; deletes it at the end unless ``--keep``. Prints what was done, the failover figures,
the pause each broker kill caused (longest run-event gap, max trigger lag, against the same
figures before the kill) and every count checked from run-events; exit 1 when a count is not
zero or ``replay --verify`` fails. Harness: ``tests/chaos/harness.py``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.chaos.harness import ChaosConfig, PrivateBroker, run_chaos


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, default=900, help="seconds of chaos")
    p.add_argument("--jobs", type=int, default=500)
    p.add_argument("--kills", type=int, default=30, help="kill -9s of schedulers/workers")
    p.add_argument("--schedulers", type=int, default=2)
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--partitions", type=int, default=6)
    p.add_argument("--broker-restarts", type=int, default=1, help="stops/starts of the broker")
    p.add_argument("--nodes", type=int, default=1, help="broker nodes (3: a replicated cluster)")
    p.add_argument(
        "--broker-kills", type=int, default=0, help="kill -9s of one node (needs --nodes 3)"
    )
    p.add_argument(
        "--broker-down", type=float, default=8.0, help="seconds a stopped/killed broker stays down"
    )
    p.add_argument("--bad-records", type=int, default=3, help="of each bad kind")
    p.add_argument(
        "--session-timeout",
        type=float,
        default=10.0,
        help="schedulers' consumer-group session timeout, seconds",
    )
    p.add_argument("--settle", type=float, default=30.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--port", type=int, default=None, help="broker port (default: a free one)")
    p.add_argument("--keep", action="store_true", help="keep the broker and the temp dir")
    args = p.parse_args()
    cfg = ChaosConfig(
        duration_s=args.duration,
        jobs=args.jobs,
        kills=args.kills,
        schedulers=args.schedulers,
        workers=args.workers,
        partitions=args.partitions,
        broker_restarts=args.broker_restarts,
        broker_kills=args.broker_kills,
        broker_down_s=args.broker_down,
        bad_records=args.bad_records,
        session_timeout_s=args.session_timeout,
        settle_s=args.settle,
    )
    if args.seed is not None:
        cfg.seed = args.seed
    tmp = Path(tempfile.mkdtemp(prefix="cronlog-chaos-"))
    broker = PrivateBroker(tmp / "kafka", args.port, nodes=args.nodes)
    print(f"private broker {broker.bootstrap}, files under {tmp}", flush=True)
    try:
        report = run_chaos(cfg, broker, tmp, say=lambda s: print(s, flush=True))
    finally:
        if not args.keep:
            broker.destroy()
    print("\n".join(report.lines()))
    if report.replay_rc != 0:
        print(report.replay_output)
    bad = any(report.audit.failures().values()) or report.replay_rc != 0 or report.crashed
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
