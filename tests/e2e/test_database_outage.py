"""A dead database, for real: `kill -9` of PostgreSQL under a running `memory-server`.

The server is a subprocess serving HTTP; saves go through an MCP client as base64. While the
database is gone every call answers the retryable tool error `unavailable` (never a transport
error or a bare 500) and `/healthz/ready` answers 503 naming it; afterwards the server serves again by
itself, with the embedded default (it restarts its PostgreSQL) and with an external database
(it reconnects when the database is back). A server killed with `kill -9` does not keep the
embedded PostgreSQL running once the last live server stops.
"""

from __future__ import annotations

import base64
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx
import psutil
import pytest
import pyvips
from fastmcp import Client

from memory_db.database import DEFAULT_DATABASE, EmbeddedPostgres, start_embedded
from memory_db.testing import copy_data_directory
from memory_tools.testing.keys import new_key as make_key

from .test_processes import _env, serve_http

pytestmark = pytest.mark.slow

RECOVERY_SECONDS = 30.0


def _jpeg(seed: int) -> bytes:
    xyz = pyvips.Image.xyz(48, 40)
    red = ((xyz[0] * (seed % 97 + 2) + xyz[1] * 3) % 256).cast("uchar")
    green = ((xyz[1] * (seed % 89 + 5) + seed) % 256).cast("uchar")
    return red.bandjoin([green, red]).copy(interpretation="srgb").jpegsave_buffer(Q=90)


