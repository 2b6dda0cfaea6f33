"""Single-use upload links and the store-vs-accounts reconciliation, with real processes.

A `memory-server serve --transport http` subprocess takes four direct uploads that end in every
way an upload can end (completed, deduplicated, refused, expired). Every link is then replayed
with other bytes of the signed length. A `memory-server worker` started afterwards reconciles
on its first sweep; from then on the bytes on disk per namespace are exactly what `used_bytes`
accounts for, and every stored file hashes to the SHA-256 the database recorded.
"""

from __future__ import annotations

import hashlib
import subprocess
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from sqlalchemy import text

from memory_db.database import create_engine
from memory_tools.testing.keys import new_key as make_key

from .test_processes import SERVER, _env, _png, serve_http

pytestmark = pytest.mark.slow


def _jpeg() -> bytes:
    import pyvips

    return pyvips.Image.xyz(16, 16)[0].cast("uchar").jpegsave_buffer()


def _key(env: dict[str, str], owner: str, quota: int) -> str:
    return make_key(env, owner, "read,write", quota_bytes=quota)


def _start_worker(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*SERVER, "worker"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def _replacement(length: int) -> bytes:
    page = b"<html><script>document.title='replayed'</script></html>"
    return (page * (length // len(page) + 1))[:length]


async def _accounts(url: str, owner: str) -> tuple[str, int, dict[str, str]]:
    """Namespace, bytes used by objects (vectors aside), and recorded hashes per key."""
    engine = create_engine(url, pool_size=1)
    try:
        async with engine.connect() as conn:
            namespace, used = (
                await conn.execute(
                    text(
                        "SELECT namespace_id, used_bytes FROM mem_asset_namespaces "
                        "WHERE owner_identity = :o"
                    ),
                    {"o": owner},
                )
            ).one()
            vectors = await conn.scalar(
                text(
                    "SELECT coalesce(sum((metadata->>'vectorBytes')::bigint), 0) "
                    "FROM mem_assets WHERE owner_identity = :o"
                ),
                {"o": owner},
            )
            rows = (
                await conn.execute(
                    text(
                        "SELECT storage_key, sha256, preview_storage_key, preview_sha256 "
                        "FROM mem_asset_objects WHERE owner_identity = :o AND status <> 'deleted'"
                    ),
                    {"o": owner},
                )
            ).all()
    finally:
        await engine.dispose()
    hashes = {row[0]: row[1] for row in rows} | {row[2]: row[3] for row in rows}
    return str(namespace), int(used) - int(vectors), hashes


def _on_disk(objects: Path, namespace: str) -> dict[str, str]:
    base = objects / "production" / "tenants" / namespace
    return {
        path.relative_to(objects).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in (base.rglob("*") if base.exists() else [])
        if path.is_file() and not path.name.endswith((".json", ".tmp"))
    }


async def test_replayed_upload_links_change_nothing_and_leave_no_unaccounted_bytes(
    tmp_path: Path, database_url: str
) -> None:
    env = _env(tmp_path, MEMORY_DATABASE_URL=database_url)  # migrated (the template's clone)
    keys = {
        "big@example.com": _key(env, "big@example.com", 10**9),
        "small@example.com": _key(env, "small@example.com", 100_000),
    }
    big, small = keys["big@example.com"], keys["small@example.com"]
    image = _png(3)
    plan = [
        ("completed", big, image, 200),
        ("deduplicated", big, image, 200),
        ("refused", small, _jpeg(), 422),  # declared PNG, the bytes are a JPEG
        ("expired", big, _png(4), None),  # never completed
    ]
    links: dict[str, tuple[dict[str, Any], int]] = {}
    with serve_http(env) as (url, _process):
        async with httpx.AsyncClient(timeout=30) as http:
            for outcome, key, data, status in plan:
                auth = {"Authorization": f"Bearer {key}"}
                started = await http.post(
                    f"{url}/uploads",
                    json={"contentType": "image/png", "contentLength": len(data)},
                    headers=auth,
                )
                assert started.status_code == 201, started.text
                ticket = started.json()
                assert ticket["completeUrl"].startswith(f"{url}/uploads/")
                put = await http.put(ticket["url"], content=data, headers=ticket["headers"])
                assert put.status_code == 200, put.text
                if status is not None:
                    done = await http.post(ticket["completeUrl"], json={}, headers=auth)
                    assert done.status_code == status, done.text
                links[outcome] = (ticket, len(data))
            engine = create_engine(database_url, pool_size=1)
            try:
                async with engine.begin() as conn:
                    await conn.execute(
                        text(
                            "UPDATE mem_asset_upload_reservations "
                            "SET expires_at = now() - interval '1 second' WHERE id = :i"
                        ),
                        {"i": links["expired"][0]["uploadId"]},
                    )
            finally:
                await engine.dispose()
            for outcome, (ticket, length) in links.items():
                replay = await http.put(
                    ticket["url"], content=_replacement(length), headers=ticket["headers"]
                )
                assert replay.status_code == 403, (outcome, replay.status_code)
    # A worker process reconciles on its first sweep (the server's ran before the replays).
    worker = _start_worker(env)
    objects = tmp_path / "data" / "objects"
    try:
        deadline = time.monotonic() + 60
        while True:
            states = {owner: await _accounts(database_url, owner) for owner in keys}
            settled = all(
                _on_disk(objects, namespace) == hashes
                for namespace, _used, hashes in states.values()
            )
            if settled or time.monotonic() > deadline:
                break
            await anyio.sleep(0.5)
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    for owner, (namespace, used, hashes) in states.items():
        present = _on_disk(objects, namespace)
        assert present == hashes, owner  # nothing unaccounted; every original as validated
        disk = sum((objects / key).stat().st_size for key in present)
        assert disk == used, owner  # the bytes on disk are what used_bytes counts
