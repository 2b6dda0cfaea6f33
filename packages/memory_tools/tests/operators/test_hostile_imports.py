"""``import`` of a hand-crafted, hostile export: refused clearly, nothing read outside it.

An export is a directory anyone can write, checksums included (they guard against accidents,
not against its author). Whatever its ``assets.jsonl`` says, ``import`` reads only regular
files inside the export, within the upload limit, and refuses a malformed entry with a clear
message instead of crashing; nothing is saved from a refused entry.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from memory_db import Database, MemorySettings
from memory_db.embedding import LocalEmbedder
from memory_db.repositories import AssetFilter
from memory_db.storage import LocalAssetObjectStore, UrlSigner
from memory_tools import MemoryServices
from memory_tools.errors import InvalidInputFailure
from memory_tools.operations import admin
from memory_tools.operations.export import import_vault

from ..pictures import picture

BOB = "bob@example.com"


def craft(source: Path, entries: list[dict[str, Any]]) -> None:
    """An export in ``source`` whose checksums all agree with ``entries`` (as an author's would)."""
    (source / "originals").mkdir(parents=True, exist_ok=True)
    lines = "".join(json.dumps(entry) + "\n" for entry in entries).encode()
    (source / "assets.jsonl").write_bytes(lines)
    document = {
        "format": "image-memory-vault-export",
        "formatVersion": 1,
        "vault": "Library",
        "projects": [],
        "folders": [],
        "assetsFile": {
            "path": "assets.jsonl",
            "entries": len(entries),
            "bytes": len(lines),
            "sha256": hashlib.sha256(lines).hexdigest(),
        },
    }
    (source / "vault.json").write_text(json.dumps(document))


def entry(asset_id: str, data: bytes, **fields: Any) -> dict[str, Any]:
    return {
        "id": asset_id,
        "file": f"originals/{asset_id}.png",
        "title": asset_id,
        "sha256": hashlib.sha256(data).hexdigest(),
        **fields,
    }


@pytest.fixture
async def services(database: Database, tmp_path: Path) -> MemoryServices:
    await admin.create_identity(database, BOB, 10**9)
    return MemoryServices(
        database=database,
        store=LocalAssetObjectStore(
            tmp_path / "objects", UrlSigner(b"s" * 32), "http://127.0.0.1:9"
        ),
        settings=MemorySettings(memory_data_dir=tmp_path / "data", asset_max_bytes=200_000),
        embedder=LocalEmbedder(),
    )


async def test_import_reads_only_regular_files_inside_the_export_and_refuses_bad_entries(
    services: MemoryServices, database: Database, tmp_path: Path
) -> None:
    # A valid image the export's author knows, lying outside the export (think /etc/...).
    outside = tmp_path / "outside.png"
    secret = picture(7)
    outside.write_bytes(secret)

    def hostile(name: str, original: Path | None, bad: dict[str, Any], data: bytes) -> Path:
        source = tmp_path / name
        craft(source, [entry(name, data, **bad)])
        if original is not None:
            os.symlink(original, source / "originals" / f"{name}.png")
        return source

    big = tmp_path / "big.png"
    big.write_bytes(picture(8) + b"\0" * 300_000)  # a PNG with trailing bytes past the limit
    cases = {
        "symlink": (hostile("symlink", outside, {}, secret), "not a regular file"),
        "huge": (hostile("huge", None, {}, big.read_bytes()), "larger than"),
        "title": (hostile("title", None, {"title": 12}, secret), "title"),
        "tags": (hostile("tags", None, {"tags": 5}, secret), "tags"),
        "project": (hostile("project", None, {"project": "x"}, secret), "project"),
        "ref": (hostile("ref", None, {"sourceRef": ["a"]}, secret), "sourceRef"),
    }
    nul = tmp_path / "nul"
    craft(nul, [entry("nul\u0000", secret)])
    cases["nul"] = (nul, "unexpected file")
    os.link(big, tmp_path / "huge" / "originals" / "huge.png")  # a regular file, too big
    fifo = tmp_path / "fifo"
    craft(fifo, [entry("fifo", secret)])
    os.mkfifo(fifo / "originals" / "fifo.png")  # reading it would block forever
    cases["fifo"] = (fifo, "not a regular file")
    for linked, target in (("vault.json", "/dev/zero"), ("assets.jsonl", "/dev/zero")):
        source = tmp_path / f"linked-{linked}"
        craft(source, [])
        (source / linked).unlink()
        os.symlink(target, source / linked)  # reading it would never end
        cases[f"linked-{linked}"] = (source, f"{linked} is not a regular file")
    for name in ("title", "tags", "project", "ref"):
        (tmp_path / name / "originals" / f"{name}.png").write_bytes(secret)
    for name, (source, message) in cases.items():
        with pytest.raises(InvalidInputFailure, match=message):
            await import_vault(services, BOB, "Library", source)
        async with database.unit_of_work() as uow:
            record = await uow.vaults.resolve(BOB, "Library")
            saved = await uow.assets.list_visible(
                [record.scope], AssetFilter(), newest_first=True, limit=10
            )
        assert saved == [], name


async def test_a_folder_path_that_disagrees_with_its_name_imports_and_reruns(
    services: MemoryServices, tmp_path: Path
) -> None:
    """A folder whose exported path is not its parent's path plus its name (hand-edited, or a
    parent left out) is made where it can be; a second run finds it instead of failing."""
    source = tmp_path / "edited"
    data = picture(9)
    craft(source, [entry("filed", data, project={"id": "p1"}, folder={"id": "f1"})])
    (source / "originals" / "filed.png").write_bytes(data)
    document = json.loads((source / "vault.json").read_text())
    document["projects"] = [{"id": "p1", "name": "Trips"}]
    document["folders"] = [
        {"id": "f1", "projectId": "p1", "parentId": "gone", "name": "Morning", "path": "x/../Morning/"},
        {"id": "f2", "projectId": "p1", "parentId": "gone", "name": "Noon", "path": "Gone/Noon"},
    ]  # fmt: skip
    (source / "vault.json").write_text(json.dumps(document))
    first = await import_vault(services, BOB, "Library", source)
    assert (first.saved, first.folders_created) == (1, 2)
    again = await import_vault(services, BOB, "Library", source)
    assert (again.saved, again.replayed, again.projects_created, again.folders_created) == (
        0, 1, 0, 0,
    )  # fmt: skip
