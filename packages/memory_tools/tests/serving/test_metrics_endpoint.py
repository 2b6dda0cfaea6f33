"""``GET /metrics`` over real HTTP: who may read it, what a session of real tool calls counts,
the queue read from the database at scrape time, and that the answer names no id, owner, key
or URL."""

from __future__ import annotations

import base64
from collections.abc import AsyncGenerator, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import httpx
import pyvips
from mcp_types import CallToolResult
from prometheus_client.parser import text_string_to_metric_families

from memory_db.embedding import LocalEmbedder
from memory_tools import MemoryServices
from memory_tools.serving import build_http_server
from memory_tools.serving.job_worker import job_worker
from memory_tools.serving.metrics_route import is_loopback_only

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _photo(seed: int) -> bytes:
    xyz = pyvips.Image.xyz(320, 240)
    red = ((xyz[0] * (seed + 3) + xyz[1]) % 256).cast("uchar")
    green = ((xyz[1] * (seed + 5)) % 256).cast("uchar")
    return red.bandjoin([green, red]).copy(interpretation="srgb").jpegsave_buffer(Q=80)


@asynccontextmanager
async def _session(url: str, key: str) -> AsyncGenerator[Any]:
    """An official MCP SDK client session over streamable HTTP with a bearer key."""
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}) as http2,
        streamable_http_client(url, http_client=http2) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def _samples(text: str) -> Samples:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_loopback_only_hosts() -> None:
    assert all(is_loopback_only(h) for h in ("127.0.0.1", "::1", "[::1]", "localhost", "127.0.0.2"))
    assert not any(is_loopback_only(h) for h in ("0.0.0.0", "::", "10.0.0.5", "example.org", None))


