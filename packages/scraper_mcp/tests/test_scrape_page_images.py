"""``scrape_page_images`` end to end: a local site on 127.0.0.1, the aggregate server, a real
database and object store; hostile pages fail safely and store nothing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import pyvips
from fastmcp import Client
from sqlalchemy import text

from memory_db.storage import LocalAssetObjectStore
from memory_tools import MemoryServices
from memory_tools.serving import build_http_server
from memory_tools.testing.web import Reply, WebServer
from scraper_mcp import build_aggregate_server
from scraper_mcp.aggregate import AGGREGATE_SELECTION

TABLES = (
    "mem_assets",
    "mem_asset_objects",
    "mem_asset_embedding_jobs",
    "mem_provenance",
    "mem_asset_upload_reservations",
)


def picture(seed: int, width: int = 64, height: int = 48) -> bytes:
    """A distinct small PNG per seed."""
    xyz = pyvips.Image.xyz(width, height)
    red = ((xyz[0] * (seed + 3) + xyz[1]) % 256).cast("uchar")
    green = ((xyz[1] * (seed + 5)) % 256).cast("uchar")
    blue = ((xyz[0] + seed * 17) % 256).cast("uchar")
    return red.bandjoin([green, blue]).copy(interpretation="srgb").pngsave_buffer()


def html(body: str) -> Reply:
    return Reply(body=body.encode(), headers={"Content-Type": "text/html; charset=utf-8"})


def png(seed: int) -> Reply:
    return Reply(body=picture(seed), headers={"Content-Type": "image/png"})


GALLERY = """<!doctype html><html lang="en"><head><title>Local gallery</title>
<meta property="og:image" content="/img/cover.png">
<link rel="canonical" href="/gallery"></head><body>
<figure><img src="/img/cat.png" alt="A ginger cat on a sofa" width="640" height="480">
<figcaption>Marmalade asleep</figcaption></figure>
<img src="/img/dog.png" alt="A dog" width="320" height="240">
<img src="/img/icon.png" width="16" height="16">
</body></html>"""


def _gallery(site: WebServer) -> str:
    site.routes.update(
        {
            "/gallery": html(GALLERY),
            "/img/cover.png": png(1),
            "/img/cat.png": png(2),
            "/img/dog.png": png(3),
            "/img/icon.png": png(4),
        }
    )
    return site.url("/gallery", host="site.test")


async def _counts(services: MemoryServices) -> dict[str, int]:
    async with services.database.engine.connect() as conn:
        return {
            table: (await conn.execute(text(f"SELECT count(*) FROM {table}"))).scalar_one()
            for table in TABLES
        }


def _stored(services: MemoryServices) -> list[Path]:
    store = services.store
    assert isinstance(store, LocalAssetObjectStore)
    return sorted(p for p in store.root.rglob("*") if p.is_file()) if store.root.exists() else []


async def _call(client: Client[Any], arguments: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool("scrape_page_images", arguments)
    assert result.structured_content is not None
    return result.structured_content


async def _error(client: Client[Any], arguments: dict[str, Any]) -> str:
    result = await client.call_tool("scrape_page_images", arguments, raise_on_error=False)
    assert result.is_error
    return result.content[0].text  # type: ignore[union-attr]


async def test_lists_candidates_and_stores_nothing(
    scraper_services: MemoryServices,
    aggregate_client: Callable[[str], Client[Any]],
    make_key: Callable[..., Any],
    site: WebServer,
) -> None:
    key = await make_key("alice@example.com")
    url = _gallery(site)
    before = await _counts(scraper_services)
    async with aggregate_client(key) as client:
        page = await _call(client, {"url": url, "minWidth": 100})
    assert page["title"] == "Local gallery"
    assert page["language"] == "en"
    assert page["canonicalUrl"] == site.url("/gallery", host="site.test")
    assert page["pageUrl"] == url
    assert page["saved"] == 0
    shown = [(c["url"].rsplit("/", 1)[-1], c["sourceKind"]) for c in page["candidates"]]
    assert shown == [("cover.png", "og_image"), ("cat.png", "img"), ("dog.png", "img")]
    cat = page["candidates"][1]
    assert (cat["altText"], cat["caption"], cat["width"], cat["height"]) == (
        "A ginger cat on a sofa",
        "Marmalade asleep",
        640,
        480,
    )
    assert all(c["assetId"] is None and c["saveError"] is None for c in page["candidates"])
    # Without save nothing is stored, and no image was even requested.
    assert await _counts(scraper_services) == before
    assert _stored(scraper_services) == []
    assert [p for p in site.requested if p.startswith("/img/")] == []


async def test_save_stores_the_top_candidates_with_their_context(
    scraper_services: MemoryServices,
    aggregate_client: Callable[[str], Client[Any]],
    make_key: Callable[..., Any],
    site: WebServer,
) -> None:
    key = await make_key("alice@example.com")
    url = _gallery(site)
    async with aggregate_client(key) as client:
        project = await client.call_tool("image_project_create", {"name": "Scraped"})
        project_id = project.structured_content["projectId"]  # type: ignore[index]
        page = await _call(
            client,
            {
                "url": url,
                "save": {"projectId": project_id, "tags": ["Cats"], "max": 2},
            },
        )
        assert page["saved"] == 2
        cover, cat, dog = page["candidates"][:3]
        assert cover["assetId"] and cat["assetId"]
        assert dog["assetId"] is None and dog["saveError"] is None  # beyond max
        got = await client.call_tool("image_asset_get", {"assetId": cat["assetId"]})
    asset = got.structured_content
    assert asset is not None
    flat = str(asset)
    assert "A ginger cat on a sofa" in flat
    assert "Local gallery" in flat and "Marmalade asleep" in flat
    async with scraper_services.database.engine.connect() as conn:
        rows = (
            await conn.execute(
                text(
                    "SELECT source_kind, source_ref, alt_text, project_id, tags FROM mem_assets "
                    "WHERE id = :id"
                ),
                {"id": cat["assetId"]},
            )
        ).one()
        reps = (
            await conn.execute(
                text(
                    "SELECT count(*) FROM mem_asset_embedding_jobs WHERE asset_id = :id "
                    "AND representation = 'fused'"
                ),
                {"id": cat["assetId"]},
            )
        ).scalar_one()
    assert rows.source_kind == "scrape"
    assert rows.source_ref == {
        "pageUrl": url,
        "pageTitle": "Local gallery",
        "altText": "A ginger cat on a sofa",
        "caption": "Marmalade asleep",
    }
    assert rows.alt_text == "A ginger cat on a sofa"
    assert rows.project_id == project_id
    assert list(rows.tags) == ["cats"]
    assert reps == 1  # the page title and alt text feed the fused representation


async def test_repeating_a_scrape_and_save_returns_the_same_assets(
    scraper_services: MemoryServices,
    aggregate_client: Callable[[str], Client[Any]],
    make_key: Callable[..., Any],
    site: WebServer,
) -> None:
    """The same run twice saves nothing new; another owner, or new bytes, get a new asset."""
    alice, bob = await make_key("alice@example.com"), await make_key("bob@example.com")
    url = _gallery(site)
    run = {"url": url, "save": {"max": 2}}

    def saved(page: dict[str, Any]) -> list[tuple[str, bool]]:
        return [(c["assetId"], c["deduplicated"]) for c in page["candidates"][:2]]

    async with aggregate_client(alice) as client:
        first = await _call(client, run)
        after_first = (await _counts(scraper_services), _stored(scraper_services))
        second = await _call(client, run)
        after_second = (await _counts(scraper_services), _stored(scraper_services))
    ids = [asset for asset, _ in saved(first)]
    assert saved(first) == [(ids[0], False), (ids[1], False)]
    assert saved(second) == [(ids[0], True), (ids[1], True)] and second["saved"] == 2
    # Nothing new but the records of the repeated saves themselves: their provenance, and
    # their requests' reservations, closed on the same assets with no bytes.
    rows, files = after_second
    assert files == after_first[1]
    records = ("mem_provenance", "mem_asset_upload_reservations")
    assert {t: n for t, n in rows.items() if t not in records} == {
        t: n for t, n in after_first[0].items() if t not in records
    }
    async with scraper_services.database.engine.connect() as conn:
        closed = (
            await conn.execute(
                text(
                    "SELECT asset_id, status, reserved_bytes FROM mem_asset_upload_reservations "
                    "ORDER BY created_at"
                )
            )
        ).all()
    assert [tuple(row) for row in closed[2:]] == [(a, "finalized", 0) for a in ids]
    async with aggregate_client(bob) as client:  # another owner: an asset of their own
        theirs = await _call(client, run)
    assert [d for _a, d in saved(theirs)] == [False, False]
    assert not {a for a, _d in saved(theirs)} & set(ids)
    # The cat's URL now serves other bytes: a new asset; the cover, unchanged, is the same.
    site.routes["/img/cat.png"] = png(9)
    async with aggregate_client(alice) as client:
        changed = await _call(client, run)
        listed = await client.call_tool("image_asset_list", {})
    assert saved(changed)[0] == (ids[0], True)
    assert saved(changed)[1][0] not in ids and saved(changed)[1][1] is False
    assert len(listed.structured_content["items"]) == 3  # type: ignore[index]


async def test_one_failing_candidate_is_reported_and_the_others_saved(
    scraper_services: MemoryServices,
    aggregate_client: Callable[[str], Client[Any]],
    make_key: Callable[..., Any],
    site: WebServer,
) -> None:
    key = await make_key("alice@example.com")
    port = site.port
    site.routes.update(
        {
            "/hostile": html(
                f"""<title>Hostile</title>
                <img src="http://169.254.169.254/latest/meta-data/iam.png" width="900" height="900">
                <img src="http://metadata.test:{port}/creds.png" width="800" height="800">
                <img src="/img/missing.png" width="700" height="700">
                <img src="/img/ok.png" alt="fine" width="600" height="600">"""
            ),
            "/img/ok.png": png(7),
        }
    )
    async with aggregate_client(key) as client:
        page = await _call(
            client, {"url": site.url("/hostile", host="site.test"), "save": {"max": 4}}
        )
    errors = [c["saveError"] for c in page["candidates"]]
    assert errors[0] is not None and errors[0].startswith("unsafe_url:")
    assert errors[1] is not None and errors[1].startswith("unsafe_url:")
    assert errors[2] is not None and errors[2].startswith("fetch_failed:")
    assert errors[3] is None and page["candidates"][3]["assetId"]
    assert page["saved"] == 1
    counts = await _counts(scraper_services)
    assert counts["mem_assets"] == 1
    # The literal address is refused before a reservation opens; the others are released.
    async with scraper_services.database.engine.connect() as conn:
        held = (
            await conn.execute(
                text(
                    "SELECT count(*) FROM mem_asset_upload_reservations "
                    "WHERE status NOT IN ('released', 'finalized')"
                )
            )
        ).scalar_one()
    assert held == 0


async def test_a_refused_target_fails_before_anything_is_fetched(
    scraper_services: MemoryServices,
    aggregate_client: Callable[[str], Client[Any]],
    make_key: Callable[..., Any],
    site: WebServer,
) -> None:
    reader = await make_key("reader@example.com", ("read",))
    url = _gallery(site)
    async with aggregate_client(reader) as client:
        # Scraping alone needs no write scope; saving does, and is refused before any fetch.
        assert (await _call(client, {"url": url}))["saved"] == 0
        site.requested.clear()
        before = await _counts(scraper_services)
        assert (await _error(client, {"url": url, "save": {}})).startswith("forbidden:")
        assert site.requested == []
        after = await _counts(scraper_services)
    # Only the denial is recorded (under asset_save), nothing else.
    assert after["mem_provenance"] == before["mem_provenance"] + 1
    assert {k: v for k, v in after.items() if k != "mem_provenance"} == {
        k: v for k, v in before.items() if k != "mem_provenance"
    }
    writer = await make_key("writer@example.com")
    async with aggregate_client(writer) as client:
        missing = await _error(client, {"url": url, "save": {"projectId": "apr_nope"}})
        assert missing.startswith("not_found:")
        folder = await _error(client, {"url": url, "save": {"folderId": "afl_x"}})
        assert folder.startswith("invalid_input:")
    assert _stored(scraper_services) == []


@pytest.mark.parametrize(
    "arguments",
    [
        {"save": {"max": 0}},
        {"save": {"max": 11}},
        {"save": {"bogus": 1}},
        {"save": {"max": "2"}},
        {"limit": 0},
        {"limit": 101},
        {"minWidth": 0},
        {"extra": True},
    ],
)
async def test_bad_arguments_are_refused(
    aggregate_client: Callable[[str], Client[Any]],
    make_key: Callable[..., Any],
    site: WebServer,
    arguments: dict[str, Any],
) -> None:
    key = await make_key("alice@example.com")
    url = _gallery(site)
    async with aggregate_client(key) as client:
        result = await client.call_tool(
            "scrape_page_images", {"url": url, **arguments}, raise_on_error=False
        )
    assert result.is_error
    assert site.requested == []


async def test_hostile_pages_fail_safely_and_store_nothing(
    scraper_services: MemoryServices,
    aggregate_client: Callable[[str], Client[Any]],
    make_key: Callable[..., Any],
    site: WebServer,
) -> None:
    key = await make_key("alice@example.com")
    port = site.port
    huge = b"<html><title>Huge</title><body>" + b"<p>filler</p>" * (50 * 1024 * 1024 // 12)
    site.routes.update(
        {
            "/huge": Reply(
                body=huge + b'<img src="/tail.png">', headers={"Content-Type": "text/html"}
            ),
            "/huge-unlabelled": Reply(
                body=huge, headers={"Content-Type": "text/html"}, send_length=False
            ),
            "/to-private": Reply(
                status=302, headers={"Location": f"http://intranet.test:{port}/admin"}
            ),
            "/to-metadata": Reply(status=302, headers={"Location": "http://169.254.169.254/"}),
            "/deep": html("<title>Deep</title>" + "<div>" * 1_000_000 + '<img src="/x.png">'),
            "/image": png(9),
            "/json": Reply(body=b'{"a": 1}', headers={"Content-Type": "application/json"}),
            "/gone": Reply(status=404, body=b"no"),
        }
    )
    before = await _counts(scraper_services)
    async with aggregate_client(key) as client:
        for path in ("/huge", "/huge-unlabelled"):
            page = await _call(client, {"url": site.url(path, host="site.test"), "save": {}})
            # Cut at the bound and read: the title is there, the tail image is not.
            assert page["truncated"] is True
            assert page["title"] == "Huge"
            assert page["candidates"] == [] and page["saved"] == 0
        # Nested a million deep: read only to MAX_DEPTH (the parser's cost grows with depth).
        page = await _call(client, {"url": site.url("/deep", host="site.test"), "save": {}})
        assert (page["elementsBounded"], page["truncated"], page["title"]) == (True, False, "Deep")
        assert page["candidates"] == []
        refused = {
            "/to-private": "unsafe_url:",
            "/to-metadata": "unsafe_url:",
            "/image": "not_html:",
            "/json": "not_html:",
            "/gone": "fetch_failed:",
        }
        for path, code in refused.items():
            answer = await _error(client, {"url": site.url(path, host="site.test"), "save": {}})
            assert answer.startswith(code), (path, answer)
        for url, code in (
            ("http://127.0.0.1:{port}/gallery", "unsafe_url:"),
            ("file:///etc/passwd", "unsafe_url:"),
            ("http://metadata.test:{port}/", "unsafe_url:"),
            ("javascript:alert(1)", "unsafe_url:"),
        ):
            answer = await _error(client, {"url": url.format(port=port)})
            assert answer.startswith(code), (url, answer)
    assert "/admin" not in site.requested
    assert await _counts(scraper_services) == before
    assert _stored(scraper_services) == []


async def test_over_http_with_the_official_sdk_through_the_aggregate_server(
    scraper_services: MemoryServices,
    make_key: Callable[..., Any],
    site: WebServer,
    serve_http: Any,
) -> None:
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    key = await make_key("alice@example.com")
    url = _gallery(site)
    server = build_http_server(
        scraper_services, build_server=build_aggregate_server, tools=AGGREGATE_SELECTION
    )
    async with (
        serve_http(server) as endpoint,
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}) as http,
        streamable_http_client(endpoint, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        listed = await session.list_tools()
        tool = next(t for t in listed.tools if t.name == "scrape_page_images")
        assert tool.annotations is not None and tool.annotations.open_world_hint is True
        result = await session.call_tool("scrape_page_images", {"url": url, "save": {"max": 1}})
        assert not result.is_error, result.content
        page = result.structured_content
        assert page is not None
        assert page["candidates"][0]["sourceKind"] == "og_image"
        assert page["candidates"][0]["assetId"].startswith("ast_")
        # The same run again, as an agent retrying it: the same asset, said to be a repeat.
        again = await session.call_tool("scrape_page_images", {"url": url, "save": {"max": 1}})
        repeat = again.structured_content
        assert repeat is not None
        first, second = page["candidates"][0], repeat["candidates"][0]
        assert (second["assetId"], second["deduplicated"]) == (first["assetId"], True)
        assert first["deduplicated"] is False
        refused = await session.call_tool(
            "scrape_page_images", {"url": site.url("/gallery", host="intranet.test")}
        )
        assert refused.is_error
        assert refused.content[0].text.startswith("unsafe_url:")  # type: ignore[union-attr]


async def test_the_tool_is_declared_first_with_its_hints(scraper_services: MemoryServices) -> None:
    from scraper_mcp.tools import build_scraper_tools

    tools = build_scraper_tools(scraper_services)
    tool = tools[0]
    assert tool.name == "scrape_page_images"
    assert tool.title == "Find images on a page"
    hints = tool.annotations
    assert hints is not None
    # Static hints cover the opt-in save: it may store, so neither read-only nor idempotent.
    assert (
        hints.read_only_hint,
        hints.destructive_hint,
        hints.idempotent_hint,
        hints.open_world_hint,
    ) == (False, False, False, True)
    assert tool.output_schema is not None
    # Listed lean (memory_tools.mcp.lean_schemas): the optional object inlined, null in its type.
    save = tool.parameters["properties"]["save"]
    assert save["type"] == ["object", "null"] and "$defs" not in tool.parameters
    assert save["additionalProperties"] is False
    assert set(save["properties"]) == {"vault", "projectId", "folderId", "tags", "max"}
