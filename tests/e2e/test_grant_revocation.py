"""Revoking a grant takes effect on the grantee's next call, in a session that stays open.

A real `memory-server serve --transport http` subprocess; the grantee holds one session of the
official MCP SDK client over streamable HTTP; the operator grants and revokes with the real
`memory-server admin` command in another process. Nothing caches grants: every call resolves
its vault and permission in its own transaction (`memory_tools.access.resolve_vault`).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from fastmcp import Client
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from memory_tools.testing.keys import new_key as make_key

from .test_processes import SERVER, _cli, _env, _png, serve_http

pytestmark = pytest.mark.slow

ALICE = "alice@example.com"
BOB = "bob@example.com"


@pytest.fixture
def server(tmp_path: Path, database_url: str) -> Iterator[tuple[str, dict[str, str]]]:
    # A migrated database of the test's own (the template's clone): no embedded PostgreSQL to
    # start for the server and each admin command (the embedded default: test_processes.py).
    env = _env(tmp_path, MEMORY_DATABASE_URL=database_url)
    with serve_http(env, capture=False) as (url, _process):
        yield url, env


def _text(result: Any) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


async def test_a_revoked_grant_refuses_the_grantees_next_call_in_the_same_session(
    server: tuple[str, dict[str, str]],
) -> None:
    url, env = server
    alice, bob = make_key(env, ALICE), make_key(env, BOB, "read")
    async with Client(url + "/mcp", auth=alice) as client:
        saved = await client.call_tool(
            "image_asset_save",
            {"imageBase64": base64.b64encode(_png(3)).decode(), "title": "Shared harbour"},
        )
        asset_id = saved.structured_content["assetId"]
    granted = _cli(
        env, "admin", "grant", "--vault-owner", ALICE, "--vault", "Library", "--to", BOB,
        "--permission", "read",
    )  # fmt: skip
    assert granted.returncode == 0, granted.stderr
    shared = {"vault": f"{ALICE}/Library"}

    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {bob}"}, timeout=30) as http,
        streamable_http_client(url + "/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        listed = await session.call_tool("image_asset_list", shared)
        assert not listed.is_error
        assert [a["assetId"] for a in listed.structured_content["items"]] == [asset_id]
        got = await session.call_tool("image_asset_get", {"assetId": asset_id})
        assert not got.is_error, _text(got)

        revoked = _cli(
            env, "admin", "revoke-grant", "--vault-owner", ALICE, "--vault", "Library",
            "--grantee", BOB, "--json",
        )  # fmt: skip
        assert revoked.returncode == 0, revoked.stderr
        assert json.loads(revoked.stdout)["revoked"] is True

        # The very next calls of the same open session: the vault is gone for Bob.
        refused = await session.call_tool("image_asset_list", shared)
        assert refused.is_error and _text(refused).startswith("not_found:")
        gone = await session.call_tool("image_asset_get", {"assetId": asset_id})
        assert gone.is_error and _text(gone).startswith("not_found:")
        searched = await session.call_tool("image_asset_search", {"query": "harbour"})
        assert not searched.is_error
        assert searched.structured_content["results"] == []
        own = await session.call_tool("image_asset_list", {})
        assert not own.is_error and own.structured_content["items"] == []

    # Revoking again says so and succeeds: the grant is absent, as asked.
    again = _cli(
        env, "admin", "revoke-grant", "--vault-owner", ALICE, "--vault", "Library",
        "--grantee", BOB,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert "nothing was granted" in again.stdout
    listed_grants = _cli(
        env, "admin", "list-grants", "--vault-owner", ALICE, "--vault", "Library", "--json"
    )
    assert json.loads(listed_grants.stdout)["grants"] == []

    # Refusals end with one line, exit status 1 (or 2 for a bad argument), and no traceback.
    console = {**env, "MEMORY_LOG_FORMAT": "console"}
    unknown = _cli(console, "admin", "usage", "--owner", "carol@example.com")
    assert unknown.returncode == 1
    assert "memory-server admin create-identity --owner carol@example.com" in unknown.stderr
    assert "Traceback" not in unknown.stderr + unknown.stdout
    bad = _cli(
        console, "admin", "grant", "--vault-owner", ALICE, "--vault", "Library", "--to", BOB,
        "--permission", "owner",
    )  # fmt: skip
    assert bad.returncode == 2 and "invalid choice: 'owner'" in bad.stderr


async def test_a_revoked_grant_refuses_the_grantees_next_call_over_stdio(
    tmp_path: Path, database_url: str
) -> None:
    """The same over stdio: the grantee's server process keeps running across the revocation."""
    from mcp.client.stdio import StdioServerParameters, stdio_client

    env = _env(tmp_path, MEMORY_DATABASE_URL=database_url)  # migrated: the template's clone
    make_key(env, ALICE)  # the vault's owner (her key is not used: Bob is the caller)
    bob = make_key(env, BOB, "read")
    granted = _cli(
        env, "admin", "grant", "--vault-owner", ALICE, "--vault", "Library", "--to", BOB,
        "--permission", "read",
    )  # fmt: skip
    assert granted.returncode == 0, granted.stderr
    shared = {"vault": f"{ALICE}/Library"}
    server = StdioServerParameters(
        command=SERVER[0],
        args=[*SERVER[1:], "serve", "--transport", "stdio"],
        env={**env, "MEMORY_API_KEY": bob},
    )
    async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        listed = await session.call_tool("image_asset_list", shared)
        assert not listed.is_error, _text(listed)
        revoked = _cli(
            env, "admin", "revoke-grant", "--vault-owner", ALICE, "--vault", "Library",
            "--grantee", BOB,
        )  # fmt: skip
        assert revoked.returncode == 0, revoked.stderr
        refused = await session.call_tool("image_asset_list", shared)
        assert refused.is_error and _text(refused).startswith("not_found:")
