"""The HTTP app: bearer keys on /mcp, signed object routes, health."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from fastmcp import Client

from memory_db.ids import new_id
from memory_db.storage import build_object_key
from memory_server import build_http_server
from memory_tools import MemoryServices, admin


def _png() -> bytes:
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(b"\x00\x01\x02\x03"))
        + chunk(b"IEND", b"")
    )


async def test_mcp_over_http_requires_a_valid_bearer_key(
    services: MemoryServices, make_key: Callable[..., Any], serve_http: Any
) -> None:
    key = await make_key("alice@example.com")
    server = build_http_server(services)
    async with serve_http(server) as url:
        async with httpx.AsyncClient() as http:
            missing = await http.post(url, json={})
            assert missing.status_code == 401
            assert missing.headers["www-authenticate"].lower().startswith("bearer")
            wrong = await http.post(url, json={}, headers={"Authorization": "Bearer mk_nope"})
            assert wrong.status_code == 401
        async with Client(url, auth=key) as client:
            created = await client.call_tool("image_project_create", {"name": "Over HTTP"})
            assert created.structured_content["vault"] == "Library"
            listed = await client.call_tool("image_project_list", {})
            assert [p["name"] for p in listed.structured_content["projects"]] == ["Over HTTP"]


async def test_revoked_key_is_refused_immediately(
    services: MemoryServices, make_key: Callable[..., Any], serve_http: Any
) -> None:
    key = await make_key("alice@example.com")
    server = build_http_server(services)
    async with serve_http(server) as url:
        async with Client(url, auth=key) as client:
            await client.call_tool("image_project_list", {})
            async with services.database.unit_of_work() as uow:
                record = await uow.api_keys.resolve(key)
            assert record is not None
        await admin.revoke_key(services.database, record.id)
        async with httpx.AsyncClient() as http:
            response = await http.post(url, json={}, headers={"Authorization": f"Bearer {key}"})
            assert response.status_code == 401


async def test_signed_object_links(services: MemoryServices, serve_http: Any) -> None:
    body = _png()
    key = build_object_key("test", new_id("ans"), new_id("aob"), "original", "png")
    other = build_object_key("test", new_id("ans"), new_id("aob"), "original", "png")
    await services.store.put(
        key, body, content_type="image/png", checksum_sha256=hashlib.sha256(body).hexdigest()
    )
    await services.store.put(other, body, content_type="image/png")
    server = build_http_server(services)
    async with serve_http(server) as url:
        base = url.removesuffix("/mcp")
        signed = await services.store.create_signed_get_url(key, 60)
        path_and_query = signed.removeprefix("http://testserver")
        async with httpx.AsyncClient(base_url=base) as http:
            ok = await http.get(path_and_query)
            assert ok.status_code == 200 and ok.content == body
            assert ok.headers["content-type"] == "image/png"
            assert ok.headers["x-content-type-options"] == "nosniff"
            assert ok.headers["content-disposition"] == 'inline; filename="original.png"'
            assert "default-src 'none'" in ok.headers["content-security-policy"]
            # no signature, a signature for another key, a tampered expiry, a path escape
            assert (await http.get(path_and_query.split("?")[0])).status_code == 403
            assert (await http.get(path_and_query.replace(key, other))).status_code == 403
            tampered = path_and_query.replace("expires=", "expires=9")
            assert (await http.get(tampered)).status_code == 403
            assert (
                await http.get("/objects/../../etc/passwd?expires=1&signature=x")
            ).status_code in (403, 404)
            # the object's bytes were altered at rest: refused, not served
            (services.store.root / key).write_bytes(body[:-1] + b"\x00")  # type: ignore[attr-defined]
            assert (await http.get(path_and_query)).status_code == 500
            health = await http.get("/healthz")
            assert health.json() == {"status": "ok"}


async def test_signed_put_link(services: MemoryServices, serve_http: Any) -> None:
    body = _png()
    key = build_object_key("test", new_id("ans"), new_id("aob"), "original", "png")
    signed = await services.store.create_signed_put_url(
        key, content_type="image/png", content_length=len(body), expires_in=60
    )
    server = build_http_server(services)
    async with serve_http(server) as url:
        base = url.removesuffix("/mcp")
        path = signed.url.removeprefix("http://testserver")
        async with httpx.AsyncClient(base_url=base) as http:
            bad_type = await http.put(path, content=body, headers={"Content-Type": "text/html"})
            assert bad_type.status_code == 403
            longer = await http.put(
                path, content=body + b"x", headers={"Content-Type": "image/png"}
            )
            assert longer.status_code == 403  # the signed length does not match
            assert not (await services.store.head(key)).exists
            ok = await http.put(path, content=body, headers=signed.headers)
            assert ok.status_code == 200
    assert (await services.store.head(key)).bytes == len(body)


async def test_refused_mcp_requests_say_what_is_wrong(
    services: MemoryServices, make_key: Callable[..., Any], serve_http: Any
) -> None:
    """Missing and wrong keys get a 401 that names the code and the fix, in every client."""
    import httpx2
    from fastmcp.client.auth import BearerAuth
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.exceptions import MCPError

    key = await make_key("alice@example.com")
    revoked = await make_key("bob@example.com")
    async with services.database.unit_of_work() as uow:
        record = await uow.api_keys.resolve(revoked)
    assert record is not None
    await admin.revoke_key(services.database, record.id)
    server = build_http_server(services)
    async with serve_http(server) as url:
        async with httpx.AsyncClient() as http:
            missing = await http.post(url, json={})
            assert missing.status_code == 401
            assert missing.headers["www-authenticate"] == "Bearer"  # RFC 6750 §3.1
            assert missing.headers["content-type"] == "application/json"
            error = missing.json()["error"]
            assert error["data"]["code"] == "unauthenticated"
            assert error["message"].startswith("unauthenticated: an API key is required")
            assert "Authorization: Bearer <key>" in error["message"]
            for header in ("Bearer mk_nope", f"Bearer {key}x", f"bearer {key[:-1]}"):
                wrong = await http.post(url, json={}, headers={"Authorization": header})
                assert wrong.status_code == 401
                body = wrong.json()
                assert body["error"]["data"]["code"] == "unauthenticated"
                assert "re-register" not in wrong.text
            wrong = await http.post(url, json={}, headers={"Authorization": "Bearer mk_nope"})
            challenge = wrong.headers["www-authenticate"]
            assert challenge.startswith('Bearer error="invalid_token"')
            assert "unknown or revoked" in wrong.json()["error"]["message"]
            basic = await http.post(url, json={}, headers={"Authorization": "Basic eDp5"})
            assert basic.status_code == 401 and basic.headers["www-authenticate"] == "Bearer"
            # the other routes keep their own answers
            assert (await http.get(url.removesuffix("/mcp") + "/healthz")).status_code == 200

        # fastmcp's client shows the reason, for a missing and for a revoked key
        for bearer, reason in ((None, "an API key is required"), (revoked, "unknown or revoked")):
            with pytest.raises(Exception, match=reason) as raised:
                async with Client(url, auth=None if bearer is None else BearerAuth(bearer)):
                    pass
            assert "unauthenticated" in str(raised.value)

        # the official MCP SDK client surfaces the JSON-RPC error of the 401
        for headers, reason in (
            ({}, "unauthenticated: an API key is required"),
            ({"Authorization": "Bearer mk_nope"}, "unauthenticated: the API key is unknown"),
        ):
            async with (
                httpx2.AsyncClient(headers=headers) as http2,
                streamable_http_client(url, http_client=http2) as (read, write),
                ClientSession(read, write) as session,
            ):
                with pytest.raises(MCPError) as refused:
                    await session.initialize()
            assert str(refused.value.message).startswith(reason)
            assert refused.value.data == {
                "code": "unauthenticated",
                "message": refused.value.message.removeprefix("unauthenticated: "),
            }
        # and a valid key still works through both
        async with Client(url, auth=key) as client:
            assert (await client.call_tool("image_project_list", {})).structured_content
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}) as http2,
            streamable_http_client(url, http_client=http2) as (read, write),
            ClientSession(read, write) as session,
        ):
            init = await session.initialize()
            assert init.server_info.name == "image-memory"
