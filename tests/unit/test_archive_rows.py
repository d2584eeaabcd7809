"""The archive's row mapping, manifests and local store (services/archive/), no broker."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from cronlog import events as ev
from services.archive.rows import (
    SCHEMA,
    UNKNOWN_TENANT,
    Position,
    learn_tenant,
    tenant_of,
    to_row,
    to_table,
    undecodable_row,
)
from services.archive.settings import ArchiveSettings
from services.archive.store import ArchiveError, FileEntry, Manifest, Store, open_store, tmp_path
from tests.archive_events import registered, run_life

TICK = datetime(2026, 3, 1, 23, 59, 59, 998000, tzinfo=UTC)
DAY = date(2026, 3, 1)


def test_a_run_life_maps_to_typed_columns_and_the_run_state_each_event_sets() -> None:
    life = run_life("j1", TICK)
    rows = [to_row(r, "team-a", Position(2, 10 + i), DAY) for i, r in enumerate(life)]
    assert [(r["event_type"], r["state"], r["task"], r["attempt"]) for r in rows] == [
        ("RunScheduled", "scheduled", None, None),
        ("TaskReady", "ready", "main", 1),
        ("TaskClaimed", "running", "main", 1),
        ("TaskSucceeded", None, "main", 1),
        ("RunSucceeded", "succeeded", None, None),
    ]
    first = rows[0]
    assert first["run_id"] == life[0].event.run_id  # type: ignore[union-attr]
    assert first["job_id"] == "j1"
    assert first["tenant"] == "team-a"
    assert first["scheduled_for"] == TICK
    assert first["at"] == TICK
    assert (first["partition"], first["offset"], first["day"]) == (2, 10, DAY)
    assert first["event_id"] == life[0].event_id
    assert rows[3]["scheduled_for"] is None  # TaskSucceeded carries no tick


def test_event_json_keeps_the_whole_event_durations_in_ms_instants_iso() -> None:
    claimed = run_life("j1", TICK)[2]
    row = to_row(claimed, "team-a", Position(0, 0), DAY)
    doc = json.loads(row["event_json"])
    assert doc["type"] == "TaskClaimed"
    assert doc["event_id"] == claimed.event_id
    assert doc["at"] == "2026-03-02T00:00:00.000Z"  # tick + 2 ms: past midnight
    assert doc["body"]["lease_ttl_ms"] == 30_000
    assert doc["body"]["timeout_ms"] == 300_000
    assert doc["body"]["command"] == ["true"]
    assert doc["body"]["worker_id"] == "w1"
    assert "lease_ttl" not in doc["body"]


def test_an_unset_duration_is_keyed_with_ms_too_as_its_avro_field() -> None:
    doc = json.loads(to_row(registered("j1", "t", TICK), "t", Position(0, 0), DAY)["event_json"])
    spec = doc["body"]["spec"]
    assert spec["run_timeout_ms"] is None and "run_timeout" not in spec
    assert spec["schedule"]["interval_ms"] is None and "interval" not in spec["schedule"]
    assert spec["timeout_ms"] == 3_600_000


def test_the_tenant_comes_from_the_jobs_registration_then_the_event_then_unknown() -> None:
    tenants: dict[str, str] = {}
    reg = registered("j1", "team-a", TICK)
    assert learn_tenant(reg, tenants) == "team-a"
    assert learn_tenant(reg, tenants) is None  # already known: nothing new for the manifest
    run = run_life("j1", TICK)[0]
    assert tenant_of(run, tenants) == "team-a"
    assert tenant_of(run_life("j2", TICK)[0], tenants) == UNKNOWN_TENANT
    asked = ev.RunEvent(
        event_id="e",
        job_id="j3",
        at=TICK,
        idem_key="k",
        index=0,
        event=ev.TenantSlotsAsked(tenant="team-c", count=1, waiting=1),
    )
    assert tenant_of(asked, tenants) == "team-c"


def test_rows_round_trip_through_parquet_with_their_types(tmp_path: Path) -> None:
    rows = [to_row(r, "t", Position(1, i), DAY) for i, r in enumerate(run_life("j1", TICK))]
    rows.append(undecodable_row(b"\x00bad", "bad magic", Position(1, 9), TICK, DAY))
    pq.write_table(to_table(rows), tmp_path / "x.parquet")
    back = pq.read_table(tmp_path / "x.parquet")
    assert back.schema.equals(SCHEMA)
    assert back.to_pylist() == rows
    last = back.to_pylist()[-1]
    assert (last["event_type"], last["event_id"], last["tenant"]) == (
        "_undecodable",
        "1@9",
        UNKNOWN_TENANT,
    )
    assert json.loads(last["event_json"])["value_hex"] == "00626164"


def test_a_manifest_round_trips_and_a_corrupt_one_is_named(tmp_path: Path) -> None:
    m = Manifest(
        day=DAY,
        files=[FileEntry("day=2026-03-01/tenant=t/part-00000.parquet", "t", 5, 1234)],
        offsets={0: (3, 9), 2: (0, 4)},
        next_offsets={0: 10, 1: 0, 2: 5},
        jobs={"j1": "t"},
    )
    assert Manifest.from_json(m.to_json()) == m
    assert m.rows == 5
    with pytest.raises(ArchiveError, match="corrupt manifest: KeyError"):
        Manifest.from_json(json.dumps({"version": 1, "day": "2026-03-01"}))
    with pytest.raises(ArchiveError, match="version 7"):
        Manifest.from_json(json.dumps({"version": 7}))


def test_the_local_store_lists_committed_days_only_and_clears_leftovers(tmp_path: Path) -> None:
    store = open_store(ArchiveSettings(archive_dest=str(tmp_path / "arch")))
    assert store.manifests() == []
    path = "day=2026-03-01/tenant=t/part-00000.parquet"
    (tmp_path / "arch" / tmp_path_of(path)).parent.mkdir(parents=True)
    (tmp_path / "arch" / tmp_path_of(path)).write_bytes(b"12345")
    assert store.commit_file(path) == 5
    assert store.manifests() == []  # a file without a manifest is not committed
    store.clear_day(DAY)
    assert not (tmp_path / "arch" / path).exists()
    m = Manifest(DAY, [], {}, {0: 0})
    store.write_manifest(m)
    assert store.manifests() == [m]
    assert sorted(p.name for p in (tmp_path / "arch" / "_manifests").iterdir()) == [
        "day=2026-03-01.json"
    ]


def tmp_path_of(path: str) -> str:
    return tmp_path(path)


def test_settings_take_the_hot_window_in_seconds_or_iso_and_refuse_nonsense() -> None:
    assert ArchiveSettings(archive_hot_window="5").archive_hot_window == timedelta(seconds=5)
    assert ArchiveSettings(archive_hot_window="P30D").archive_hot_window == timedelta(days=30)
    assert ArchiveSettings().archive_hot_window == timedelta(days=30)
    with pytest.raises(ValidationError, match="archive_hot_window"):
        ArchiveSettings(archive_hot_window="0")
    with pytest.raises(ValidationError, match="names no bucket"):
        ArchiveSettings(archive_dest="s3://")


def test_an_s3_destination_is_a_bucket_and_prefix_on_pyarrows_s3_filesystem() -> None:
    store = open_store(
        ArchiveSettings(
            archive_dest="s3://history/cronlog/",
            archive_s3_endpoint="http://127.0.0.1:9",
            archive_s3_access_key="k",
            archive_s3_secret_key="s",  # noqa: S106
        )
    )
    assert isinstance(store, Store)
    assert store.fs.type_name == "s3"
    assert store.root == "history/cronlog"
