"""``memory-server backup`` and ``restore``, as the CLI parses and runs them.

A server's database (reached through ``MEMORY_DATABASE_URL``) and local store hold two owners'
images in several vaults, one of them in the trash. ``backup`` writes them to a directory;
``restore`` builds a new embedded data directory from it; a runtime opened there finds every
image again, with the same bytes, the same rows and the same keys. A tampered backup is refused
before anything is written, by a real ``memory-server`` process (exit status and stderr).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fastmcp import Client
from pydantic import SecretStr
from sqlalchemy import text

from memory_db import Database, MemorySettings, open_runtime
from memory_db.dumps import DumpSnapshot, database_target, pg_dump, pg_tool
from memory_db.embedding import LocalEmbedder
from memory_db.storage import LocalAssetObjectStore, UrlSigner
from memory_db.testing.s3_peers import S3Peer
from memory_tools import ConflictFailure, MemoryServices, build_memory_server
from memory_tools.access import Caller
from memory_tools.errors import InvalidInputFailure
from memory_tools.ingest.save import AssetSaver, SaveRequest
from memory_tools.jobs.worker import WorkerConfig
from memory_tools.operations import admin
from memory_tools.operations.backup import create_backup, json_bytes
from memory_tools.operations.backup_key import (
    SIGNATURE,
    load_or_create_backup_key,
    signature_document,
)
from memory_tools.serving.job_worker import job_worker
from memory_tools.serving.operator_commands import add_operator_parsers, operator_command

from ..pictures import b64, picture
from ..tool_calls import call

ALICE = "alice@example.com"
BOB = "bob@example.com"
FAST = WorkerConfig(batch_size=8, lease_seconds=30, heartbeat_seconds=10, poll_seconds=0.2)
COUNTED = (
    "mem_identities",
    "mem_api_keys",
    "mem_vaults",
    "mem_asset_projects",
    "mem_asset_folders",
    "mem_asset_objects",
    "mem_assets",
    "mem_asset_embedding_jobs",
    "mem_provenance",
)


def cli(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``memory-server ARGV`` as its own process."""
    return subprocess.run(
        [sys.executable, "-m", "memory_server", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def environment(data_dir: Path, database_url: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMORY_", "ASSET_"))}
    env["MEMORY_DATA_DIR"] = str(data_dir)
    env["MEMORY_LOG_FORMAT"] = "json"
    if database_url is not None:
        env["MEMORY_DATABASE_URL"] = database_url
    return env


def object_files(root: Path) -> dict[str, str]:
    """SHA-256 of every object file under a local store's root (sidecars left out)."""
    return {
        path.relative_to(root).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in root.rglob("*")
        if path.is_file() and not path.name.endswith(".json") and not path.name.startswith(".")
    }


def printed_json(out: str) -> Any:
    """The JSON object a command printed (log lines share stdout in tests)."""
    lines = out.splitlines()
    start, end = lines.index("{"), len(lines) - lines[::-1].index("}")
    return json.loads("\n".join(lines[start:end]))


def listed_objects(backup: Path) -> set[tuple[str, str]]:
    """The objects a backup's ``files.jsonl`` lists, with their SHA-256."""
    lines = [json.loads(line) for line in (backup / "files.jsonl").read_text().splitlines()]
    return {(e["path"], e["sha256"]) for e in lines if e["path"].startswith("objects/")}


async def table_counts(database: Database) -> dict[str, int]:
    async with database.engine.connect() as conn:
        return {
            table: int((await conn.execute(text(f"SELECT count(*) FROM {table}"))).scalar_one())
            for table in COUNTED
        }


async def library_of(client: Client[Any], vaults: list[str]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for vault in vaults:
        page = await call(client, "image_asset_list", {"vault": vault, "limit": 100})
        for item in page["items"]:
            found[item["assetId"]] = {k: item.get(k) for k in ("title", "tags", "vault")}
    return found


async def test_a_backup_restores_into_a_new_data_directory_with_every_image(
    database: Database,
    database_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    source = MemorySettings(
        asset_ocr="off",
        memory_data_dir=tmp_path / "data",
        memory_database_url=SecretStr(database_url),
    )
    runtime = await open_runtime(source, public_base_url="http://127.0.0.1:9")
    services = MemoryServices(
        database=runtime.database, store=runtime.store, settings=source, embedder=runtime.embedder
    )
    await admin.create_identity(database, ALICE, 10**9)
    await admin.create_identity(database, BOB, 10**9)
    await admin.create_vault(database, ALICE, "Work")
    alice_key = (await admin.create_key(database, ALICE, ["read", "write", "destructive"])).secret
    bob_key = (await admin.create_key(database, BOB, ["read", "write"])).secret

    def client(key: str, on: MemoryServices) -> Client[Any]:
        return Client(build_memory_server(replace(on, default_api_key=key)))

    async with client(alice_key, services) as alice, client(bob_key, services) as bob:
        trips = await call(alice, "image_project_create", {"name": "Trips"})
        day = await call(
            alice, "image_folder_create", {"projectId": trips["projectId"], "name": "Day 1"}
        )
        saved = [
            await call(alice, "image_asset_save", {
                "imageBase64": b64(picture(seed)), "title": f"lighthouse {seed}",
                "tags": ["coast"], "projectId": trips["projectId"],
                "folderId": day["folderId"] if seed == 2 else None,
            })
            for seed in (1, 2, 3)
        ]  # fmt: skip
        await call(alice, "image_asset_save", {
            "imageBase64": b64(picture(4)), "title": "whiteboard", "vault": "Work",
        })  # fmt: skip
        await call(bob, "image_asset_save", {"imageBase64": b64(picture(1)), "title": "harbour"})
        trashed = saved[2]["assetId"]
        await call(alice, "image_asset_delete", {"assetId": trashed})
    assert await job_worker(services, FAST).drain() > 0
    before_rows = await table_counts(database)
    before_files = object_files(source.objects_dir)
    async with client(alice_key, services) as alice:
        before_alice = await library_of(alice, ["Library", "Work"])
    await runtime.close()
    assert len(before_files) == 10  # five objects, each an original and a preview

    backup = tmp_path / "backup"
    # The commands as the CLI parses and runs them (in this process, to spare two process
    # starts; the refusal below runs as its own process and checks the exit status).
    capsys.readouterr()
    await operator_command(source, parse("backup", str(backup), "--json"))
    report = printed_json(capsys.readouterr().out)
    assert (report["objects"], report["files"], report["missingObjects"]) == (5, 11, [])
    assert report["database"] == "external" and report["objectsIncluded"] is True
    manifest = json.loads((backup / "manifest.json").read_text())
    assert manifest["schemaRevision"] == report["schemaRevision"] != ""

    restored_dir = tmp_path / "restored"
    target = MemorySettings(asset_ocr="off", memory_data_dir=restored_dir)
    key_file = str(source.backup_key_path)  # made by the first backup, outside the backup
    await operator_command(target, parse("restore", str(backup), "--json", "--key-file", key_file))
    assert printed_json(capsys.readouterr().out)["objectFiles"] == 10
    # The restored data directory keeps the key: its own backups are signed alike.
    assert target.backup_key_path.read_bytes() == source.backup_key_path.read_bytes()

    restored = await open_runtime(target, public_base_url="http://127.0.0.1:9")
    try:
        again = MemoryServices(
            database=restored.database,
            store=restored.store,
            settings=target,
            embedder=restored.embedder,
        )
        assert await table_counts(restored.database) == before_rows
        assert object_files(target.objects_dir) == before_files
        async with client(alice_key, again) as alice, client(bob_key, again) as bob:
            # The same keys work: the restore kept identities, keys, vaults and grants.
            assert await library_of(alice, ["Library", "Work"]) == before_alice
            found = await call(alice, "image_asset_search", {"query": "lighthouse"})
            assert {hit["assetId"] for hit in found["results"]} == {s["assetId"] for s in saved[:2]}
            first = saved[0]["assetId"]
            similar = await call(alice, "image_asset_search", {"assetId": first})
            assert similar["results"][0]["assetId"] == first  # its visual vector came back too
            harbour = await call(bob, "image_asset_search", {"query": "harbour"})
            assert len(harbour["results"]) == 1
            # The trashed image came back in the trash, bytes and all: it can be restored.
            back = await call(alice, "image_asset_restore", {"assetId": trashed})
            assert back["assetId"] == trashed
        # The restored server runs on the embedded default: its backup holds the same objects.
        second = await create_backup(restored, tmp_path / "second")
        assert (second.database, second.objects, second.missing) == ("embedded", 5, [])
        assert listed_objects(tmp_path / "second") == listed_objects(backup)
    finally:
        await restored.close()

    # Tampered: one byte of one object changed. Refused by name, nothing written.
    victim = next(p for p in (backup / "objects").rglob("*") if p.is_file())
    data = victim.read_bytes()
    victim.write_bytes(bytes([data[0] ^ 0xFF]) + data[1:])
    other = tmp_path / "other"
    refused = cli("restore", str(backup), "--key-file", key_file, env=environment(other, None))
    assert refused.returncode == 1
    assert victim.relative_to(backup).as_posix() in refused.stderr
    assert "does not match its SHA-256" in refused.stderr
    assert not other.exists()


async def test_with_an_s3_store_the_backup_holds_the_database_and_names_the_bucket(
    database: Database,
    database_url: str,
    moto_peer: S3Peer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The bucket keeps its own versions and replicas: a backup of an S3 deployment is the
    # database dump alone, says so, and a restore over the same bucket finds every image.
    _store, bucket = moto_peer.new_store("backup")
    await _store.close()
    s3 = {
        "asset_storage_provider": "s3",
        "asset_s3_bucket": bucket,
        "asset_s3_region": moto_peer.region,
        "asset_s3_endpoint": moto_peer.endpoint_url,
        "asset_s3_access_key_id": SecretStr(moto_peer.access_key_id),
        "asset_s3_secret_access_key": SecretStr(moto_peer.secret_access_key),
        "asset_s3_force_path_style": True,
    }
    source = MemorySettings(
        memory_data_dir=tmp_path / "data", memory_database_url=SecretStr(database_url), **s3
    )
    runtime = await open_runtime(source, public_base_url="http://127.0.0.1:9")
    services = MemoryServices(
        database=runtime.database, store=runtime.store, settings=source, embedder=runtime.embedder
    )
    await admin.create_identity(database, ALICE, 10**9)
    caller = Caller(ALICE, "akey_a", frozenset({"read", "write"}))
    saver = AssetSaver(services)
    saved = [
        await saver.save(
            caller, SaveRequest(image_base64=b64(picture(seed)), title=f"lighthouse {seed}")
        )
        for seed in (1, 2)
    ]
    assert await job_worker(services, FAST).drain() > 0
    await runtime.close()

    capsys.readouterr()
    await operator_command(source, parse("backup", str(tmp_path / "backup"), "--json"))
    report = printed_json(capsys.readouterr().out)
    assert (report["objectStore"], report["objectsIncluded"]) == ("s3", False)
    assert (report["objects"], report["files"], report["missingObjects"]) == (0, 1, [])
    assert not (tmp_path / "backup" / "objects").exists()
    manifest = json.loads((tmp_path / "backup" / "manifest.json").read_text())
    assert manifest["objectStore"]["bucket"] == bucket
    # A person reading the table is told what was not copied.
    await operator_command(source, parse("backup", str(tmp_path / "table")))
    assert "the S3 bucket was not copied" in capsys.readouterr().out

    target = MemorySettings(memory_data_dir=tmp_path / "restored", **s3)
    key_file = str(source.backup_key_path)
    await operator_command(
        target, parse("restore", str(tmp_path / "backup"), "--json", "--key-file", key_file)
    )
    assert printed_json(capsys.readouterr().out)["objectFiles"] == 0
    restored = await open_runtime(target, public_base_url="http://127.0.0.1:9")
    try:
        again = MemoryServices(
            database=restored.database,
            store=restored.store,
            settings=target,
            embedder=restored.embedder,
        )
        key = (await admin.create_key(restored.database, ALICE, ["read"])).secret
        async with Client(build_memory_server(replace(again, default_api_key=key))) as alice:
            found = await call(alice, "image_asset_search", {"query": "lighthouse"})
        assert {hit["assetId"] for hit in found["results"]} == {d.asset_id for d in saved}
        async with restored.database.unit_of_work() as uow:
            for done in saved:
                asset = await uow.assets.get_for_owner(ALICE, done.asset_id)
                assert asset is not None and asset.status == "ready"
                stored = await uow.objects.get(ALICE, asset.object_id)
                body = b"".join([c async for c in restored.store.get_stream(stored.storage_key)])
                assert hashlib.sha256(body).hexdigest() == stored.sha256
    finally:
        await restored.close()


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="memory-server")
    add_operator_parsers(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(list(argv))


def fake_backup(path: Path, revision: str, key: bytes) -> None:
    """A backup signed with ``key`` whose files match its manifest, of the given revision."""
    path.mkdir()
    (path / "database.dump").write_bytes(b"PGDMP")
    line = {"path": "database.dump", "bytes": 5, "sha256": hashlib.sha256(b"PGDMP").hexdigest()}
    listing = (json.dumps(line) + "\n").encode()
    (path / "files.jsonl").write_bytes(listing)
    manifest = {
        "format": "image-memory-backup",
        "formatVersion": 2,
        "schemaRevision": revision,
        "fileList": {
            "path": "files.jsonl",
            "entries": 1,
            "bytes": len(listing),
            "sha256": hashlib.sha256(listing).hexdigest(),
        },
    }
    content = json_bytes(manifest)
    (path / SIGNATURE).write_bytes(json_bytes(signature_document(key, content)))
    (path / "manifest.json").write_bytes(content)


async def test_backup_and_restore_refuse_what_they_must_not_touch(tmp_path: Path) -> None:
    key_file = tmp_path / "keys" / "backup.key"
    key = load_or_create_backup_key(key_file)
    settings = MemorySettings(
        asset_ocr="off", memory_data_dir=tmp_path / "data", memory_backup_key_file=key_file
    )
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("keep me")
    with pytest.raises(ConflictFailure, match=r"backup destination .* is not empty"):
        await operator_command(settings, parse("backup", str(busy)))
    assert [p.name for p in busy.iterdir()] == ["notes.txt"]
    assert not (tmp_path / "data").exists()  # refused before any database was started

    half = tmp_path / "half"
    half.mkdir()
    (half / "database.dump").write_bytes(b"PGDMP")
    with pytest.raises(InvalidInputFailure, match=r"manifest\.json is missing"):
        await operator_command(settings, parse("restore", str(half)))
    newer = tmp_path / "newer"
    fake_backup(newer, "0999", key)
    with pytest.raises(InvalidInputFailure, match="newer than this build knows"):
        await operator_command(settings, parse("restore", str(newer)))
    assert not (tmp_path / "data").exists()

    occupied = MemorySettings(asset_ocr="off", memory_data_dir=tmp_path / "occupied")
    (occupied.memory_data_dir / "postgres").mkdir(parents=True)
    with pytest.raises(ConflictFailure, match="is not empty"):
        await operator_command(occupied, parse("restore", str(newer)))
    assert [p.name for p in occupied.memory_data_dir.iterdir()] == ["postgres"]


async def dumped_object_ids(dump: Path) -> set[str]:
    """The object ids in a dump's ``mem_asset_objects`` data (read with ``pg_restore``)."""
    done = subprocess.run(
        [str(pg_tool("pg_restore")), "--data-only", "--table=mem_asset_objects", "-f", "-",
         str(dump)],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    return set(re.findall(r"^(aob_[a-z0-9]+)\t", done.stdout, re.MULTILINE))


async def test_the_dump_and_the_object_list_share_one_snapshot(
    database: Database, database_url: str, tmp_path: Path
) -> None:
    settings = MemorySettings(
        asset_ocr="off",
        memory_data_dir=tmp_path / "data",
        memory_database_url=SecretStr(database_url),
    )
    store = LocalAssetObjectStore(tmp_path / "objects", UrlSigner(b"s" * 32), "http://127.0.0.1:9")
    services = MemoryServices(
        database=database, store=store, settings=settings, embedder=LocalEmbedder()
    )
    await admin.create_identity(database, ALICE, 10**9)
    caller = Caller(ALICE, "akey_a", frozenset({"read", "write"}))
    saver = AssetSaver(services)
    before = await saver.save(caller, SaveRequest(image_base64=b64(picture(1)), title="before"))
    target = database_target(settings, None)
    async with DumpSnapshot(database) as snapshot:
        # Saved after the snapshot: in neither the dump nor the list of bytes to copy.
        later = await saver.save(caller, SaveRequest(image_base64=b64(picture(2)), title="later"))
        await pg_dump(target, tmp_path / "snap.dump", snapshot=snapshot.id)
        listed = {stored.id async for stored in snapshot.objects_with_bytes(batch=1)}
    assert listed == await dumped_object_ids(tmp_path / "snap.dump") == {before.object_id}
    # Without the snapshot a dump sees the later save, which the list would lack.
    await pg_dump(target, tmp_path / "now.dump", snapshot=None)
    assert await dumped_object_ids(tmp_path / "now.dump") == {before.object_id, later.object_id}
