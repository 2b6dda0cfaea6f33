"""What the upload routes refuse, and how: NUL, loose JSON types, snake_case, missing keys."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from memory_db import Database
from memory_tools import MemoryServices
from memory_tools.serving.app import build_http_server


async def _reserved(database: Database, owner: str) -> tuple[int, int]:
    async with database.engine.connect() as conn:
        row = (
            await conn.execute(
                text(
                    "SELECT reserved_bytes, (SELECT count(*) FROM mem_asset_upload_reservations r "
                    "WHERE r.owner_identity = :o) FROM mem_asset_namespaces "
                    "WHERE owner_identity = :o"
                ),
                {"o": owner},
            )
        ).one()
    return int(row[0]), int(row[1])


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"contentType": "image/png", "contentLength": 10, "vault": "Library\x00"},
            "vault: must not contain a NUL character (\\u0000)",
        ),
        (
            {"contentType": "image/png", "contentLength": 10, "tags": ["a\x00"]},
            "tags: must not contain a NUL character (\\u0000)",
        ),
        (
            {"contentType": "image/png\x00", "contentLength": 10},
            "contentType: must not contain a NUL character (\\u0000)",
        ),
        (
            {"contentType": "image/png", "contentLength": 10, "sourceRef": {"page": "\x00"}},
            "sourceRef.page: must not contain a NUL character (\\u0000)",
        ),
        (
            {"contentType": "image/png", "contentLength": True},
            "contentLength: Input should be a valid integer",
        ),
        (
            {"contentType": "image/png", "contentLength": "100"},
            "contentLength: Input should be a valid integer",
        ),
        (
            {"contentType": "image/png", "contentLength": 10.5},
            "contentLength: Input should be a valid integer",
        ),
        (
            {"content_type": "image/png", "contentLength": 10},
            "contentType: is required; content_type: is not a known field; "
            "did you mean `contentType`?",
        ),
        (
            {"contentType": "image/png", "content_length": 10},
            "contentLength: is required; content_length: is not a known field; "
            "did you mean `contentLength`?",
        ),
    ],
)
async def test_bad_upload_bodies_are_refused_and_reserve_nothing(
    services: MemoryServices,
    database: Database,
    serve_http: Callable[..., Any],
    make_key: Callable[..., Any],
    body: dict[str, Any],
    message: str,
) -> None:
    key = await make_key("strict@example.com")
    async with serve_http(build_http_server(services)) as mcp_url, httpx.AsyncClient() as http:
        answer = await http.post(
            mcp_url.removesuffix("/mcp") + "/uploads",
            json=body,
            headers={"Authorization": f"Bearer {key}"},
        )
    assert answer.status_code == 422, answer.text
    assert answer.headers["content-type"] == "application/json"
    assert answer.json() == {"error": {"code": "invalid_input", "message": message}}
    assert await _reserved(database, "strict@example.com") == (0, 0)


async def test_completing_with_a_nul_is_refused_as_invalid_input(
    services: MemoryServices, serve_http: Callable[..., Any], make_key: Callable[..., Any]
) -> None:
    key = await make_key("complete@example.com")
    auth = {"Authorization": f"Bearer {key}"}
    async with serve_http(build_http_server(services)) as mcp_url, httpx.AsyncClient() as http:
        base = mcp_url.removesuffix("/mcp")
        in_path = await http.post(f"{base}/uploads/aur_%00/complete", json={}, headers=auth)
        in_body = await http.post(
            f"{base}/uploads/aur_x/complete", json={"vault": "Library\x00"}, headers=auth
        )
    assert in_path.status_code == 422, in_path.text
    assert in_path.json()["error"] == {
        "code": "invalid_input",
        "message": "uploadId: must not contain a NUL character (\\u0000)",
    }
    assert in_body.status_code == 422, in_body.text
    assert in_body.json()["error"]["message"] == (
        "vault: must not contain a NUL character (\\u0000)"
    )


async def test_refused_keys_get_a_bearer_challenge(
    services: MemoryServices, serve_http: Callable[..., Any]
) -> None:
    """RFC 6750, section 3.1, as on /mcp: ``Bearer`` with no key, ``invalid_token`` if bad."""
    body = {"contentType": "image/png", "contentLength": 10}
    async with serve_http(build_http_server(services)) as mcp_url, httpx.AsyncClient() as http:
        base = mcp_url.removesuffix("/mcp")
        for path in ("/uploads", "/uploads/aur_x/complete"):
            missing = await http.post(base + path, json=body)
            assert missing.status_code == 401
            assert missing.headers["www-authenticate"] == "Bearer"
            assert missing.json()["error"]["code"] == "unauthenticated"
            basic = await http.post(base + path, json=body, headers={"Authorization": "Basic eDp5"})
            assert basic.status_code == 401 and basic.headers["www-authenticate"] == "Bearer"
            wrong = await http.post(
                base + path, json=body, headers={"Authorization": "Bearer mk_nope"}
            )
            assert wrong.status_code == 401
            assert wrong.headers["www-authenticate"] == (
                'Bearer error="invalid_token", '
                'error_description="the API key is unknown or revoked"'
            )
            assert wrong.json()["error"]["code"] == "unauthenticated"


async def test_a_body_over_64_kib_is_refused_declared_or_streamed(
    services: MemoryServices,
    serve_http: Callable[..., Any],
    make_key: Callable[..., Any],
    database: Database,
) -> None:
    """Declared (Content-Length) or streamed (chunked), a body past 64 KiB is invalid_input."""
    key = await make_key("alice@example.com")
    auth = {"Authorization": f"Bearer {key}"}

    async def chunked() -> Any:
        for _ in range(32):  # 2 MiB without a Content-Length
            yield b" " * 65536

    async with serve_http(build_http_server(services)) as mcp_url, httpx.AsyncClient() as http:
        base = mcp_url.removesuffix("/mcp")
        for content in (b" " * 70_000, chunked()):
            refused = await http.post(base + "/uploads", content=content, headers=auth)
            assert refused.status_code == 422
            assert refused.json()["error"] == {
                "code": "invalid_input",
                "message": "the request body is larger than 65536 bytes",
            }
    assert await _reserved(database, "alice@example.com") == (0, 0)