def _postmaster_pid(pgdata: Path) -> int | None:
    try:
        return int((pgdata / "postmaster.pid").read_text().splitlines()[0])
    except (FileNotFoundError, IndexError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _wait_dead(pid: int) -> None:
    """Until the SIGKILL (delivered asynchronously) has landed."""
    deadline = time.monotonic() + 10
    while _alive(pid):
        assert time.monotonic() < deadline, f"process {pid} survived SIGKILL"
        time.sleep(0.01)


async def _save(client: Client, seed: int) -> tuple[str | None, str | None]:
    """``(asset id, None)`` for an acknowledged save, ``(None, error text)`` for a tool error."""
    result = await client.call_tool(
        "image_asset_save",
        {"imageBase64": base64.b64encode(_jpeg(seed)).decode(), "title": f"loop {seed}"},
        raise_on_error=False,
    )
    if result.is_error:
        return None, str(getattr(result.content[0], "text", ""))
    return str(result.structured_content["assetId"]), None


async def _readiness(url: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        return await http.get("/healthz/ready")


async def _until_saves_succeed(client: Client, seed: int) -> tuple[list[str], list[str]]:
    """Save until one succeeds (within ``RECOVERY_SECONDS``); returns the refusals and acks."""
    refused: list[str] = []
    deadline = time.monotonic() + RECOVERY_SECONDS
    while time.monotonic() < deadline:
        seed += 1
        asset, error = await _save(client, seed)
        if asset is not None:
            return refused, [asset]
        assert error is not None and error.startswith("unavailable:"), error
        refused.append(error)
        await anyio.sleep(0.2)
    pytest.fail(f"saves did not succeed again within {RECOVERY_SECONDS} s: {refused[-3:]}")


async def _all_ready(client: Client, assets: list[str]) -> dict[str, str]:
    """Each asset's status once it is ready, or after ``RECOVERY_SECONDS`` if it never gets there.

    ``image_asset_get`` with ``waitSeconds`` waits for the embedding server-side (on the
    notification the worker's commit sends), so no poll interval is slept away.
    """
    statuses: dict[str, str] = {}
    deadline = time.monotonic() + RECOVERY_SECONDS
    for asset in assets:
        wait = max(0.0, min(30.0, deadline - time.monotonic()))  # 30: the tool's maximum
        got = await client.call_tool("image_asset_get", {"assetId": asset, "waitSeconds": wait})
        statuses[asset] = str(got.structured_content["status"])
    return statuses


@pytest.mark.usefixtures("embedded_data_dir")  # a migrated database in tmp_path/data
async def test_embedded_postgres_killed_under_a_save_loop(tmp_path: Path) -> None:
    env = _env(tmp_path)
    pgdata = Path(env["MEMORY_DATA_DIR"]) / "postgres"
    with serve_http(env, capture=False) as (url, _process):
        key = make_key(env, "outage@example.com")
        async with Client(url + "/mcp", auth=key) as client:
            acknowledged: list[str] = []
            for seed in range(8):
                asset, error = await _save(client, seed)
                assert asset is not None, error
                acknowledged.append(asset)
            victim = _postmaster_pid(pgdata)
            assert victim is not None
            os.kill(victim, signal.SIGKILL)
            killed = time.monotonic()
            _wait_dead(victim)

            # At once: readiness names the database, and a save is a clean tool error.
            ready = await _readiness(url)
            assert ready.status_code == 503, ready.text
            assert ready.json()["failing"] == ["database"]
            assert ready.json()["checks"]["objectStore"] == "ok"
            refused, after = await _until_saves_succeed(client, 100)
            assert refused, "no call was refused: the outage was not observed"
            assert time.monotonic() - killed < RECOVERY_SECONDS
            # The server restarted PostgreSQL itself (a new postmaster, alive).
            restarted = _postmaster_pid(pgdata)
            assert restarted is not None and restarted != victim and _alive(restarted)
            assert (await _readiness(url)).status_code == 200

            for seed in range(200, 204):  # saves keep working
                asset, error = await _save(client, seed)
                assert asset is not None, error
                after.append(asset)
            # Every save acknowledged before the kill survived it and was embedded by the
            # in-server worker, which outlived the outage; so were the ones after it.
            statuses = await _all_ready(client, acknowledged + after)
            assert statuses == dict.fromkeys(acknowledged + after, "ready"), statuses


@pytest.fixture
async def external_postgres(
    tmp_path: Path, migrated_pgdata: Path
) -> AsyncIterator[EmbeddedPostgres]:
    """A PostgreSQL of this test's own (not the session's shared one): it gets killed.

    A copy of a migrated data directory, so neither initdb nor the migrations run here (the
    migration of an external database is tested in test_processes.py).
    """
    pgdata = tmp_path / "external-pg"
    copy_data_directory(migrated_pgdata, pgdata)
    server = await start_embedded(pgdata)
    try:
        yield server
    finally:
        server.stop()


async def _restart(server: EmbeddedPostgres) -> None:
    """Start the killed server again, retrying while its old processes are still going."""
    deadline = time.monotonic() + RECOVERY_SECONDS
    while server.alive():  # the SIGKILL is delivered asynchronously: wait until it landed
        assert time.monotonic() < deadline, "the killed server is still alive"
        await anyio.sleep(0.05)
    while True:
        try:
            if await anyio.to_thread.run_sync(server.restart) or server.alive():
                return
        except Exception:
            if time.monotonic() > deadline:
                raise
        assert time.monotonic() < deadline, "the test database did not restart"
        await anyio.sleep(0.2)


async def test_server_reconnects_when_an_external_database_returns(
    tmp_path: Path, external_postgres: EmbeddedPostgres
) -> None:
    env = _env(tmp_path, MEMORY_DATABASE_URL=external_postgres.url(DEFAULT_DATABASE))
    key = make_key(env, "external@example.com")
    with serve_http(env, capture=False) as (url, _process):
        async with Client(url + "/mcp", auth=key) as client:
            before, error = await _save(client, 1)
            assert before is not None, error
            victim = _postmaster_pid(external_postgres.pgdata)
            assert victim is not None
            os.kill(victim, signal.SIGKILL)
            _wait_dead(victim)

            asset, error = await _save(client, 2)
            assert asset is None and error is not None and error.startswith("unavailable:"), error
            ready = await _readiness(url)
            assert ready.status_code == 503 and ready.json()["failing"] == ["database"]
            listed = await client.call_tool("image_project_list", {}, raise_on_error=False)
            assert listed.is_error
            assert str(getattr(listed.content[0], "text", "")).startswith("unavailable:")

            # The database comes back (started by its operator, here by this test). The server
            # is not restarted: its pool drops the dead connections and connects again.
            await _restart(external_postgres)
            _refused, after = await _until_saves_succeed(client, 10)
            assert (await _readiness(url)).status_code == 200
            statuses = await _all_ready(client, [before, *after])
            assert set(statuses.values()) == {"ready"}, statuses


def _wait_gone(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.2)
    return False


@pytest.mark.usefixtures("embedded_data_dir")  # a migrated database in tmp_path/data
def test_a_crashed_server_does_not_keep_the_embedded_postgres_alive(tmp_path: Path) -> None:
    env = _env(tmp_path)
    pgdata = Path(env["MEMORY_DATA_DIR"]) / "postgres"
    postmaster: int | None = None
    try:
        with serve_http(env) as (_url, crashed):
            postmaster = _postmaster_pid(pgdata)
            assert postmaster is not None
            with serve_http(env) as (_other_url, survivor):
                # The second server attached to the same PostgreSQL.
                assert _postmaster_pid(pgdata) == postmaster
                crashed.kill()  # kill -9: it never releases its use of the server
                crashed.wait(timeout=30)
                assert _alive(postmaster)  # the survivor still uses it
                survivor.terminate()  # SIGTERM: a clean stop of the last live user
                assert survivor.wait(timeout=30) == 0
            # The last live user stopped PostgreSQL, although the crashed one never let go.
            assert _wait_gone(postmaster, 15), "the embedded PostgreSQL outlived every server"
            assert _postmaster_pid(pgdata) is None
    finally:
        if postmaster is not None and _alive(postmaster):
            os.kill(postmaster, signal.SIGTERM)  # do not leak a server when the test fails