async def test_metrics_access_and_what_a_session_counts(
    services: MemoryServices, make_key: Callable[..., Any], serve_http: Any
) -> None:
    services = replace(services, embedder=LocalEmbedder())
    owner = "alice@example.com"
    writer = await make_key(owner, ("read", "write", "destructive"))
    operator = await make_key("ops@example.com", ("read", "admin"))
    admin = {"Authorization": f"Bearer {operator}"}
    # Not bound to loopback (the default when the address is unknown): admin keys only.
    async with serve_http(build_http_server(services)) as url, httpx.AsyncClient() as http:
        scrape = url.removesuffix("/mcp") + "/metrics"
        assert (await http.get(scrape)).status_code == 401
        refused = await http.get(scrape, headers={"Authorization": "Bearer mk_not_a_key"})
        assert refused.status_code == 401 and "Bearer" in refused.headers["www-authenticate"]
        no_admin = await http.get(scrape, headers={"Authorization": f"Bearer {writer}"})
        assert no_admin.status_code == 403 and "admin" in no_admin.text
        first = await http.get(scrape, headers=admin)
        assert first.status_code == 200
        assert first.headers["content-type"].startswith("text/plain")
        before = _samples(first.text)

        async with _session(url, writer) as session:
            saved: CallToolResult = await session.call_tool(
                "image_asset_save",
                {"imageBase64": base64.b64encode(_photo(1)).decode(), "title": "Harbour at dusk"},
            )
            assert not saved.is_error and saved.structured_content is not None
            asset_id = saved.structured_content["assetId"]
            again = await session.call_tool(
                "image_asset_save",
                {"imageBase64": base64.b64encode(_photo(1)).decode(), "title": "The same bytes"},
            )
            assert not again.is_error
            bad = await session.call_tool("image_asset_save", {"imageBase64": "bm90IGFuIGltYWdl"})
            assert bad.is_error
            # Two saves, two jobs each, none run yet: the queue, read from the database.
            queued = _samples((await http.get(scrape, headers=admin)).text)
            assert _value(queued, "memory_embedding_queue_depth") == 4
            assert _value(queued, "memory_embedding_queue_oldest_age_seconds") > 0
            assert _value(queued, "memory_embedding_stale_leases") == 0

            await job_worker(services).drain()
            found = await session.call_tool("image_asset_search", {"query": "harbour"})
            assert not found.is_error
            nothing = await session.call_tool(
                "image_asset_search", {"query": "harbour", "tags": ["no-such-tag"]}
            )
            assert not nothing.is_error
            got = await session.call_tool(
                "image_asset_get", {"assetId": asset_id, "includeOriginal": True}
            )
            assert not got.is_error
            deleted = await session.call_tool("image_asset_delete", {"assetId": asset_id})
            assert not deleted.is_error
        svg = await http.post(
            url.removesuffix("/mcp") + "/uploads",
            json={"contentType": "image/svg+xml", "contentLength": 10},
            headers={"Authorization": f"Bearer {writer}"},
        )
        assert svg.status_code == 422

        answer = await http.get(scrape, headers=admin)
    after = _samples(answer.text)

    def grew(name: str, **labels: str) -> float:
        return _value(after, name, **labels) - _value(before, name, **labels)

    assert grew("memory_saves_total", source_kind="upload", outcome="created") == 1
    assert grew("memory_saves_total", source_kind="upload", outcome="deduplicated") == 1
    assert grew("memory_validation_failures_total", code="invalid_image") == 1
    assert grew("memory_saves_total", source_kind="upload", outcome="refused") == 1
    assert grew("memory_validation_failures_total", code="invalid_input") == 1  # the SVG upload
    assert grew("memory_uploaded_bytes_total") > len(_photo(1))
    assert grew("memory_deduplicated_bytes_total") == len(_photo(1))
    assert grew("memory_assets_ready_total", source_kind="upload") == 2
    assert grew("memory_assets_deleted_total", source_kind="upload") == 1
    model, passage = LocalEmbedder().model, "retrieval.passage"
    assert grew("memory_embedding_duration_seconds_count", model=model, task=passage) >= 1
    # The two searches share their query text: the second is answered from the query cache.
    assert grew("memory_embedding_duration_seconds_count", model=model, task="retrieval.query") == 1
    assert grew("memory_query_embedding_cache_total", result="hit") == 1
    assert grew("memory_searches_total", kind="text") == 2
    assert grew("memory_search_zero_results_total", kind="text") == 1
    assert grew("memory_search_vector_hits_total", kind="text") == 1
    assert grew("memory_search_duration_seconds_count", kind="text") == 2
    assert grew("memory_search_candidates_count", kind="text") == 2
    assert grew("memory_signed_reads_issued_total", purpose="original") == 1
    assert _value(after, "memory_embedding_queue_depth") == 0
    # Counts by bounded labels only: no id, owner, key, URL or e-mail anywhere in the answer.
    for secret in (
        asset_id,
        owner,
        "alice",
        writer,
        operator,
        "http://",
        "https://",
        "@",
        "ast_",
        "aob_",
    ):
        assert secret not in answer.text


async def test_metrics_are_open_on_a_loopback_only_server(
    services: MemoryServices, serve_http: Any
) -> None:
    server = build_http_server(services, listen_host="127.0.0.1")
    async with serve_http(server) as url, httpx.AsyncClient() as http:
        answer = await http.get(url.removesuffix("/mcp") + "/metrics")
    assert answer.status_code == 200
    assert "memory_embedding_queue_depth 0.0" in answer.text
    assert "# TYPE memory_saves_total counter" in answer.text

    # Loopback behind a proxy is not loopback: a request the proxy forwarded, or any request
    # to a server whose public address (MEMORY_PUBLIC_BASE_URL) is elsewhere, needs the key.
    async with serve_http(server) as url, httpx.AsyncClient() as http:
        for header in ("X-Forwarded-For", "Forwarded", "X-Real-IP"):
            forwarded = await http.get(url.removesuffix("/mcp") + "/metrics", headers={header: "x"})
            assert forwarded.status_code == 401, header
    proxied = replace(
        services,
        settings=services.settings.model_copy(
            update={"memory_public_base_url": "https://memory.example.com"}
        ),
    )
    behind = build_http_server(proxied, listen_host="127.0.0.1")
    async with serve_http(behind) as url, httpx.AsyncClient() as http:
        assert (await http.get(url.removesuffix("/mcp") + "/metrics")).status_code == 401
