"""Object-store fixtures: one per implementation, each with a way to follow a signed link."""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from memory_db import InvalidStorageKey, ObjectExists, SignatureError
from memory_db.ids import new_id
from memory_db.storage import (
    AssetObjectStore,
    InMemoryAssetObjectStore,
    LocalAssetObjectStore,
    S3AssetObjectStore,
    UrlSigner,
    build_object_key,
    build_staging_key,
)
from memory_db.testing.s3_peers import S3Peer


def tiny_png(seed: int = 0) -> bytes:
    """A valid 1x1 PNG whose pixel depends on ``seed``."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    raw = b"\x00" + bytes([seed % 256, (seed * 7) % 256, (seed * 13) % 256])
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


class Clock:
    """A settable clock for signers (expiry without sleeping)."""

    def __init__(self) -> None:
        import time

        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def _split_link(url: str) -> tuple[str, dict[str, str]]:
    """The object key and query of one of our HMAC links (local route or memory://)."""
    parts = urlsplit(url)
    key = (
        parts.path.split("/objects/", 1)[1] if parts.scheme != "memory" else parts.path.lstrip("/")
    )
    return key, {k: v[0] for k, v in parse_qs(parts.query).items()}


@dataclass
class StoreUnderTest:
    """A store plus how a third party would follow its signed links."""

    name: str
    store: AssetObjectStore
    clock: Clock | None  # None: real time (S3 peers)
    peer: S3Peer | None = None
    bucket: str | None = None
    root: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    async def follow_get(self, url: str) -> tuple[int, dict[str, str], bytes]:
        if self.peer is not None:
            async with httpx.AsyncClient() as client:
                response = await client.get(url)
            return response.status_code, dict(response.headers), response.content
        key, query = _split_link(url)
        try:
            served = self.store.verify_signed_get(  # type: ignore[attr-defined]
                key, query.get("expires", ""), query.get("signature", ""), query.get("filename")
            )
        except (SignatureError, InvalidStorageKey):
            return 403, {}, b""
        body = b"".join([chunk async for chunk in self.store.get_stream(key)])
        # What the memory server's object route answers with (serving/http_routes.py).
        headers = {"content-type": served.content_type, "content-disposition": served.disposition}
        return 200, headers, body

    async def follow_put(self, url: str, headers: dict[str, str], body: bytes) -> int:
        if self.peer is not None:
            async with httpx.AsyncClient() as client:
                response = await client.put(url, headers=headers, content=body)
            return response.status_code
        key, query = _split_link(url)
        try:
            self.store.verify_signed_put(  # type: ignore[attr-defined]
                key, headers["Content-Type"], len(body), query["expires"], query["signature"]
            )
        except SignatureError:
            return 403
        try:
            await self.store.put(key, body, content_type=headers["Content-Type"])
        except ObjectExists:
            return 409
        return 200

    def corrupt(self, key: str, body: bytes) -> None:
        """Replace stored bytes behind the store's back (bit rot, a hostile operator)."""
        if self.peer is not None:
            self.peer.client().put_object(Bucket=self.bucket, Key=key, Body=body)
        elif self.root is not None:
            (self.root / key).write_bytes(body)
        else:
            self.store.objects[key].body = body  # type: ignore[attr-defined]


def make_key(variant: str = "original", ext: str = "png", namespace_id: str | None = None) -> str:
    namespace = namespace_id or new_id("ans")
    if variant == "staging":
        return build_staging_key("test", namespace, new_id("aur"), ext)
    return build_object_key("test", namespace, new_id("aob"), variant, ext)  # type: ignore[arg-type]


async def _s3_store(peer: S3Peer) -> tuple[S3AssetObjectStore, str]:
    return peer.new_store("b")


@pytest.fixture
async def make_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[Callable[[str], Any]]:
    opened: list[AssetObjectStore] = []

    async def factory(kind: str) -> StoreUnderTest:
        secret = hashlib.sha256(kind.encode()).digest()
        if kind == "memory":
            clock = Clock()
            store: Any = InMemoryAssetObjectStore(UrlSigner(secret, clock))
            result = StoreUnderTest(kind, store, clock)
        elif kind == "local":
            clock = Clock()
            root = tmp_path / "objects"
            store = LocalAssetObjectStore(root, UrlSigner(secret, clock), "http://127.0.0.1:9")
            result = StoreUnderTest(kind, store, clock, root=root)
        else:
            peer: S3Peer = request.getfixturevalue(f"{kind}_peer")
            store, bucket = await _s3_store(peer)
            result = StoreUnderTest(kind, store, None, peer=peer, bucket=bucket)
        opened.append(result.store)
        return result

    yield factory
    for store in opened:
        await store.close()


@pytest.fixture
def png() -> Callable[[int], bytes]:
    """Make a tiny valid PNG (distinct per seed)."""
    return tiny_png


@pytest.fixture
def new_key() -> Callable[..., str]:
    """Make a fresh server-shaped object key."""
    return make_key
