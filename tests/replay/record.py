"""Record the golden command logs: ``python -m tests.replay.record [NAME ...]``.

Drives each scenario of ``scenarios.py`` through ``sim.Sim`` and writes ``logs/<name>.jsonl``
with the records written in the scenario's schema version (and, for an ``old_shape`` scenario,
its definitions as the code before issue 23 wrote them). Run it only to add a log (or to
re-record one on purpose); the logs are the fixed input the golden test folds, and
``golden.py --regen`` writes their expectations.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Callable
from functools import cache

from fastavro import schemaless_writer
from fastavro.schema import load_schema

from cronlog.commands import Envelope
from tests.old_shape import old_shape_writer
from tests.replay.golden import LOGS, write_log
from tests.replay.scenarios import SCENARIOS, Scenario
from tests.replay.sim import Sim
from topology.wire.avro_mapping import plan_for
from topology.wire.codec import SCHEMA_DIR, SINGLE_OBJECT_MAGIC, schema_fingerprint

CURRENT = "v4"
"""The version the current ``schemas/*.avsc`` are (written with the default codec)."""


@cache
def writer_for(version: str) -> Callable[[Envelope], bytes] | None:
    """Return an encoder of commands with the ``cronlog.Command`` schema of ``version``
    (single-object encoding, that version's fingerprint), or None for the current one."""
    if version == CURRENT:
        return None
    schema = load_schema(str(SCHEMA_DIR / "history" / version / "cronlog.Command.avsc"))
    header = SINGLE_OBJECT_MAGIC + schema_fingerprint(schema)
    plan = plan_for(Envelope)

    def encode(env: Envelope) -> bytes:
        out = io.BytesIO()
        out.write(header)
        schemaless_writer(out, schema, plan.to_avro(env))  # fields the version lacks are left out
        return out.getvalue()

    return encode


def record(scenario: Scenario) -> int:
    """Drive ``scenario`` and write its log; return the number of records."""
    encode = writer_for(scenario.version)
    if scenario.old_shape:
        folder = SCHEMA_DIR / "history" / scenario.version
        encode = old_shape_writer(
            (folder if folder.exists() else SCHEMA_DIR) / "cronlog.Command.avsc"
        )
    sim = Sim(partitions=scenario.partitions, now_ms=0, encode=encode)
    scenario.drive(sim)
    doc = (scenario.drive.__doc__ or "").split("\n\n")[0]
    shape = {"definitions": "old shape (before issue 23)"} if scenario.old_shape else {}
    write_log(
        LOGS / f"{scenario.name}.jsonl",
        {
            "scenario": scenario.name,
            "schema_version": scenario.version,
            "partitions": scenario.partitions,
            "description": " ".join(doc.split()),
            **shape,
            **({"same_as": scenario.same_as} if scenario.same_as else {}),
        },
        sim.records,
    )
    return len(sim.records)


def main(argv: list[str]) -> int:
    """Record the named scenarios (default: all)."""
    LOGS.mkdir(exist_ok=True)
    for scenario in SCENARIOS:
        if not argv or scenario.name in argv:
            print(f"{scenario.name}: {record(scenario)} records")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
