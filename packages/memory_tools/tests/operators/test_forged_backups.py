"""``restore`` of a forged backup runs nothing and refuses, whoever signed it.

The attack: a function that runs ``COPY ... TO PROGRAM``, called by a materialized view, so that
restoring the dump as PostgreSQL's superuser runs a program as the database's OS user. Built for
real: the objects are created in a real database, ``pg_dump`` dumps them, and a real backup
carries the dump. Then:

- swapped into an honest backup by someone without the backup key (checksums rewritten to
  match): refused, the signature does not match;
- signed with the key (a backup of a database that holds the objects): refused before anything
  runs, the dump holds kinds our schema never creates;
- our own trigger function rewritten to run the program: the dump passes the table of contents
  (same kind, same name), is restored by a role that may not run programs, and is refused when
  its schema is compared with ours;
- a restore without the key, with another key, or of a changed manifest: refused.

In every case the program's marker file never appears, and the data directory is left as it
was. The same dump restored the old way (``pg_restore`` as superuser) does create the marker:
the payload is live.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg  # type: ignore[import-untyped]
import pytest
from pydantic import SecretStr

from memory_db import MemorySettings, open_runtime
from memory_db.database import to_plain_url
from memory_db.dumps import pg_tool, tool_target
from memory_db.guarded_restore import parse_toc_line, refusal
from memory_tools.errors import InvalidInputFailure
from memory_tools.operations.backup import create_backup, file_digest, json_bytes, restore_backup
from memory_tools.operations.backup_key import SIGNATURE

from .test_backup import cli, environment


@pytest.fixture
def marker() -> Iterator[Path]:
    """Where the payload's program writes: a directory the database's OS user may write to."""
    directory = Path(tempfile.mkdtemp(prefix="forged-backup-"))
    # PostgreSQL runs as its own OS user when the tests run as root: it must reach this.
    directory.chmod(0o777)
    try:
        yield directory / "the-program-ran"
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def exists(path: Path) -> bool:
    """Whether ``path`` exists (a plain check, no event loop involved)."""
    return path.exists()


async def run_sql(url: str, sql: str) -> None:
    conn = await asyncpg.connect(to_plain_url(url))  # pyright: ignore[reportUnknownMemberType]
    try:
        await conn.execute(sql)  # pyright: ignore[reportUnknownMemberType]
    finally:
        await conn.close()  # pyright: ignore[reportUnknownMemberType]


async def source_database_name(url: str) -> str:
    conn = await asyncpg.connect(to_plain_url(url))  # pyright: ignore[reportUnknownMemberType]
    try:
        return str(await conn.fetchval("SELECT current_database()"))  # pyright: ignore[reportUnknownMemberType]
    finally:
        await conn.close()  # pyright: ignore[reportUnknownMemberType]


def payload(source: str, marker: Path) -> str:
    """SQL that runs ``touch MARKER`` as the server's OS user, anywhere but in ``source``."""
    return (
        f"IF current_database() <> '{source}' THEN "
        f"EXECUTE 'COPY (SELECT 1) TO PROGRAM ''touch {marker}'''; END IF;"
    )


