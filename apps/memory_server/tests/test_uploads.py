"""Direct uploads: initiate, PUT to the signed URL, finalise — over a real HTTP server."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import httpx
import pytest
import pyvips
from sqlalchemy import text

from memory_db.embedding import LocalEmbedder
from memory_server.app import build_http_server
from memory_tools import MemoryServices, admin


def _png(seed: int = 1) -> bytes:
    xyz = pyvips.Image.xyz(32, 24)
    red = ((xyz[0] * (seed + 3)) % 256).cast("uchar")
    return (
        red.bandjoin([red, (xyz[1] * 9 % 256).cast("uchar")])
        .copy(interpretation="srgb")
        .pngsave_buffer()
    )


def _jpeg() -> bytes:
    return pyvips.Image.xyz(16, 16)[0].cast("uchar").jpegsave_buffer()


@pytest.fixture
def uploading(services: MemoryServices) -> MemoryServices:
    return replace(services, embedder=LocalEmbedder())


async def _state(services: MemoryServices, owner: str) -> tuple[int, int, int]:
    async with services.database.engine.connect() as conn:
        row = (
            await conn.execute(
                text(
                    "SELECT used_bytes, reserved_bytes, (SELECT count(*) FROM mem_assets "
                    "WHERE owner_identity = :o) FROM mem_asset_namespaces WHERE owner_identity = :o"
                ),
                {"o": owner},
            )
        ).one()
    return int(row[0]), int(row[1]), int(row[2])


def _files(services: MemoryServices) -> list[str]:
    root = services.store.root  # type: ignore[attr-defined]
    return (
        sorted(p.name for p in root.rglob("*") if p.is_file() and not p.name.endswith(".json"))
        if root.exists()
        else []
    )


async def _upload(
    http: httpx.AsyncClient,
    base: str,
    key: str,
    data: bytes,
    content_type: str = "image/png",
    **extra: Any,
) -> httpx.Response:
    auth = {"Authorization": f"Bearer {key}"}
    started = await http.post(
        f"{base}/uploads",
        json={"contentType": content_type, "contentLength": len(data), **extra},
        headers=auth,
    )
    assert started.status_code == 201, started.text
    ticket = started.json()
    signed = httpx.URL(ticket["url"])
    put = await http.request(
        ticket["method"],
        httpx.URL(base).join(signed.raw_path.decode()),
        content=data,
        headers=ticket["headers"],
    )
    assert put.status_code == 200, put.text
    return await http.post(f"{base}{ticket['completeUrl']}", json={}, headers=auth)


async def test_upload_initiate_put_and_complete(
    uploading: MemoryServices, serve_http: Callable[..., Any], make_key: Callable[..., Any]
) -> None:
    key = await make_key("up@example.com")
    data = _png()
    async with serve_http(build_http_server(uploading)) as mcp_url, httpx.AsyncClient() as http:
        base = mcp_url.removesuffix("/mcp")
        done = await _upload(http, base, key, data, title="Uploaded gradient", tags=["Up"])
        assert done.status_code == 200, done.text
        asset = done.json()
        assert asset["assetId"].startswith("ast_") and asset["embeddingStatus"] == "pending"
        assert (asset["width"], asset["height"], asset["bytes"]) == (32, 24, len(data))
        assert len(asset["jobIds"]) == 2
        used, reserved, assets = await _state(uploading, "up@example.com")
        assert used > len(data) and reserved == 0 and assets == 1
        assert sorted(_files(uploading)) == ["original.png", "preview.webp"]
        # The same bytes again: a second asset sharing the stored object, nothing new stored.
        again = await _upload(http, base, key, data, title="Other title")
        assert again.json()["objectId"] == asset["objectId"] and again.json()["deduplicated"]
        assert sorted(_files(uploading)) == ["original.png", "preview.webp"]


async def test_a_lying_upload_is_refused_and_its_bytes_removed(
    uploading: MemoryServices, serve_http: Callable[..., Any], make_key: Callable[..., Any]
) -> None:
    key = await make_key("liar@example.com")
    async with serve_http(build_http_server(uploading)) as mcp_url, httpx.AsyncClient() as http:
        base = mcp_url.removesuffix("/mcp")
        refused = await _upload(http, base, key, _jpeg(), content_type="image/png")
    assert refused.status_code == 422
    assert refused.json()["error"]["code"] == "invalid_image"
    assert "image/jpeg, not the declared image/png" in refused.json()["error"]["message"]
    assert _files(uploading) == []
    assert await _state(uploading, "liar@example.com") == (0, 0, 0)


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"contentType": "image/svg+xml", "contentLength": 10}, 422, "invalid_input"),
        ({"contentType": "image/png", "contentLength": 0}, 422, "invalid_input"),
        ({"contentType": "image/png", "contentLength": 10**12}, 422, "invalid_input"),
        ({"contentType": "image/png", "contentLength": 10, "extra": 1}, 422, "invalid_input"),
        ({"contentType": "image/png", "contentLength": 10, "vault": "Nope"}, 404, "not_found"),
        ({"contentType": "image/png", "contentLength": 5_000_000}, 507, "quota_exceeded"),
    ],
)
async def test_bad_initiations_are_refused_and_reserve_nothing(
    uploading: MemoryServices,
    serve_http: Callable[..., Any],
    database: Any,
    make_key: Callable[..., Any],
    body: dict[str, Any],
    status: int,
    code: str,
) -> None:
    await admin.create_identity(database, "small@example.com", 1_000_000)
    key = await make_key("small@example.com")
    async with serve_http(build_http_server(uploading)) as mcp_url, httpx.AsyncClient() as http:
        base = mcp_url.removesuffix("/mcp")
        answer = await http.post(
            f"{base}/uploads", json=body, headers={"Authorization": f"Bearer {key}"}
        )
    assert answer.status_code == status, answer.text
    assert answer.json()["error"]["code"] == code
    assert await _state(uploading, "small@example.com") == (0, 0, 0)


async def test_uploads_need_a_key_and_belong_to_their_caller(
    uploading: MemoryServices, serve_http: Callable[..., Any], make_key: Callable[..., Any]
) -> None:
    owner = await make_key("owner@example.com")
    other = await make_key("other@example.com")
    async with serve_http(build_http_server(uploading)) as mcp_url, httpx.AsyncClient() as http:
        base = mcp_url.removesuffix("/mcp")
        anonymous = await http.post(
            f"{base}/uploads", json={"contentType": "image/png", "contentLength": 5}
        )
        assert anonymous.status_code == 401
        started = await http.post(
            f"{base}/uploads",
            json={"contentType": "image/png", "contentLength": 5},
            headers={"Authorization": f"Bearer {owner}"},
        )
        upload_id = started.json()["uploadId"]
        early = await http.post(
            f"{base}/uploads/{upload_id}/complete",
            json={},
            headers={"Authorization": f"Bearer {owner}"},
        )
        assert (
            early.status_code == 422 and "nothing was uploaded" in early.json()["error"]["message"]
        )
        stolen = await http.post(
            f"{base}/uploads/{upload_id}/complete",
            json={},
            headers={"Authorization": f"Bearer {other}"},
        )
        assert stolen.status_code == 404 and stolen.json()["error"]["code"] == "not_found"
