"""The real thing: `memory-server` as subprocesses over stdio and HTTP, as a user runs it."""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import pyvips
from fastmcp import Client
from fastmcp.client.transports import StdioTransport

from memory_db.migrate import head_revision
from memory_tools.mcp.tools import tools as memory_registry
from memory_tools.testing.keys import new_key as make_key

pytestmark = pytest.mark.slow

SERVER = [sys.executable, "-m", "memory_server"]


def _png(seed: int = 1) -> bytes:
    xyz = pyvips.Image.xyz(64, 48)
    red = ((xyz[0] * (seed + 2)) % 256).cast("uchar")
    green = ((xyz[1] * 5 + seed) % 256).cast("uchar")
    return red.bandjoin([green, red]).copy(interpretation="srgb").pngsave_buffer()


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASSET_", "MEMORY_", "JINA_"))}
    env.update(MEMORY_DATA_DIR=str(tmp_path / "data"), MEMORY_LOG_FORMAT="json")
    # These servers count jobs and queue depth: a PNG save would queue an OCR job beside its
    # embeddings (ASSET_OCR=screenshots by default). OCR's own end-to-end tests turn it on.
    env.update({"ASSET_OCR": "off", **extra})
    return env


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SERVER, *args], env=env, capture_output=True, text=True, timeout=120)


def _new_key(env: dict[str, str], owner: str, scopes: str = "read,write,destructive") -> str:
    created = _cli(env, "admin", "create-identity", "--owner", owner)
    assert created.returncode == 0, created.stderr
    made = _cli(env, "admin", "create-key", "--owner", owner, "--scopes", scopes)
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip().splitlines()[-1]
    assert key.startswith("mk_")
    assert key not in made.stderr  # the key is printed once, on stdout only
    return key


async def test_stdio_server_with_database_url(tmp_path: Path, empty_database_url: str) -> None:
    env = _env(tmp_path, MEMORY_DATABASE_URL=empty_database_url)
    # an external database is not migrated implicitly
    refused = _cli(env, "admin", "create-identity", "--owner", "a@example.com")
    assert refused.returncode == 2 and "memory-server migrate" in refused.stderr
    migrated = _cli(env, "migrate")
    assert migrated.returncode == 0 and f"revision {head_revision()}" in migrated.stdout
    # The people are made in-process: the CLI making them is the subject of the HTTP test below.
    alice = make_key(env, "alice@example.com")
    bob = make_key(env, "bob@example.com")

    transport = StdioTransport(
        SERVER[0],
        [*SERVER[1:], "serve", "--transport", "stdio"],
        env={**env, "MEMORY_API_KEY": alice},
        keep_alive=False,  # the server exits when the client closes
    )
    async with Client(transport) as client:
        project = await client.call_tool("image_project_create", {"name": "Stdio"})
        pid = project.structured_content["projectId"]
        folder = await client.call_tool("image_folder_create", {"projectId": pid, "name": "F"})
        assert folder.structured_content["path"] == "/F"
        deep = await client.call_tool(
            "image_folder_create", {"projectId": pid, "name": "x" * 121}, raise_on_error=False
        )
        assert deep.is_error and deep.content[0].text.startswith("invalid_input:")
        # Every asset tool is there over stdio too; a save, a search, a move and a delete.
        names = {tool.name for tool in await client.list_tools()}
        assert names == {spec.name for spec in memory_registry.specs}
        saved = await client.call_tool(
            "image_asset_save",
            {"imageBase64": base64.b64encode(_png(7)).decode(), "title": "Over stdio"},
        )
        asset = saved.structured_content["assetId"]
        moved = await client.call_tool("image_asset_move", {"assetId": asset, "projectId": pid})
        assert moved.structured_content["moved"] is True
        found = await client.call_tool("image_asset_search", {"query": "stdio"})
        assert found.structured_content["mode"] == "text"
        deleted = await client.call_tool("image_asset_delete", {"assetId": asset})
        assert deleted.structured_content["status"] == "deleted"
        assert deleted.structured_content["alreadyDeleted"] is False

    transport = StdioTransport(
        SERVER[0],
        [*SERVER[1:], "serve", "--transport", "stdio"],
        env={**env, "MEMORY_API_KEY": bob},
        keep_alive=False,
    )
    async with Client(transport) as client:
        listed = await client.call_tool("image_project_list", {})
        assert listed.structured_content["projects"] == []
        other = await client.call_tool(
            "image_folder_list", {"projectId": pid}, raise_on_error=False
        )
        assert other.is_error and other.content[0].text == "not_found: project not found"


