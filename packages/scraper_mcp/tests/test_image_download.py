"""``scrape_image_download`` and its handoff to ``image_asset_save``, through the aggregate server:
in process, and once over HTTP with the official MCP SDK client. A scripted web server on
127.0.0.1 is reached as ``img.test`` (the fetcher's test allowance); every other loopback or
private destination stays refused."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import pyvips
from fastmcp import Client
from sqlalchemy import text

from memory_db import Database, MemorySettings
from memory_db.embedding import LocalEmbedder
from memory_db.storage import LocalAssetObjectStore, UrlSigner
from memory_tools import MemoryServices
from memory_tools.ingest import AddressPolicy, FetchPolicy, MappedResolver, SafeFetcher
from memory_tools.operations import admin
from memory_tools.serving import build_http_server
from memory_tools.testing.web import Reply, WebServer, serve_web
from scraper_mcp import build_aggregate_server
from scraper_mcp.aggregate import AGGREGATE_SELECTION

A, B = "alice@example.com", "bob@example.com"
HOSTS = {
    "img.test": ["127.0.0.1"],
    "intranet.test": ["10.0.0.5"],
    "metadata.test": ["169.254.169.254"],
}
SIZE_LIMIT = 65536


def picture(seed: int) -> bytes:
    xyz = pyvips.Image.xyz(40, 30)
    red = ((xyz[0] * (seed + 3) + xyz[1]) % 256).cast("uchar")
    green = ((xyz[1] * (seed + 5)) % 256).cast("uchar")
    blue = ((xyz[0] + seed * 17) % 256).cast("uchar")
    return red.bandjoin([green, blue]).copy(interpretation="srgb").pngsave_buffer()


@pytest.fixture
def web() -> Iterator[WebServer]:
    with serve_web() as server:
        port = server.port
        server.routes.update(
            {
                "/cat.png": Reply(body=picture(1), headers={"Content-Type": "image/png"}),
                "/dog.png": Reply(body=picture(2), headers={"Content-Type": "image/png"}),
                "/page.html": Reply(body=b"<!doctype html><title>x</title>"),
                "/secret": Reply(body=b"internal secret"),
                "/to-intranet": Reply(
                    status=302, headers={"Location": f"http://intranet.test:{port}/secret"}
                ),
                "/to-loopback": Reply(
                    status=302, headers={"Location": f"http://127.0.0.1:{port}/cat.png"}
                ),
                "/to-metadata": Reply(
                    status=302, headers={"Location": "http://169.254.169.254/latest/meta-data/"}
                ),
                "/huge.png": Reply(body=b"\x89PNG\r\n\x1a\n" + b"x" * SIZE_LIMIT),
            }
        )
        yield server


@pytest.fixture
async def services(
    database: Database, tmp_path: Path, web: WebServer
) -> AsyncIterator[MemoryServices]:
    policy = FetchPolicy(
        max_bytes=SIZE_LIMIT,
        allow_http=True,
        allowed_ports=frozenset({80, 443, web.port}),
        total_timeout=2.0,
        connect_timeout=1.0,
        read_timeout=1.0,
        addresses=AddressPolicy(loopback_names=frozenset({"img.test"})),
    )
    fetcher = SafeFetcher(policy, resolver=MappedResolver(HOSTS))
    yield MemoryServices(
        database=database,
        store=LocalAssetObjectStore(tmp_path / "objects", UrlSigner(b"k" * 32), "http://x"),
        settings=MemorySettings(memory_data_dir=tmp_path / "data", asset_max_bytes=SIZE_LIMIT),
        embedder=LocalEmbedder(),
        fetcher=fetcher,
    )
    await fetcher.aclose()


@pytest.fixture
def key_for(database: Database) -> Callable[..., Any]:
    async def make(email: str, scopes: tuple[str, ...] = ("read", "write")) -> str:
        return (await new_key(database, email, scopes)).secret

    return make


async def new_key(database: Database, email: str, scopes: tuple[str, ...]) -> Any:
    with contextlib.suppress(Exception):
        await admin.create_identity(database, email, 10**9)
    return await admin.create_key(database, email, scopes)


def aggregate(services: MemoryServices, key: str) -> Client[Any]:
    return Client(build_aggregate_server(replace(services, default_api_key=key)))


async def call(client: Client[Any], tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = (await client.call_tool(tool, arguments)).structured_content
    assert result is not None
    return result


async def refusal(client: Client[Any], tool: str, arguments: dict[str, Any]) -> str:
    result = await client.call_tool(tool, arguments, raise_on_error=False)
    assert result.is_error
    return result.content[0].text  # type: ignore[union-attr]


async def artifact_rows(services: MemoryServices) -> int:
    async with services.database.engine.connect() as conn:
        return int(
            (await conn.execute(text("SELECT count(*) FROM mem_scrape_artifacts"))).scalar_one()
        )


def stored_files(services: MemoryServices) -> list[Path]:
    store = services.store
    assert isinstance(store, LocalAssetObjectStore)
    if not store.root.exists():
        return []
    return [p for p in store.root.rglob("*") if p.is_file() and not p.name.endswith(".json")]


async def test_a_downloaded_image_becomes_an_artifact_and_its_owner_saves_it(
    services: MemoryServices, web: WebServer, key_for: Callable[..., Any]
) -> None:
    alice = await key_for(A)
    image_url = web.url("/cat.png?w=640&token=s3cr3t", host="img.test")
    page_url = "https://user:pw@example.com/cats?session=1#top"
    async with aggregate(services, alice) as client:
        artifact = await call(
            client, "scrape_image_download", {"imageUrl": image_url, "pageUrl": page_url}
        )
        assert artifact["artifactId"].startswith("art_")
        assert (artifact["mimeType"], artifact["width"], artifact["height"]) == (
            "image/png",
            40,
            30,
        )
        assert artifact["bytes"] == len(picture(1)) and "expiresAt" in artifact
        saved = await call(client, "image_asset_save", {"artifactId": artifact["artifactId"]})
        asset = await call(client, "image_asset_get", {"assetId": saved["assetId"]})
    assert asset["sourceKind"] == "scrape"
    assert asset["sourceRef"] == {
        "imageUrl": web.url("/cat.png?w=640", host="img.test"),  # credentials scrubbed
        "pageUrl": "https://example.com/cats",
    }
    assert asset["sourceUrl"] == web.url("/cat.png?w=640", host="img.test")
    assert web.requested == ["/cat.png?w=640&token=s3cr3t"]  # the page is never fetched


async def test_an_artifact_saved_twice_is_one_asset(
    services: MemoryServices, web: WebServer, key_for: Callable[..., Any]
) -> None:
    """By artifactId, and by the same URL and bytes from a second download (issue 30)."""
    alice = await key_for(A)
    image_url = web.url("/cat.png", host="img.test")
    async with aggregate(services, alice) as client:
        artifact = await call(client, "scrape_image_download", {"imageUrl": image_url})
        first = await call(client, "image_asset_save", {"artifactId": artifact["artifactId"]})
        again = await call(
            client, "image_asset_save", {"artifactId": artifact["artifactId"], "tags": ["new"]}
        )
        downloaded = await call(client, "scrape_image_download", {"imageUrl": image_url})
        third = await call(client, "image_asset_save", {"artifactId": downloaded["artifactId"]})
        listed = await call(client, "image_asset_list", {})
        got = await call(client, "image_asset_get", {"assetId": first["assetId"]})
    assert first["deduplicated"] is False
    for repeat in (again, third):
        assert repeat["deduplicated"] is True and repeat["replayed"] is False
        assert (repeat["assetId"], repeat["objectId"], repeat["jobIds"]) == (
            first["assetId"],
            first["objectId"],
            first["jobIds"],
        )
    assert [item["assetId"] for item in listed["items"]] == [first["assetId"]]
    assert got["tags"] == []  # returned as it is: the repeat's tags are not applied
    async with services.database.engine.connect() as conn:
        saves = (
            (
                await conn.execute(
                    text(
                        "SELECT detail->>'repeated' FROM mem_provenance WHERE operation = "
                        "'asset_save' AND target_id = :a ORDER BY created_at"
                    ),
                    {"a": first["assetId"]},
                )
            )
            .scalars()
            .all()
        )
        reserved = (
            await conn.execute(
                text("SELECT reserved_bytes FROM mem_asset_namespaces WHERE owner_identity = :o"),
                {"o": A},
            )
        ).scalar_one()
    assert saves == [None, "true", "true"]  # every save is recorded; two were repeats
    assert reserved == 0  # the repeats hold nothing


async def test_another_owner_cannot_import_your_artifact(
    services: MemoryServices, web: WebServer, key_for: Callable[..., Any]
) -> None:
    alice, bob = await key_for(A), await key_for(B)
    async with aggregate(services, alice) as client:
        artifact = await call(
            client, "scrape_image_download", {"imageUrl": web.url("/cat.png", host="img.test")}
        )
    async with aggregate(services, bob) as client:
        refused = await refusal(client, "image_asset_save", {"artifactId": artifact["artifactId"]})
        assert refused == "not_found: artifact not found"
    async with aggregate(services, alice) as client:  # Bob's attempt changed nothing
        saved = await call(client, "image_asset_save", {"artifactId": artifact["artifactId"]})
    assert saved["assetId"].startswith("ast_")


async def test_an_expired_artifact_answers_not_found(
    services: MemoryServices, web: WebServer, key_for: Callable[..., Any]
) -> None:
    brief = replace(
        services, settings=services.settings.model_copy(update={"scraper_artifact_ttl_seconds": 1})
    )
    alice = await key_for(A)
    async with aggregate(brief, alice) as client:
        artifact = await call(
            client, "scrape_image_download", {"imageUrl": web.url("/dog.png", host="img.test")}
        )
        await asyncio.sleep(1.2)
        refused = await refusal(client, "image_asset_save", {"artifactId": artifact["artifactId"]})
    assert refused == "not_found: artifact not found"


@pytest.mark.parametrize(
    ("path", "host", "code"),
    [
        ("/to-intranet", "img.test", "unsafe_url"),  # a redirect to a private address
        ("/to-loopback", "img.test", "unsafe_url"),  # a redirect to literal loopback
        ("/to-metadata", "img.test", "unsafe_url"),  # a redirect to the metadata service
        ("/latest/meta-data/", "169.254.169.254", "unsafe_url"),  # an <img> pointing there
        ("/latest/meta-data/", "metadata.test", "unsafe_url"),  # a name resolving there
        ("/cat.png", "127.0.0.1", "unsafe_url"),  # loopback without the test allowance
        ("/page.html", "img.test", "invalid_image"),  # not an image
        ("/huge.png", "img.test", "unsafe_url"),  # larger than the fetch limit
        ("/missing", "img.test", "fetch_failed"),
    ],
)
async def test_hostile_sources_store_nothing(
    services: MemoryServices,
    web: WebServer,
    key_for: Callable[..., Any],
    path: str,
    host: str,
    code: str,
) -> None:
    alice = await key_for(A)
    url = web.url(path, host=host) if host != "169.254.169.254" else f"http://{host}{path}"
    async with aggregate(services, alice) as client:
        refused = await refusal(client, "scrape_image_download", {"imageUrl": url})
    assert refused.startswith(f"{code}:"), refused
    assert "/secret" not in web.requested
    assert await artifact_rows(services) == 0 and stored_files(services) == []


@pytest.mark.parametrize(
    ("arguments", "code"),
    [
        ({"imageUrl": "file:///etc/passwd"}, "unsafe_url"),
        ({"imageUrl": "data:image/png;base64,AAAA"}, "unsafe_url"),
        (
            {"imageUrl": "http://img.test/cat.png", "pageUrl": "javascript:alert(1)"},
            "invalid_input",
        ),
    ],
)
async def test_bad_urls_are_refused_before_any_request(
    services: MemoryServices,
    web: WebServer,
    key_for: Callable[..., Any],
    arguments: dict[str, Any],
    code: str,
) -> None:
    alice = await key_for(A)
    async with aggregate(services, alice) as client:
        refused = await refusal(client, "scrape_image_download", arguments)
    assert refused.startswith(f"{code}:"), refused
    assert web.requested == []


async def test_a_read_only_key_downloads_nothing(
    services: MemoryServices, web: WebServer, key_for: Callable[..., Any]
) -> None:
    reader = await key_for(A, ("read",))
    async with aggregate(services, reader) as client:
        refused = await refusal(
            client, "scrape_image_download", {"imageUrl": web.url("/cat.png", host="img.test")}
        )
    assert refused == "forbidden: this API key lacks the 'write' scope"
    assert web.requested == []


async def test_download_then_save_over_http_with_the_official_sdk(
    services: MemoryServices,
    web: WebServer,
    key_for: Callable[..., Any],
    serve_http: Callable[..., Any],
) -> None:
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    alice, bob = await key_for(A), await key_for(B)
    server = build_http_server(
        services, name="mcp-scraper", build_server=build_aggregate_server, tools=AGGREGATE_SELECTION
    )

    @contextlib.asynccontextmanager
    async def session(url: str, key: str) -> AsyncGenerator[ClientSession]:
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}) as http,
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(read, write) as mcp_session,
        ):
            await mcp_session.initialize()
            yield mcp_session

    async with serve_http(server) as url:
        async with session(url, alice) as mcp_session:
            listed = {tool.name: tool for tool in (await mcp_session.list_tools()).tools}
            hints = listed["scrape_image_download"].annotations
            assert hints is not None
            assert (hints.read_only_hint, hints.idempotent_hint, hints.open_world_hint) == (
                False,
                False,
                True,
            )
            downloaded = await mcp_session.call_tool(
                "scrape_image_download",
                {"imageUrl": web.url("/cat.png", host="img.test"), "pageUrl": "https://e.com/"},
            )
            assert not downloaded.is_error and downloaded.structured_content is not None
            artifact_id = downloaded.structured_content["artifactId"]
        async with session(url, bob) as mcp_session:
            stolen = await mcp_session.call_tool("image_asset_save", {"artifactId": artifact_id})
            assert stolen.is_error
            assert stolen.content[0].text == "not_found: artifact not found"  # type: ignore[union-attr]
        async with session(url, alice) as mcp_session:
            saved = await mcp_session.call_tool("image_asset_save", {"artifactId": artifact_id})
            assert not saved.is_error and saved.structured_content is not None
            assert saved.structured_content["assetId"].startswith("ast_")


async def test_isolation_rows_of_scrape_image_download(
    services: MemoryServices, web: WebServer, key_for: Callable[..., Any], database: Database
) -> None:
    """The seven callers of the isolation matrix (memory_tools' tests/isolation): every
    authenticated key with the write scope downloads into its own identity's artifacts (a grant
    on another owner's vault changes nothing), which that identity alone can save; a revoked
    key is ``unauthenticated``, a read-only key ``forbidden``, and neither fetches anything."""
    full = ("read", "write", "destructive")
    alice = await key_for(A, full)
    revoked = await new_key(database, A, full)
    await admin.revoke_key(database, revoked.record.id)
    keys = {
        "owner": (alice, A),
        "other owner": (await key_for(B, full), B),
        "no destructive": (await key_for(A, ("read", "write")), A),
        "revoked": (revoked.secret, A),
        "read only": (await key_for(A, ("read",)), A),
    }
    for permission, name in (("read", "reader"), ("write", "writer"), ("admin", "admin")):
        email = f"{name}@example.com"
        keys[f"shared {name}"] = (await key_for(email, full), email)
        await admin.grant(database, A, "Library", email, permission)

    url = web.url("/cat.png", host="img.test")
    outcomes: dict[str, str] = {}
    artifacts: dict[str, tuple[str, str]] = {}
    for name, (key, identity) in keys.items():
        async with aggregate(services, key) as client:
            result = await client.call_tool(
                "scrape_image_download", {"imageUrl": url}, raise_on_error=False
            )
        if result.is_error:
            outcomes[name] = result.content[0].text.split(":", 1)[0]  # type: ignore[union-attr]
        else:
            outcomes[name] = "ok"
            assert result.structured_content is not None
            artifacts[name] = (result.structured_content["artifactId"], identity)
    assert outcomes == {
        "owner": "ok",
        "other owner": "ok",
        "no destructive": "ok",
        "revoked": "unauthenticated",
        "read only": "forbidden",
        "shared reader": "ok",
        "shared writer": "ok",
        "shared admin": "ok",
    }
    assert len(web.requested) == 6  # the refused keys fetched nothing
    # Each artifact belongs to the downloading identity: Alice's key saves only Alice's.
    async with aggregate(services, alice) as client:
        for name, (artifact_id, identity) in artifacts.items():
            result = await client.call_tool(
                "image_asset_save", {"artifactId": artifact_id}, raise_on_error=False
            )
            got = "ok" if not result.is_error else result.content[0].text  # type: ignore[union-attr]
            wanted = "ok" if identity == A else "not_found: artifact not found"
            assert got == wanted, name


async def test_the_tool_is_declared_completely_and_strictly(services: MemoryServices) -> None:
    async with Client(build_aggregate_server(services)) as client:
        listed = {tool.name: tool for tool in await client.list_tools()}
    tool = listed["scrape_image_download"]
    assert tool.title == "Download image as artifact"
    assert tool.description and "artifact" in tool.description
    hints = tool.annotations
    assert hints is not None
    assert (
        hints.read_only_hint,
        hints.destructive_hint,
        hints.idempotent_hint,
        hints.open_world_hint,
    ) == (False, False, False, True)
    schema = tool.input_schema
    assert schema["additionalProperties"] is False
    assert schema["required"] == ["imageUrl"]
    assert schema["properties"]["imageUrl"]["maxLength"] == 4096
    assert set(schema["properties"]) == {"imageUrl", "pageUrl"}
    output = tool.output_schema
    assert output is not None
    assert set(output["properties"]) == {
        "artifactId",
        "mimeType",
        "bytes",
        "width",
        "height",
        "expiresAt",
    }
    # The save tool names the artifacts it takes.
    save = listed["image_asset_save"].input_schema["properties"]["artifactId"]
    assert "scrape_image_download" in str(save)


@pytest.mark.parametrize(
    "arguments",
    [
        {},
        {"imageUrl": ""},
        {"imageUrl": "https://e.com/" + "a" * 4096},
        {"imageUrl": "https://e.com/a.png", "extra": 1},
        {"imageUrl": 7},
    ],
)
async def test_malformed_arguments_change_nothing(
    services: MemoryServices,
    web: WebServer,
    key_for: Callable[..., Any],
    arguments: dict[str, Any],
) -> None:
    alice = await key_for(A)
    async with aggregate(services, alice) as client:
        result = await client.call_tool("scrape_image_download", arguments, raise_on_error=False)
    assert result.is_error
    assert result.content[0].text.startswith("invalid_input")  # type: ignore[union-attr]
    assert web.requested == [] and await artifact_rows(services) == 0


@pytest.mark.parametrize("scheme", ["data", "mailto", "javascript"])
async def test_a_download_redirected_to_a_non_web_scheme_is_unsafe_url(
    services: MemoryServices, key_for: Callable[..., Any], web: WebServer, scheme: str
) -> None:
    """It was ``internal`` (httpx's InvalidURL), with an error-level traceback."""
    from structlog.testing import capture_logs

    location = {"data": "data:image/png;base64,iVBORw0KGgo=", "mailto": "mailto:a@example.com"}
    web.routes["/away"] = Reply(
        status=302, headers={"Location": location.get(scheme, "javascript:alert(1)")}
    )
    with capture_logs() as logs:
        async with aggregate(services, await key_for(A)) as client:
            text = await refusal(
                client, "scrape_image_download", {"imageUrl": web.url("/away", host="img.test")}
            )
    assert text == f"unsafe_url: the server redirected to a {scheme}: URL; only http(s) is followed"
    assert [entry for entry in logs if entry["log_level"] in ("error", "critical")] == []
    assert [entry for entry in logs if entry.get("exc_info")] == []
    assert await artifact_rows(services) == 0
