"""``cronlog doctor transactions``: find, and with ``--abort`` end, the transactions that hold
cronlog's partitions or its scheduler group's committed offsets back.

Runs Apache Kafka's own tool (``kafka-transactions.sh``, KIP-664) with java from the jars
``ops/kafka`` fetches (``topology.kafka.transactions``). Exit codes: 0 nothing stuck (or all
ended); 1 stuck transactions found and left (or an abort failed); 2 the tool or the cluster
could not be reached. docs/operations.md, "Hanging transactions".
"""

from __future__ import annotations

import json
import shlex
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

# confluent-kafka and the settings (pydantic) are imported by the command that uses them:
# ``cronlog --help`` stays light (tests/unit/test_cli_client.py).
if TYPE_CHECKING:
    from topology.kafka.transactions import TransactionsTool

out = Console()
err = Console(stderr=True)
doctor = typer.Typer(no_args_is_help=True, help="Look for what holds cronlog back, and end it.")


@doctor.command("transactions")
def transactions(
    older_than: Annotated[
        float,
        typer.Option(min=0.0, help="Report open transactions open at least this long, seconds."),
    ] = 60.0,
    abort: Annotated[
        bool, typer.Option("--abort", help="End what is found (fences and aborts each).")
    ] = False,
    transactional_id: Annotated[
        str | None,
        typer.Option(
            help="Only this transactional.id, whatever its age (a scheduler's log names it)."
        ),
    ] = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print what was found as JSON.")
    ] = False,
) -> None:
    """Find transactions open for ``--older-than`` s that hold a cronlog topic's partition or
    the scheduler group's ``__consumer_offsets`` partition, and hanging ones (a partition's
    open transaction its coordinator does not know, KIP-664); with ``--abort``, end them.

    KAFKA_BOOTSTRAP, CRONLOG_TOPIC_PREFIX and CRONLOG_KAFKA_* select the cluster.
    """
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    from services.cli.broker_access import use_local_credentials
    from services.scheduler.held import OFFSETS_TOPIC
    from topology.kafka.config import KafkaSettings
    from topology.kafka.topics import Topics
    from topology.kafka.transactions import ToolError, TransactionsTool, offsets_partition

    use_local_credentials()
    settings = KafkaSettings()
    topics = Topics.of(settings)
    tool = TransactionsTool(settings)
    try:
        meta = AdminClient(settings.admin_config()).list_topics(timeout=10)
        offsets = meta.topics.get(OFFSETS_TOPIC)
        count = len(offsets.partitions) if offsets is not None and offsets.partitions else 50
        offsets_tp = f"{OFFSETS_TOPIC}-{offsets_partition(topics.scheduler_app, count)}"
        ours = {name for name in meta.topics if name.startswith(f"{settings.topic_prefix}cronlog")}

        def cronlog_tp(tp: str) -> bool:
            return tp == offsets_tp or tp.rpartition("-")[0] in ours

        found_open = [
            t
            for t in tool.open_transactions()
            if any(cronlog_tp(tp) for tp in t.partitions)
            and (
                t.transactional_id == transactional_id  # named: whatever its age
                if transactional_id is not None
                else t.duration_ms >= older_than * 1000
            )
        ]
        found_hanging = (
            [
                h
                for h in tool.hanging(sorted(meta.brokers), max(1, int(older_than // 60)))
                if h.topic in ours or (f"{h.topic}-{h.partition}" == offsets_tp)
            ]
            if transactional_id is None
            else []
        )
    except (ToolError, KafkaException) as exc:
        err.print(f"[red]error[/red] {exc}", highlight=False)
        raise typer.Exit(2) from exc
    rows = [
        {
            "kind": "open",
            "transactional_id": t.transactional_id,
            "producer_id": t.producer_id,
            "producer_epoch": t.producer_epoch,
            "open_for_s": round(t.duration_ms / 1000),
            "timeout_s": round(t.timeout_ms / 1000),
            "partitions": list(t.partitions),
            "kafka_command": shlex.join(tool.command(*t.abort_args())),
            "args": t.abort_args(),
        }
        for t in found_open
    ] + [
        {
            "kind": "hanging",
            "producer_id": h.producer_id,
            "producer_epoch": h.producer_epoch,
            "open_for_s": h.duration_min * 60,
            "partitions": [f"{h.topic}-{h.partition}"],
            "start_offset": h.start_offset,
            "kafka_command": shlex.join(tool.command(*h.abort_args())),
            "args": h.abort_args(),
        }
        for h in found_hanging
    ]
    failed = _report_and_abort(tool, rows, abort, json_output)
    if failed or (rows and not abort):
        raise typer.Exit(1)


def _report_and_abort(
    tool: TransactionsTool, rows: list[dict[str, object]], abort: bool, as_json: bool
) -> int:
    """Print each found transaction (and end it with ``abort``); return the aborts that failed."""
    from topology.kafka.transactions import ToolError

    failed = 0
    for row in rows:
        args = [str(a) for a in row.pop("args")]  # type: ignore[attr-defined]
        if abort:
            try:
                tool.run(*args)
                row["aborted"] = True
            except ToolError as exc:
                row["aborted"], row["error"] = False, str(exc)
                failed += 1
    if as_json:
        out.print_json(json.dumps(rows))
        return failed
    if not rows:
        out.print("no stuck transaction holds cronlog's partitions or offsets", highlight=False)
    for row in rows:
        who = row.get("transactional_id") or f"producer {row['producer_id']}"
        out.print(
            f"{row['kind']} transaction {who} (producer id {row['producer_id']}, epoch "
            f"{row['producer_epoch']}) open for {row['open_for_s']} s on "
            f"{', '.join(row['partitions'])}",  # type: ignore[arg-type]
            highlight=False,
        )
        if "aborted" in row:
            state = "ended" if row["aborted"] else f"[red]not ended[/red]: {row.get('error')}"
            out.print(f"  {state}", highlight=False)
        else:
            out.print(f"  end it: {row['kafka_command']}", highlight=False)
    return failed