def test_stdio_refuses_to_start_without_a_valid_key(tmp_path: Path, database_url: str) -> None:
    env = _env(tmp_path, MEMORY_DATABASE_URL=database_url)  # migrated (the template's clone)
    missing = _cli(env, "serve", "--transport", "stdio")
    assert missing.returncode == 2 and "MEMORY_API_KEY" in missing.stderr
    wrong = subprocess.run(
        [*SERVER, "serve", "--transport", "stdio"],
        env={**env, "MEMORY_API_KEY": "mk_" + "z" * 43},
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert (
        wrong.returncode == 2
        and "MEMORY_API_KEY: the API key is unknown or revoked" in wrong.stderr
    )


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("ASSET_MAX_BYTES", "nope"),
        ("MEMORY_DATA_DIR", "/home/u/Dropbox/memory"),
        ("ASSET_STORAGE_PROVIDER", "s3"),
    ],
)
def test_invalid_configuration_fails_at_start_naming_the_variable(
    tmp_path: Path, variable: str, value: str
) -> None:
    env = _env(tmp_path)
    env[variable] = value
    result = _cli(env, "serve", "--transport", "http")
    assert result.returncode == 2
    assert variable in result.stderr and "Traceback" not in result.stderr


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serve_http(
    env: dict[str, str], *, capture: bool = True
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """`memory-server serve --transport http` in ``env``, up and healthy; stopped afterwards.

    ``capture`` pipes its output for the test to read; a long-running walk passes ``False``, as
    nobody drains the pipes while it runs and a full pipe would stall the server.
    """
    port = _free_port()
    output = subprocess.PIPE if capture else subprocess.DEVNULL
    process = subprocess.Popen(
        [*SERVER, "serve", "--transport", "http", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=output,
        stderr=output,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"server exited: {process.stderr.read() if process.stderr else ''}")
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.2)
    else:
        process.kill()
        pytest.fail("server did not start within 90 s")
    try:
        yield url, process
    finally:
        if process.poll() is None:
            process.terminate()
        process.wait(timeout=30)
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def http_server(
    tmp_path: Path, embedded_data_dir: Path
) -> Iterator[tuple[str, dict[str, str], subprocess.Popen[str]]]:
    """`memory-server serve --transport http` on the embedded default, in its own data dir.

    That data dir holds a migrated database already (``embedded_data_dir``): the first start
    (initdb, migrations) is tested in test_newcomer.py.
    """
    env = _env(tmp_path)
    with serve_http(env) as (url, process):
        yield url, env, process


async def test_http_server_on_the_embedded_default(
    http_server: tuple[str, dict[str, str], subprocess.Popen[str]],
) -> None:
    url, env, process = http_server
    # admin commands in other processes attach to the server's embedded PostgreSQL
    alice = _new_key(env, "alice@example.com")
    # One person made by the CLI shows the attaching; the reader is made in-process.
    reader = make_key(env, "reader@example.com", "read")
    again = _cli(env, "admin", "create-identity", "--owner", "alice@example.com")
    assert again.returncode == 1 and "conflict:" in again.stderr
    again = _cli(env, "admin", "create-identity", "--owner", "alice@example.com", "--exist-ok")
    assert again.returncode == 0 and "already exists" in again.stdout
    granted = _cli(
        env,
        "admin",
        "grant",
        "--vault-owner",
        "alice@example.com",
        "--vault",
        "Library",
        "--to",
        "reader@example.com",
        "--permission",
        "read",
    )
    assert granted.returncode == 0, granted.stderr
    assert httpx.post(url + "/mcp", json={}).status_code == 401
    async with Client(url + "/mcp", auth=alice) as client:
        project = await client.call_tool("image_project_create", {"name": "Over HTTP"})
        assert project.structured_content["vault"] == "Library"
        # Save an image; the server's in-process worker embeds it. Repeating the save with the
        # same idempotency key reports the asset's current state.
        save = {
            "imageBase64": base64.b64encode(_png()).decode(),
            "title": "A gradient saved over HTTP",
            "projectId": project.structured_content["projectId"],
            "idempotencyKey": "e2e-1",
        }
        saved = (await client.call_tool("image_asset_save", save)).structured_content
        assert saved["embeddingStatus"] == "pending" and len(saved["jobIds"]) == 2
        again = (await client.call_tool("image_asset_save", save)).structured_content
        assert again["assetId"] == saved["assetId"] and again["replayed"]
        # The tool's own wait (woken by the embedding's notification), at most 30 s a call:
        # three calls bound a worker's first embedding on a loaded machine.
        wait = {"assetId": saved["assetId"], "includePreview": True, "waitSeconds": 30}
        for _ in range(3):
            state = (await client.call_tool("image_asset_get", wait)).structured_content
            if state["embeddingStatus"] == "ready":
                break
        else:
            pytest.fail("the saved image did not become ready within 90 s")
        assert state["status"] == "ready"
        # The signed preview link is served by this server, as WebP, and only with its signature.
        preview = httpx.get(state["preview"]["url"], timeout=10)
        assert preview.status_code == 200 and preview.headers["content-type"] == "image/webp"
        assert preview.content.startswith(b"RIFF") and preview.content[8:12] == b"WEBP"
        unsigned = httpx.get(state["preview"]["url"].split("?")[0], timeout=10)
        assert unsigned.status_code == 403
        listed = (await client.call_tool("image_asset_list", {})).structured_content
        assert [item["assetId"] for item in listed["items"]] == [saved["assetId"]]
    async with Client(url + "/mcp", auth=reader) as client:
        listed = await client.call_tool("image_project_list", {})
        assert [(p["vault"], p["name"]) for p in listed.structured_content["projects"]] == [
            ("alice@example.com/Library", "Over HTTP")
        ]
        refused = await client.call_tool(
            "image_project_create",
            {"name": "x", "vault": "alice@example.com/Library"},
            raise_on_error=False,
        )
        assert refused.content[0].text == "forbidden: this API key lacks the 'write' scope"
    pgdata = Path(env["MEMORY_DATA_DIR"]) / "postgres"
    assert (pgdata / "postmaster.pid").exists()  # still running for the server
    process.terminate()
    assert process.wait(timeout=30) == 0
    _out, err = process.communicate()
    assert "MCP over streamable HTTP at http://127.0.0.1:" in err
    assert "memory-server admin create-key" in err
    assert (
        alice not in err and "alice@example.com" not in err
    )  # logs never carry keys or identities
    assert not (pgdata / "postmaster.pid").exists()  # the embedded server stopped cleanly
