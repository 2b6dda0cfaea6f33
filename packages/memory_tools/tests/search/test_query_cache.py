"""Repeated search queries within the TTL make no provider request (memory_tools.query_cache).

Counted at the Jina-protocol test server; the cache never answers for another model after
the alias moves, is keyed by the query and not by the caller, and a hit costs zero tokens in
the usage ledger and the provenance. A repeated query image is not decoded again either, and
an image that was refused is refused again.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import replace
from typing import Any

import pytest
from pydantic import SecretStr
from sqlalchemy import text

from memory_db.embedding import EmbedderIdentity, JinaEmbedder
from memory_db.testing.jina_server import MODEL, JinaTestServer
from memory_db.unit_of_work import session_of
from memory_db.vectors import DEFAULT_ALIAS, create_index, switch_alias
from memory_tools import MemoryServices, metrics
from memory_tools.access import Caller
from memory_tools.errors import InvalidImage
from memory_tools.ingest.images import InspectedImage
from memory_tools.operations import admin
from memory_tools.query_cache import QueryEmbeddingCache, QueryKey, QueryPreviews
from memory_tools.workflows import search as search_module
from memory_tools.workflows.search import AssetSearcher, SearchRequest

from ..pictures import b64, picture

ALICE = Caller("alice@example.com", "akey_a", frozenset({"read", "write"}))
BOB = Caller("bob@example.com", "akey_b", frozenset({"read", "write"}))


def _hits() -> float:
    value = metrics.REGISTRY.get_sample_value(
        "memory_query_embedding_cache_total", {"result": "hit"}
    )
    return value or 0.0


def test_entries_expire_and_the_least_recently_used_goes_first() -> None:
    now = [0.0]
    cache = QueryEmbeddingCache(2, 10.0, clock=lambda: now[0])
    keys = [QueryKey.of("jina/m/4", "retrieval.query", 4, f"q{i}", None) for i in range(3)]
    cache.put(keys[0], [1.0, 0.0, 0.0, 0.0])
    cache.put(keys[1], [0.0, 1.0, 0.0, 0.0])
    assert cache.get(keys[0]) == [1.0, 0.0, 0.0, 0.0]  # now the most recently used
    cache.put(keys[2], [0.0, 0.0, 1.0, 0.0])
    assert cache.get(keys[1]) is None and len(cache) == 2
    now[0] = 10.0
    assert cache.get(keys[0]) is None and cache.get(keys[2]) is None
    # The key is the embedder, task, dimensions and content: an image by its SHA-256.
    image = QueryKey.of("jina/m/4", "retrieval.query", 4, None, b"png bytes")
    assert image != QueryKey.of("jina/m/8", "retrieval.query", 4, None, b"png bytes")
    assert image.image_sha256 and not image.text_sha256
    off = QueryEmbeddingCache(0, 10.0)
    off.put(image, [1.0])
    assert not off.enabled and off.get(image) is None


async def test_repeated_queries_are_embedded_once_and_never_across_a_model_switch(
    services: MemoryServices,
) -> None:
    server = JinaTestServer({"k1"}).start()
    settings = services.settings.model_copy(
        update={"jina_api_keys": [SecretStr("k1")], "jina_base_url": server.base_url}
    )
    embedder = JinaEmbedder(api_keys=["k1"], base_url=server.base_url, model=MODEL)
    searching = replace(services, embedder=embedder, settings=settings)
    for caller in (ALICE, BOB):
        await admin.create_identity(searching.database, caller.identity, 10**9)
    searcher = AssetSearcher(searching)
    hits = _hits()
    try:
        for caller in (ALICE, ALICE, BOB):  # the same text, twice by alice, once by bob
            await searcher.search(caller, SearchRequest(query="a red harbour at dawn"))
        assert [seen.task for seen in server.state.seen] == ["retrieval.query"]
        assert _hits() - hits == 2
        await searcher.search(ALICE, SearchRequest(query="a blue harbour"))  # another text
        assert len(server.state.seen) == 2

        # The alias moves to an index of another embedder (here: 512 dimensions): the cached
        # 1,024-d vectors of the old index are never used for it.
        async with searching.database.unit_of_work() as uow:
            await create_index(
                session_of(uow),
                "assets_jina_512",
                dimensions=512,
                identity=EmbedderIdentity("jina", MODEL, 512),
            )
            await switch_alias(session_of(uow), DEFAULT_ALIAS, "assets_jina_512")
        await searcher.search(ALICE, SearchRequest(query="a red harbour at dawn"))
        assert len(server.state.seen) == 3

        async with searching.database.engine.connect() as conn:
            ledger: list[Any] = list(
                await conn.execute(
                    text(
                        "SELECT owner_identity, total_tokens FROM mem_usage_ledger "
                        "WHERE source = 'embed_image_query' ORDER BY created_at, id"
                    )
                )
            )
            provenance: list[Any] = list(
                await conn.execute(
                    text(
                        "SELECT detail FROM mem_provenance WHERE operation = "
                        "'asset_search' ORDER BY created_at, id"
                    )
                )
            )
        # Five searches, three provider requests: the two cache hits cost nothing.
        assert [tokens > 0 for _owner, tokens in ledger] == [True, False, False, True, True]
        assert [row[0]["queryEmbeddingCached"] for row in provenance] == [
            False,
            True,
            True,
            False,
            False,
        ]
        assert provenance[1][0]["queryTokens"] == 0
    finally:
        await searching.embedders.close()
        await embedder.close()
        server.stop()


def test_previews_are_bounded_by_count_bytes_and_time() -> None:
    now = [0.0]
    previews = QueryPreviews(3, 10.0, max_bytes=100, clock=lambda: now[0])
    previews.put("a", b"x" * 40)
    previews.put("b", b"y" * 40)
    assert previews.get("a") == b"x" * 40  # now the most recently used
    previews.put("c", b"z" * 40)  # 120 bytes: the least recently used goes
    assert previews.get("b") is None and len(previews) == 2 and previews.bytes == 80
    previews.put("a", b"x" * 10)  # kept again: counted once
    assert previews.bytes == 50
    previews.put("big", b"w" * 101)  # larger than the whole budget: not kept, nothing evicted
    assert previews.get("big") is None and len(previews) == 2
    previews.put("d", b"v")
    previews.put("e", b"u")  # a fourth entry: over the count
    assert len(previews) == 3 and previews.get("c") is None
    now[0] = 10.0
    assert previews.get("a") is None and previews.get("d") is None and previews.bytes == 1
    off = QueryPreviews(0, 10.0)
    off.put("a", b"x")
    assert off.get("a") is None and len(off) == 0


@pytest.fixture
def decodes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The SHA-256 of every query image the search workflow decodes."""
    seen: list[str] = []
    decode = search_module.inspect_image

    async def counted(data: bytes, **kwargs: Any) -> InspectedImage:
        seen.append(hashlib.sha256(data).hexdigest())
        return await decode(data, **kwargs)

    monkeypatch.setattr(search_module, "inspect_image", counted)
    return seen


