"""The archive's store: one exporter at a time, and a damaged manifest is an ArchiveError
naming it (never an AttributeError or a 500 of the API's lookup). Found by an adversarial run."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.api.readmodel.archived import ArchivedRuns
from services.archive.settings import ArchiveSettings
from services.archive.store import MANIFESTS, ArchiveError, open_store


def test_a_second_exporter_of_a_local_archive_is_refused_while_the_first_holds_it(
    tmp_path: Path,
) -> None:
    store = open_store(ArchiveSettings(archive_dest=str(tmp_path)))
    second = open_store(ArchiveSettings(archive_dest=str(tmp_path)))
    refused = pytest.raises(ArchiveError, match="another exporter is running")
    with store.exclusive(), refused, second.exclusive():
        pass
    with store.exclusive():  # released with the first
        pass


@pytest.mark.parametrize("text", [b"[]", b"null", b"42", b'"x"', b"\xff\xfe", b"{"])
def test_a_damaged_manifest_is_an_archive_error_and_the_lookup_answers_none(
    tmp_path: Path, text: bytes
) -> None:
    settings = ArchiveSettings(archive_dest=str(tmp_path))
    (tmp_path / MANIFESTS).mkdir(parents=True)
    (tmp_path / MANIFESTS / "day=2026-11-01.json").write_bytes(text)
    with pytest.raises(ArchiveError, match=r"corrupt manifest|day=2026-11-01"):
        open_store(settings, create=False).manifests()
    assert ArchivedRuns(settings)("any-run") is None
