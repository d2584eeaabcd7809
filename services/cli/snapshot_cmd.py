"""The ``cronlog snapshot`` command: take one state snapshot now, or one every ``--every`` s.

Exit codes: 0 written (or nothing new to write); 1 it could not be taken or written (the
message says why); 2 bad input or an unreachable cluster.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console

from cronlog.errors import CronlogError

out = Console()
err = Console(stderr=True)


def snapshot(
    every: Annotated[
        float | None,
        typer.Option(
            min=1.0,
            help="Keep running: take one every this many seconds until Ctrl-C/SIGTERM "
            "(what the snapshotter service does; default: take one and exit).",
        ),
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Snapshot every job record with the command offsets it covers (cronlog.snapshots).

    Starts from the newest snapshot and folds only the commands after it, with the replay's
    own fold. `cronlog replay` then starts from it, and retention may delete the commands
    before it (docs/architecture.md, "Retention and snapshots").

    KAFKA_BOOTSTRAP and CRONLOG_TOPIC_PREFIX select the cluster.
    """
    from services.cli.broker_access import use_local_credentials
    from services.snapshotter.__main__ import main as run_service
    from services.snapshotter.take import SnapshotterError, take_snapshot
    from topology.kafka.config import KafkaSettings
    from topology.kafka.log_reader import LogReadError

    use_local_credentials()
    if every is not None:
        import os

        os.environ["CRONLOG_SNAPSHOT_INTERVAL_S"] = str(every)
        run_service()
        return
    try:
        taken = take_snapshot(KafkaSettings())
    except (SnapshotterError, LogReadError) as exc:
        err.print(f"[red]error[/red] {exc}", highlight=False)
        raise typer.Exit(2 if isinstance(exc, LogReadError) else 1) from exc
    except CronlogError as exc:
        err.print(f"[red]snapshot failed[/red] {exc}", highlight=False)
        raise typer.Exit(1) from exc
    m = taken.manifest
    if json_output:
        doc = {
            "written": taken.written,
            "folded": taken.folded,
            "notes": taken.notes,
            "snapshot_id": m.snapshot_id if m else None,
            "base_id": m.base_id if m else None,
            "time_ms": m.time_ms if m else None,
            "commands": m.commands if m else 0,
            "offsets": {str(p): o for p, o in m.offsets.items()} if m else {},
        }
        out.print_json(json.dumps(doc))
        return
    for note in taken.notes:
        out.print(f"note: {note}", highlight=False)
    if m is None:
        out.print("nothing to snapshot: the commands topic is empty", highlight=False)
        return
    offsets = ", ".join(f"{p}:{o}" for p, o in sorted(m.offsets.items()))
    if not taken.written:
        out.print(f"nothing new after snapshot {m.snapshot_id}; offsets {offsets}")
        return
    out.print(
        f"wrote snapshot {m.snapshot_id}: {taken.folded} commands folded after "
        f"{m.base_id or 'offset 0'} ({m.commands} since offset 0); offsets {offsets}",
        highlight=False,
    )