async def test_a_repeated_query_image_is_decoded_once(
    saving: MemoryServices, decodes: list[str]
) -> None:
    await admin.create_identity(saving.database, ALICE.identity, 10**9)
    await admin.create_identity(saving.database, BOB.identity, 10**9)
    searcher = AssetSearcher(saving)
    first, second = b64(picture(11)), b64(picture(12))
    one = await searcher.search(ALICE, SearchRequest(image_base64=first))
    again = await searcher.search(BOB, SearchRequest(image_base64=first, query="harbour"))
    await searcher.search(ALICE, SearchRequest(image_base64=second))
    await searcher.search(ALICE, SearchRequest(image_base64=first))
    assert decodes == [hashlib.sha256(picture(n)).hexdigest() for n in (11, 12)]
    assert one.mode == "image" and again.mode == "fused"
    assert len(saving.query_previews) == 2
    # Bytes that are no image are refused every time: a refusal is not kept.
    broken = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 64).decode()
    for _ in range(2):
        with pytest.raises(InvalidImage):
            await searcher.search(ALICE, SearchRequest(image_base64=broken))
    assert len(decodes) == 4 and len(saving.query_previews) == 2


async def test_with_the_cache_off_every_query_image_is_decoded(
    saving: MemoryServices, decodes: list[str]
) -> None:
    settings = saving.settings.model_copy(update={"asset_query_cache_size": 0})
    services = replace(saving, settings=settings)
    await admin.create_identity(services.database, ALICE.identity, 10**9)
    searcher = AssetSearcher(services)
    for _ in range(2):
        await searcher.search(ALICE, SearchRequest(image_base64=b64(picture(11))))
    assert len(decodes) == 2 and len(services.query_previews) == 0
