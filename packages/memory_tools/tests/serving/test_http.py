"""The HTTP app: bearer keys on /mcp, signed object routes, health."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from fastmcp import Client

from memory_db.ids import new_id
from memory_db.storage import build_object_key, build_staging_key
from memory_tools import MemoryServices
from memory_tools.operations import admin
from memory_tools.serving import build_http_server


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


async def _stored_object(services: MemoryServices, owner: str, body: bytes) -> str:
    """An object row for ``body`` and its bytes in the store; returns the original's key."""
    await admin.create_identity(services.database, owner, 10**9)
    digest = hashlib.sha256(body).hexdigest()
    async with services.database.unit_of_work() as uow:
        namespace = (await uow.quota.usage(owner)).namespace_id
        object_id = new_id("aob")
        key = build_object_key("test", namespace, object_id, "original", "png")
        await uow.objects.create(
            object_id=object_id,
            owner=owner,
            namespace_id=namespace,
            sha256=digest,
            storage_key=key,
            preview_storage_key=build_object_key("test", namespace, object_id, "preview"),
            preview_sha256=digest,
            mime_type="image/png",
            extension="png",
            nbytes=len(body),
            preview_bytes=len(body),
            width=1,
            height=1,
            etag=None,
            version_id=None,
        )
    await services.store.put(key, body, content_type="image/png", checksum_sha256=digest)
    return key


async def test_signed_object_links(services: MemoryServices, serve_http: Any) -> None:
    body = _png()
    key = await _stored_object(services, "links@example.com", body)
    other = await _stored_object(services, "other@example.com", body)
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
            # an original is only ever a download (previews are shown inline)
            assert ok.headers["content-disposition"] == 'attachment; filename="original.png"'
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


async def test_object_reads_are_verified_against_the_database_not_the_sidecar(
    services: MemoryServices, serve_http: Any
) -> None:
    body, html = _png(), b"<html><script>alert(1)</script></html>"
    key = await _stored_object(services, "sidecar@example.com", body)
    # Bytes and sidecar replaced together (what anyone who can write the store can do).
    path = services.store.root / key  # type: ignore[attr-defined]
    path.write_bytes(html)
    sidecar = path.with_name(path.name + ".json")
    sidecar.write_text(
        json.dumps(
            {
                "bytes": len(html),
                "content_type": "image/png",
                "sha256": hashlib.sha256(html).hexdigest(),
            }
        )
    )
    # Bytes with no object row at all are not served either, whatever the sidecar says.
    stray = build_object_key("test", new_id("ans"), new_id("aob"), "original", "png")
    await services.store.put(stray, body, content_type="image/png")
    async with serve_http(build_http_server(services)) as url, httpx.AsyncClient() as http:
        base = url.removesuffix("/mcp")
        for target, status in ((key, 500), (stray, 404)):
            signed = await services.store.create_signed_get_url(target, 60)
            answer = await http.get(base + signed.removeprefix("http://testserver"))
            assert answer.status_code == status, answer.text
            assert html not in answer.content and body not in answer.content


@pytest.mark.parametrize(
    ("param", "value"),
    [("signature", "é"), ("signature", "\u202e" * 43), ("expires", "²"), ("expires", "١٢٣")],
)
async def test_non_ascii_link_parameters_are_refused_with_403(
    services: MemoryServices, serve_http: Any, param: str, value: str
) -> None:
    body = _png()
    key = await _stored_object(services, "ascii@example.com", body)
    staging = build_staging_key("test", new_id("ans"), new_id("aur"), "png")
    get_link = await services.store.create_signed_get_url(key, 60)
    put_link = await services.store.create_signed_put_url(
        staging, content_type="image/png", content_length=len(body), expires_in=60
    )
    async with serve_http(build_http_server(services)) as url, httpx.AsyncClient() as http:
        base = url.removesuffix("/mcp")
        for method, link in (("GET", get_link), ("PUT", put_link.url)):
            parts = httpx.URL(link)
            query = {**dict(parts.params), param: value}
            answer = await http.request(
                method,
                f"{base}{parts.path}",
                params=query,
                content=body if method == "PUT" else None,
                headers={"Content-Type": "image/png"} if method == "PUT" else None,
            )
            assert answer.status_code == 403, (method, answer.status_code, answer.text[:200])
            assert "Traceback" not in answer.text


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
            assert missing.headers["www-authenticate"] == "Bearer"  # RFC 6750, section 3.1
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
