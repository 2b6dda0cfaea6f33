"""Pausing, resuming and revoking one agent's key, against a real server and two MCP clients.

A real `memory-server serve --transport http` subprocess; two keys of one owner, each held by
an open session of the official MCP SDK client over streamable HTTP; the operator switches key
A with the real `memory-server admin` commands in other processes. Each switch must hold on
A's very next request (the access trigger clears the server's key cache before the command
returns), and never touch B. Along the way, the asset A saves names A as ``savedBy``, and
listing and search filter by it.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from .test_processes import _cli, _env, _png, serve_http

pytestmark = pytest.mark.slow

OWNER = "agents@example.com"


@pytest.fixture
def server(tmp_path: Path, database_url: str) -> Iterator[tuple[str, dict[str, str]]]:
    # A migrated database of the test's own (the template's clone): no embedded PostgreSQL to
    # start for the server and each admin command (the embedded default: test_processes.py).
    env = _env(tmp_path, MEMORY_DATABASE_URL=database_url)
    with serve_http(env, capture=False) as (url, _process):
        yield url, env


def _key(env: dict[str, str], label: str) -> tuple[str, str]:
    """A new key of OWNER labelled ``label``: ``(key id, secret)``."""
    made = _cli(
        env, "admin", "create-key", "--owner", OWNER, "--scopes", "read,write",
        "--label", label, "--note", f"the {label} agent", "--json",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    answer = json.loads(made.stdout)
    assert answer["note"] == f"the {label} agent"
    return answer["keyId"], answer["key"]


@asynccontextmanager
async def _session(url: str, secret: str) -> AsyncIterator[ClientSession]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {secret}"}, timeout=30) as http,
        streamable_http_client(url + "/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def _text(result: Any) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


def _refusal(url: str, secret: str) -> tuple[int, dict[str, Any], str]:
    """What the MCP endpoint answers ``secret`` for a tools/list: status, error, challenge."""
    answer = httpx.post(
        url + "/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
        headers={
            "Authorization": f"Bearer {secret}",
            "Accept": "application/json, text/event-stream",
        },
        timeout=30,
    )
    body = answer.json() if answer.status_code == 401 else {}
    return answer.status_code, body.get("error", {}), answer.headers.get("www-authenticate", "")


async def _refused(session: ClientSession) -> str:
    """The refusal a session meets on its next call (the transport's 401, as the SDK raises it)."""
    try:
        result = await session.call_tool("image_asset_list", {})
    except Exception as exc:  # the SDK surfaces a 401 as an error of its own kind
        return str(exc)
    assert result.is_error, "the call was answered"
    return _text(result)


async def test_pause_resume_and_revoke_hold_on_the_next_call_and_spare_other_keys(
    server: tuple[str, dict[str, str]],
) -> None:
    url, env = server
    created = _cli(env, "admin", "create-identity", "--owner", OWNER)
    assert created.returncode == 0, created.stderr
    a_id, a_secret = _key(env, "claude-code@laptop")
    b_id, b_secret = _key(env, "cursor@desktop")

    async with _session(url, a_secret) as a, _session(url, b_secret) as b:
        saved = await a.call_tool(
            "image_asset_save",
            {"imageBase64": base64.b64encode(_png(5)).decode(), "title": "Pier at dusk"},
        )
        assert not saved.is_error, _text(saved)
        asset_id = saved.structured_content["assetId"]
        by_b = await b.call_tool(
            "image_asset_save",
            {"imageBase64": base64.b64encode(_png(6)).decode(), "title": "Pier at dawn"},
        )
        assert not by_b.is_error, _text(by_b)

        # savedBy: the key's id and label on get; list and search keep only its saves.
        got = await b.call_tool("image_asset_get", {"assetId": asset_id})
        assert got.structured_content["savedBy"] == {"keyId": a_id, "label": "claude-code@laptop"}
        listed = await b.call_tool("image_asset_list", {"savedBy": a_id})
        assert [i["assetId"] for i in listed.structured_content["items"]] == [asset_id]
        found = await b.call_tool("image_asset_search", {"query": "pier", "savedBy": a_id})
        assert [r["assetId"] for r in found.structured_content["results"]] == [asset_id]
        assert secret_free(got.structured_content, a_secret)

        # Pause A: its very next call is refused, saying it is paused; B goes on.
        paused = _cli(env, "admin", "pause-key", a_id, "--json")
        assert paused.returncode == 0, paused.stderr
        assert json.loads(paused.stdout)["state"] == "paused"
        assert "paused" in await _refused(a)
        status, error, challenge = _refusal(url, a_secret)
        assert status == 401 and error["data"]["code"] == "unauthenticated"
        assert error["data"]["reason"] == "key_paused" and "is paused" in error["message"]
        assert 'error="invalid_token"' in challenge
        still = await b.call_tool("image_asset_list", {})
        assert not still.is_error and len(still.structured_content["items"]) == 2
        again = _cli(env, "admin", "pause-key", a_id)
        assert again.returncode == 0 and "already paused" in again.stdout

    # Resume A: a new session of it works at once.
    resumed = _cli(env, "admin", "resume-key", a_id)
    assert resumed.returncode == 0 and f"key {a_id} resumed" in resumed.stdout
    async with _session(url, a_secret) as a, _session(url, b_secret) as b:
        back = await a.call_tool("image_asset_list", {})
        assert not back.is_error, _text(back)

        # Revoke A: refused for good, as unknown or revoked (not paused); B untouched.
        revoked = _cli(env, "admin", "revoke-key", a_id)
        assert revoked.returncode == 0, revoked.stderr
        assert "unknown or revoked" in await _refused(a)
        status, error, _challenge = _refusal(url, a_secret)
        assert status == 401 and "reason" not in error["data"]
        assert not (await b.call_tool("image_asset_list", {})).is_error
    for verb in ("pause-key", "resume-key"):
        refused = _cli(env, "admin", verb, a_id)
        assert refused.returncode == 1 and "revoked for good" in refused.stderr
    unknown = _cli(env, "admin", "pause-key", "akey_nothing")
    assert unknown.returncode == 1 and "not_found" in unknown.stderr

    # The listing shows each key as it now stands.
    keys = json.loads(_cli(env, "admin", "list-keys", "--owner", OWNER, "--json").stdout)["keys"]
    states = {k["keyId"]: k["state"] for k in keys}
    assert states == {a_id: "revoked", b_id: "active"}


def secret_free(answer: dict[str, Any], secret: str) -> bool:
    """Whether ``answer`` holds neither the key's secret nor anything like a hash of it."""
    text = json.dumps(answer)
    return secret not in text and "keyHash" not in text