def swap_dump(backup: Path, dump: Path) -> None:
    """Put ``dump`` in ``backup`` and rewrite both checksum lists to match, without the key."""
    shutil.copyfile(dump, backup / "database.dump")
    size, digest = file_digest(backup / "database.dump")
    lines = [json.loads(line) for line in (backup / "files.jsonl").read_text().splitlines()]
    for line in lines:
        if line["path"] == "database.dump":
            line.update(bytes=size, sha256=digest)
    (backup / "files.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    manifest = json.loads((backup / "manifest.json").read_text())
    size, digest = file_digest(backup / "files.jsonl")
    manifest["fileList"].update(bytes=size, sha256=digest)
    (backup / "manifest.json").write_bytes(json_bytes(manifest))


async def test_a_forged_dump_is_refused_and_runs_nothing(
    database_url: str, tmp_path: Path, marker: Path
) -> None:
    settings = MemorySettings(
        asset_ocr="off",
        memory_data_dir=tmp_path / "data",
        memory_database_url=SecretStr(database_url),
    )
    runtime = await open_runtime(settings, public_base_url="http://127.0.0.1:9")
    try:
        await create_backup(runtime, tmp_path / "honest")
        source = await source_database_name(database_url)
        await run_sql(
            database_url,
            "CREATE FUNCTION evil() RETURNS integer LANGUAGE plpgsql AS $$ BEGIN "
            f"{payload(source, marker)} RETURN 1; END $$; "
            "CREATE MATERIALIZED VIEW evil_view AS SELECT evil() AS n;",
        )
        await create_backup(runtime, tmp_path / "signed")
    finally:
        await runtime.close()
    assert not exists(marker)
    key_file = str(settings.backup_key_path)
    restored = tmp_path / "restored"
    env = environment(restored, None)

    # Swapped in by someone without the key: the manifest no longer matches its signature.
    shutil.copytree(tmp_path / "honest", tmp_path / "swapped")
    swap_dump(tmp_path / "swapped", tmp_path / "signed" / "database.dump")
    refused = cli("restore", str(tmp_path / "swapped"), "--key-file", key_file, env=env)
    assert refused.returncode == 1, refused.stderr
    assert "is not authentic: its manifest does not match its signature" in refused.stderr
    assert not exists(restored) and not exists(marker)

    # Signed with the key: refused by what the dump holds, before any of it runs.
    refused = cli("restore", str(tmp_path / "signed"), "--key-file", key_file, env=env)
    assert refused.returncode == 1, refused.stderr
    assert "invalid_input: backup" in refused.stderr
    assert "FUNCTION public.evil(), which this server's schema never creates" in refused.stderr
    assert "nothing was restored" in refused.stderr
    assert not exists(restored) and not exists(marker)

    # Without the key, with another key, or without a signature: refused, nothing written.
    target = MemorySettings(asset_ocr="off", memory_data_dir=restored)
    with pytest.raises(InvalidInputFailure, match=r"the backup key .* does not exist"):
        await restore_backup(target, tmp_path / "honest")
    other_key = tmp_path / "other.key"
    other_key.write_text("ab" * 32 + "\n")
    with pytest.raises(InvalidInputFailure, match="was signed with backup key"):
        await restore_backup(target, tmp_path / "honest", key_file=other_key)
    (tmp_path / "honest" / SIGNATURE).rename(tmp_path / "signature")
    with pytest.raises(InvalidInputFailure, match=rf"{SIGNATURE} is missing"):
        await restore_backup(target, tmp_path / "honest", key_file=Path(key_file))
    (tmp_path / "signature").rename(tmp_path / "honest" / SIGNATURE)
    assert not exists(restored) and not exists(marker)

    # The payload is live: the old way (pg_restore as the superuser) runs the program.
    scratch = f"{source}_old_way"
    await run_sql(database_url, f"CREATE DATABASE {scratch}")
    old_way = tool_target(urlunsplit(urlsplit(database_url)._replace(path=f"/{scratch}")))
    done = subprocess.run(
        [str(pg_tool("pg_restore")), "--no-owner", "--no-privileges", "--dbname", old_way.url,
         str(tmp_path / "signed" / "database.dump")],
        env=dict(old_way.env), capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    await run_sql(database_url, f"DROP DATABASE {scratch} WITH (FORCE)")
    assert exists(marker), done.stderr


async def test_our_function_rewritten_is_refused_after_a_restore_without_rights(
    database_url: str, tmp_path: Path, marker: Path
) -> None:
    settings = MemorySettings(
        asset_ocr="off",
        memory_data_dir=tmp_path / "data",
        memory_database_url=SecretStr(database_url),
    )
    source = await source_database_name(database_url)
    # Our folder-tree trigger function, with the payload first: each folder insert after the
    # restore (by the server, as superuser) would run the program.
    await run_sql(
        database_url,
        "CREATE OR REPLACE FUNCTION mem_asset_folders_check_tree() RETURNS trigger "
        f"LANGUAGE plpgsql AS $$ BEGIN {payload(source, marker)} RETURN NEW; END $$;",
    )
    runtime = await open_runtime(settings, public_base_url="http://127.0.0.1:9")
    try:
        await create_backup(runtime, tmp_path / "signed")
    finally:
        await runtime.close()
    target = MemorySettings(asset_ocr="off", memory_data_dir=tmp_path / "restored")
    with pytest.raises(
        InvalidInputFailure,
        match=r"the restored schema is not this server's: mem_asset_folders_check_tree\(\); "
        r"Type: FUNCTION; .* is defined differently",
    ):
        await restore_backup(target, tmp_path / "signed", key_file=settings.backup_key_path)
    assert not exists(marker)
    assert not exists(tmp_path / "restored")


@pytest.mark.parametrize(
    ("line", "refused"),
    [
        ("367; 1255 17128 FUNCTION public mem_asset_folders_check_tree() postgres", None),
        (
            "3016; 2620 17129 TRIGGER public mem_asset_folders trg_mem_asset_folders_check_tree postgres",
            None,
        ),
        ("2; 3079 16391 EXTENSION - vector ", None),
        ("3192; 0 0 COMMENT - EXTENSION vector ", None),
        ("220; 1259 16385 TABLE public alembic_version postgres", None),
        ("3500; 0 16385 TABLE DATA public memory_assets_v1 postgres", None),
        ("3100; 2606 17000 FK CONSTRAINT public mem_assets mem_assets_owner_fkey postgres", None),
        ("368; 1255 17130 FUNCTION public evil() postgres", "FUNCTION public.evil()"),
        ("369; 1255 17131 PROCEDURE public run() postgres", "PROCEDURE public run()"),
        ("240; 1259 17200 MATERIALIZED VIEW public evil_view postgres", "MATERIALIZED VIEW"),
        ("3600; 0 17200 MATERIALIZED VIEW DATA public evil_view postgres", "MATERIALIZED VIEW"),
        ("3017; 2620 17132 TRIGGER public mem_assets trg_evil postgres", "TRIGGER public.mem_"),
        ("3018; 3466 17133 EVENT TRIGGER - evil postgres", "EVENT TRIGGER"),
        ("3; 3079 16392 EXTENSION - dblink ", "EXTENSION -.dblink"),
        ("241; 1259 17201 VIEW public v postgres", "VIEW public v"),
        ("242; 1259 17202 TABLE other mem_assets postgres", "TABLE other.mem_assets"),
        ("3700; 2613 17300 LARGE OBJECT - 17300 postgres", "LARGE OBJECT"),
        ("243; 1259 17203 TABLE public pg_evil postgres", "TABLE public.pg_evil"),
    ],
)
def test_the_table_of_contents_allows_only_our_schema(line: str, refused: str | None) -> None:
    entry = parse_toc_line(line)
    assert entry is not None
    reason = refusal(entry)
    if refused is None:
        assert reason is None
    else:
        assert reason is not None and refused in reason and "never creates" in reason
