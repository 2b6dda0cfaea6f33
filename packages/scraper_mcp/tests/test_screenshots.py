"""scrape_page_screenshot against the real Chromium, with local pages on 127.0.0.1.

The pages are served by ``site.test`` (a name the test resolver maps to 127.0.0.1 and the
address policy admits, as ingest tests admit loopback). A second server, the *canary*, stands
for a private service: it records every request that reaches it, so "the request never
arrives" is proved by its empty log. It is reachable under a name that resolves to loopback
but is not admitted (``private.test``), as the literal ``127.0.0.1`` and on an allowed port.

Chromium must be installed (``make test`` installs Debian's ``chromium``): these tests do not
skip without it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import socket
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import pytest
import pyvips
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport
from fastmcp.exceptions import ToolError
from mcp_types import ImageContent, TextContent
from sqlalchemy import text
from structlog.testing import capture_logs

from memory_db import Database, MemorySettings
from memory_db.storage import LocalAssetObjectStore, UrlSigner
from memory_db.unit_of_work import session_of
from memory_tools import MemoryServices
from memory_tools.ingest.fetch import FetchPolicy, SafeFetcher
from memory_tools.ingest.network import AddressPolicy, MappedResolver
from memory_tools.operations import admin
from memory_tools.serving.app import build_http_server, run_http
from memory_tools.serving.bootstrap import bind_listening_socket
from memory_tools.testing.web import Reply, WebServer, serve_web
from scraper_mcp import aggregate, build_aggregate_server
from scraper_mcp import chromium as scraper_chromium
from scraper_mcp.aggregate import AGGREGATE_SELECTION
from scraper_mcp.chromium import Chromium, find_chromium, system_chromium
from scraper_mcp.tools import build_scraper_tools

# Chromium runs in a process of its own: handed out first (conftest.py), so the long captures
# here do not keep one worker busy alone at the end of the run.
pytestmark = pytest.mark.slow

SITE = "site.test"
PRIVATE = "private.test"


def html(body: str, title: str = "A test page") -> Reply:
    page = f"<!doctype html><html><head><title>{title}</title></head><body>{body}</body></html>"
    return Reply(body=page.encode(), headers={"Content-Type": "text/html; charset=utf-8"})


class Recorder:
    """A server that answers every request ``200 ok`` and records its method and path."""

    def __init__(self) -> None:
        self.requested: list[str] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def _record(self) -> None:
                recorder.requested.append(f"{self.command} {self.path}")
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.send_header("Connection", "close")
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(b"ok")

            do_GET = do_POST = do_PUT = do_HEAD = do_DELETE = _record

            def log_message(self, format: str, *args: object) -> None:
                return

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]

    def url(self, path: str, *, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"


@contextlib.contextmanager
def recording() -> Generator[Recorder]:
    recorder = Recorder()
    thread = threading.Thread(target=recorder.httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield recorder
    finally:
        recorder.httpd.shutdown()
        recorder.httpd.server_close()
        thread.join(timeout=5)


@pytest.fixture
def canary() -> Iterator[Recorder]:
    """Stands for a private service; its port is allowed, its address is not (except as SITE)."""
    with recording() as server:
        yield server


@pytest.fixture
def unlisted() -> Iterator[Recorder]:
    """A server on a port the fetch policy does not allow."""
    with recording() as server:
        yield server


@pytest.fixture
def site() -> Iterator[WebServer]:
    with serve_web() as server:
        yield server


@pytest.fixture
async def services(
    database: Database, tmp_path: Path, site: WebServer, canary: Recorder
) -> AsyncIterator[MemoryServices]:
    policy = FetchPolicy(
        max_bytes=5_000_000,
        allow_http=True,
        # The canary's port is allowed: only the address policy keeps the page away from it.
        allowed_ports=frozenset({80, 443, site.port, canary.port}),
        total_timeout=5.0,
        connect_timeout=2.0,
        read_timeout=2.0,
        addresses=AddressPolicy(loopback_names=frozenset({SITE})),
    )
    fetcher = SafeFetcher(
        policy, resolver=MappedResolver({SITE: ["127.0.0.1"], PRIVATE: ["127.0.0.1"]})
    )
    settings = MemorySettings(
        memory_data_dir=tmp_path / "data",
        scraper_screenshot_timeout_seconds=20,
        scraper_screenshot_max_height=3000,
        scraper_screenshot_max_page_bytes=2_000_000,
    )
    store = LocalAssetObjectStore(tmp_path / "objects", UrlSigner(b"s" * 32), "http://127.0.0.1:9")
    yield MemoryServices(database=database, store=store, settings=settings, fetcher=fetcher)
    await fetcher.aclose()


@pytest.fixture
async def key(database: Database) -> str:
    await admin.create_identity(database, "alice@example.com", 10**9)
    return (await admin.create_key(database, "alice@example.com", ["read", "write"])).secret


@pytest.fixture
async def client(services: MemoryServices, key: str) -> AsyncIterator[Client[Any]]:
    async with Client(build_aggregate_server(replace(services, default_api_key=key))) as client:
        yield client


def png_size(data: bytes) -> tuple[int, int]:
    image = pyvips.Image.new_from_buffer(data, "", fail_on="error")
    assert image.get("vips-loader") == "pngload_buffer"
    return image.width, image.height


async def artifact_bytes(services: MemoryServices, database: Database, artifact_id: str) -> bytes:
    async with database.unit_of_work() as uow:
        record = await uow.artifacts.get_owned("alice@example.com", artifact_id)
    assert record is not None
    chunks = [chunk async for chunk in services.store.get_stream(record.storage_key)]
    return b"".join(chunks)


async def artifact_count(database: Database) -> int:
    async with database.unit_of_work() as uow:
        return (await uow.artifacts.live_usage("alice@example.com")).count


async def test_a_page_is_captured_as_a_png_artifact_with_a_thumbnail(
    client: Client[Any], services: MemoryServices, database: Database, site: WebServer
) -> None:
    site.routes["/"] = html('<h1 style="color:#c00">Hello</h1><img src="/logo.svg">', "Front")
    svg = b'<svg xmlns="http://www.w3.org/2000/svg" width="40" height="40"><rect width="40" height="40"/></svg>'
    site.routes["/logo.svg"] = Reply(body=svg, headers={"Content-Type": "image/svg+xml"})
    result = await client.call_tool(
        "scrape_page_screenshot", {"url": site.url("/", host=SITE), "width": 800}
    )
    answer = result.structured_content
    assert answer is not None
    assert answer["artifactId"].startswith("art_")
    assert answer["mimeType"] == "image/png"
    assert (answer["width"], answer["height"]) == (800, 800)
    assert answer["pageTitle"] == "Front"
    assert answer["pageUrl"] == site.url("/", host=SITE)
    assert answer["cut"] is False
    assert "/logo.svg" in site.requested  # subresources are fetched (by us) for the page
    stored = await artifact_bytes(services, database, answer["artifactId"])
    assert png_size(stored) == (800, 800)
    assert answer["bytes"] == len(stored)
    # One small image inline: the top of the page, never the PNG itself.
    images = [block for block in result.content if isinstance(block, ImageContent)]
    assert len(images) == 1 and images[0].mime_type == "image/jpeg"
    assert len(images[0].data) < 100_000
    lines = [block.text for block in result.content if isinstance(block, TextContent)]
    assert f"Result 1: artifactId {answer['artifactId']} (256x256 JPEG):" in lines


async def test_a_full_page_is_cut_at_the_height_bound(
    client: Client[Any], services: MemoryServices, database: Database, site: WebServer
) -> None:
    site.routes["/tall"] = html('<div style="height:20000px;background:#08f">tall</div>')
    result = await client.call_tool(
        "scrape_page_screenshot",
        {"url": site.url("/tall", host=SITE), "fullPage": True, "width": 400},
    )
    answer = result.structured_content
    assert answer is not None
    assert answer["cut"] is True
    stored = await artifact_bytes(services, database, answer["artifactId"])
    assert png_size(stored) == (400, 3000)  # SCRAPER_SCREENSHOT_MAX_HEIGHT in this test
    images = [block for block in result.content if isinstance(block, ImageContent)]
    assert len(images) == 1


async def test_requests_of_the_page_to_private_addresses_never_arrive(
    client: Client[Any], site: WebServer, canary: Recorder, unlisted: Recorder
) -> None:
    site.routes["/redirect"] = Reply(
        status=302, headers={"Location": canary.url("/secret?via=redirect")}
    )
    site.routes["/redirect-port"] = Reply(
        status=302, headers={"Location": unlisted.url("/secret?via=redirect", host=SITE)}
    )
    body = f"""
      <img src="{canary.url("/secret?via=img-literal")}">
      <img src="{canary.url("/secret?via=img-name", host=PRIVATE)}">
      <img src="http://169.254.169.254/latest/meta-data/">
      <img src="/redirect">
      <img src="/redirect-port">
      <iframe src="{canary.url("/secret?via=iframe", host=PRIVATE)}"></iframe>
      <iframe src="file:///etc/passwd"></iframe>
      <link rel="preconnect" href="{canary.url("/", host=PRIVATE)}">
      <script>
        const fetched = fetch("{canary.url("/secret?via=fetch", host=PRIVATE)}").then(
          () => "fetch-ok", () => "fetch-refused");
        fetch("{canary.url("/secret?via=post", host=SITE)}", {{method: "POST", body: "x"}})
          .catch(() => 0);
        fetch("{canary.url("/secret?via=put", host=SITE)}", {{method: "PUT", body: "x"}})
          .catch(() => 0);
        navigator.sendBeacon("{canary.url("/secret?via=beacon", host=PRIVATE)}", "x");
        try {{ new WebSocket("ws://{PRIVATE}:{canary.port}/secret?via=ws"); }} catch (e) {{}}
        try {{
          const pc = new RTCPeerConnection({{iceServers: [{{urls: "stun:127.0.0.1:{canary.port}"}}]}});
          pc.createDataChannel("x");
          pc.createOffer().then(o => pc.setLocalDescription(o));
        }} catch (e) {{}}
        const sw = navigator.serviceWorker
          ? navigator.serviceWorker.register("/sw.js").then(() => "sw-registered", () => "sw-refused")
          : Promise.resolve("sw-absent");
        alert("a dialog does not block the page");
        window.open("{canary.url("/secret?via=popup", host=PRIVATE)}");
        // Titled as soon as the fetch and the registration have settled (their own events,
        // not a timer, which a busy machine outran: "sw-absent" without the fetch's outcome).
        Promise.all([fetched, sw]).then(([f, s]) => {{ document.title = f + " " + s; }});
      </script>
      <p>hostile</p>
      <img src="/slow">"""
    site.routes["/hostile"] = html(body, "hostile")
    site.routes["/sw.js"] = Reply(body=b"", headers={"Content-Type": "text/javascript"})
    # Holds the page's load event for about a second, after the refusals above have settled.
    site.routes["/slow"] = Reply(body=b"x" * 10, drip_seconds=0.1)
    result = await client.call_tool(
        "scrape_page_screenshot", {"url": site.url("/hostile", host=SITE), "width": 640}
    )
    answer = result.structured_content
    assert answer is not None and answer["mimeType"] == "image/png"
    # The screenshot completed, the page saw its requests fail, and none reached the canary.
    assert canary.requested == []
    assert unlisted.requested == []
    assert answer["pageTitle"] in {"fetch-refused sw-absent", "fetch-refused sw-refused"}
    assert "/sw.js" not in site.requested


async def test_a_page_that_redirects_to_a_private_address_is_refused(
    client: Client[Any],
    database: Database,
    site: WebServer,
    canary: Recorder,
    unlisted: Recorder,
) -> None:
    site.routes["/away"] = Reply(
        status=302, headers={"Location": canary.url("/secret", host=PRIVATE)}
    )
    # An admitted name, but a port the policy does not allow: only the URL check stops it.
    site.routes["/away-port"] = Reply(
        status=307, headers={"Location": unlisted.url("/secret", host=SITE)}
    )
    site.routes["/away-file"] = Reply(status=302, headers={"Location": "file:///etc/passwd"})
    for path in ("/away", "/away-port", "/away-file"):
        with pytest.raises(ToolError, match="unsafe_url"):
            await client.call_tool("scrape_page_screenshot", {"url": site.url(path, host=SITE)})
    assert canary.requested == []
    assert unlisted.requested == []
    assert await artifact_count(database) == 0


async def test_a_page_redirected_to_a_non_web_scheme_is_unsafe_url(
    client: Client[Any], database: Database, site: WebServer
) -> None:
    """It was ``internal`` (httpx's InvalidURL), with an error-level traceback. Every scheme in
    one test: one database and one server for the lot (each call stands alone)."""
    locations = {
        "data": "data:text/html,<p>hi</p>",
        "mailto": "mailto:a@example.com",
        "javascript": "javascript:alert(1)",
    }
    answers: dict[str, str] = {}
    for scheme, location in locations.items():
        site.routes[f"/away-{scheme}"] = Reply(status=302, headers={"Location": location})
        with capture_logs() as logs:
            result = await client.call_tool(
                "scrape_page_screenshot",
                {"url": site.url(f"/away-{scheme}", host=SITE)},
                raise_on_error=False,
            )
        assert result.is_error, scheme
        answers[scheme] = result.content[0].text  # type: ignore[union-attr]
        assert [entry for entry in logs if entry["log_level"] in ("error", "critical")] == []
        assert [entry for entry in logs if entry.get("exc_info")] == []
    assert answers == {
        scheme: f"unsafe_url: the server redirected to a {scheme}: URL; only http(s) is followed"
        for scheme in locations
    }
    assert await artifact_count(database) == 0


REFUSED_URLS = (
    "file:///etc/passwd",
    "data:text/html,<h1>hi</h1>",
    "chrome://version",
    "about:blank",
    "javascript:alert(1)",
    "http://169.254.169.254/latest/meta-data/",
    "http://127.0.0.1/",
    "ws://site.test/",
)


async def test_urls_the_fetch_policy_refuses_are_refused(
    client: Client[Any], database: Database
) -> None:
    """Every URL in one test: one database and one server for the lot (each call stands
    alone); the answer of each is named in a failure."""
    answers: dict[str, str] = {}
    for url in REFUSED_URLS:
        result = await client.call_tool(
            "scrape_page_screenshot", {"url": url}, raise_on_error=False
        )
        text_of = result.content[0].text if result.is_error else "stored"  # type: ignore[union-attr]
        answers[url] = text_of.split(":", 1)[0]
    assert answers == dict.fromkeys(REFUSED_URLS, "unsafe_url")
    assert await artifact_count(database) == 0


async def test_a_page_larger_than_the_page_budget_is_refused(
    client: Client[Any], database: Database, site: WebServer
) -> None:
    site.routes["/huge"] = Reply(
        body=b"<p>" + b"x" * 3_000_000, headers={"Content-Type": "text/html"}, send_length=False
    )
    with pytest.raises(ToolError, match=r"unsafe_url: .*2000000-byte limit"):
        await client.call_tool("scrape_page_screenshot", {"url": site.url("/huge", host=SITE)})
    assert await artifact_count(database) == 0


async def test_width_is_bounded_by_the_schema(client: Client[Any]) -> None:
    for width in (100, 10_000):
        with pytest.raises(ToolError):
            await client.call_tool(
                "scrape_page_screenshot", {"url": "https://example.com/", "width": width}
            )


async def test_a_crashed_browser_is_relaunched(
    services: MemoryServices, key: str, site: WebServer
) -> None:
    site.routes["/"] = html("<p>again</p>")
    chromium = system_chromium(services.settings)
    assert chromium is not None
    tools = {
        tool.name: tool
        for tool in build_scraper_tools(replace(services, default_api_key=key), chromium=chromium)
    }
    screenshot = tools["scrape_page_screenshot"]
    try:
        await screenshot.run({"url": site.url("/", host=SITE)})
        assert chromium.launches == 1
        await screenshot.run({"url": site.url("/", host=SITE)})
        assert chromium.launches == 1  # reused
        browser = chromium.browser
        assert browser is not None
        session = await browser.new_browser_cdp_session()
        with contextlib.suppress(Exception):  # the crash takes the session with it
            await session.send("Browser.crash")
        await screenshot.run({"url": site.url("/", host=SITE)})
        assert chromium.launches == 2
    finally:
        await chromium.close()
    assert chromium.browser is None


def _chromium_processes_of(parent: int) -> list[int]:
    """The Chromium processes below ``parent`` (its Playwright driver's children and theirs)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
    found: list[int] = []
    todo = [parent]
    while todo:
        for child in children.get(todo.pop(), []):
            todo.append(child)
            with contextlib.suppress(OSError):
                if b"chromium" in (Path("/proc") / str(child) / "cmdline").read_bytes():
                    found.append(child)
    return found


def _data_limit(pid: int) -> int | None:
    for line in (Path("/proc") / str(pid) / "limits").read_text().splitlines():
        if line.startswith("Max data size"):
            soft = line.split()[3]
            return None if soft == "unlimited" else int(soft)
    return None


async def test_every_chromium_process_has_its_memory_bounded(
    services: MemoryServices, key: str, site: WebServer
) -> None:
    """RLIMIT_DATA on the browser and every process it starts (a canvas page took 11 GB)."""
    site.routes["/"] = html("<p>bounded</p>")
    limit = 768 * 2**20
    settings = services.settings.model_copy(update={"scraper_screenshot_max_process_bytes": limit})
    chromium = system_chromium(settings)
    assert chromium is not None and chromium.max_process_bytes == limit
    tools = {
        tool.name: tool
        for tool in build_scraper_tools(replace(services, default_api_key=key), chromium=chromium)
    }
    try:
        await tools["scrape_page_screenshot"].run({"url": site.url("/", host=SITE)})
        processes = _chromium_processes_of(os.getpid())
        assert len(processes) >= 2  # the browser and at least one renderer
        assert {pid: _data_limit(pid) for pid in processes} == dict.fromkeys(processes, limit)
    finally:
        await chromium.close()


async def test_without_a_browser_the_tool_is_not_offered(
    services: MemoryServices, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    installed = shutil.which("chromium") or shutil.which("chromium-browser")
    assert installed is not None, "make test installs Debian's chromium"
    monkeypatch.setenv("PATH", str(tmp_path))  # no chromium on PATH
    with capture_logs() as logs:
        server = build_aggregate_server(services)
    async with Client(server) as client:
        names = {tool.name for tool in await client.list_tools()}
    assert "scrape_page_screenshot" not in names
    assert "image_asset_save" in names
    lines = [line for line in logs if line["event"] == "screenshot_tool_unavailable"]
    assert len(lines) == 1
    assert "chromium" in lines[0]["reason"] and "apt-get install chromium" in lines[0]["fix"]
    # A configured path that is not an executable: not offered either, and the line says so.
    missing = replace(
        services,
        settings=services.settings.model_copy(
            update={"scraper_chromium_path": tmp_path / "chrome"}
        ),
    )
    with capture_logs() as logs:
        server = build_aggregate_server(missing)
    async with Client(server) as client:
        assert "scrape_page_screenshot" not in {t.name for t in await client.list_tools()}
    assert [
        "SCRAPER_CHROMIUM_PATH" in line["reason"]
        for line in logs
        if line["event"] == "screenshot_tool_unavailable"
    ] == [True]
    # SCRAPER_CHROMIUM_PATH names the browser when PATH has none: the tool is offered again.
    configured = replace(
        services,
        settings=services.settings.model_copy(update={"scraper_chromium_path": Path(installed)}),
    )
    with capture_logs() as logs:
        server = build_aggregate_server(configured)
    async with Client(server) as client:
        assert "scrape_page_screenshot" in {t.name for t in await client.list_tools()}
    found = [line for line in logs if line["event"] == "screenshot_browser_found"]
    assert [line["found_by"] for line in found] == [f"SCRAPER_CHROMIUM_PATH={installed}"]


def test_the_dead_proxy_port_refuses_connections() -> None:
    # What the launch relies on: a bound socket that never listens refuses every connection.
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    try:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(dead.getsockname(), timeout=2).close()
    finally:
        dead.close()


class KeptOpen(Chromium):
    """One browser for several servers in a test: a server's stop leaves it running (the test
    closes it), where the aggregate server's own would close it with each client session.
    How a server closes its browser is tested with the real one
    (test_over_http_one_browser_serves_every_call_and_closes_with_the_server)."""

    @contextlib.asynccontextmanager
    async def lifespan(self, _server: Any = None) -> AsyncGenerator[dict[str, Any]]:
        yield {}


async def test_every_caller_gets_its_own_artifact_or_a_refusal(
    services: MemoryServices, database: Database, site: WebServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The isolation rows of scrape_page_screenshot: it has no target; the artifact is the
    caller's own (never the owner of a vault it may write to), a key without ``write`` is
    refused with ``forbidden`` and a revoked key with ``unauthenticated``, storing nothing.

    Every caller's aggregate server uses one browser: a launch per caller is not the subject
    here and cost most of the time."""
    executable, why = find_chromium(services.settings)
    assert executable is not None, why
    browser = KeptOpen(
        executable,
        concurrency=services.settings.scraper_screenshot_concurrency,
        max_process_bytes=services.settings.scraper_screenshot_max_process_bytes,
    )

    def shared(_settings: MemorySettings) -> Chromium:
        return browser

    monkeypatch.setattr(aggregate, "system_chromium", shared)
    site.routes["/"] = html("<p>whose</p>")
    full = ["read", "write", "destructive"]
    people = {
        "owner": ("alice@example.com", full),
        "owner without destructive": ("alice@example.com", ["read", "write"]),
        "owner, revoked key": ("alice@example.com", full),
        "other owner": ("bob@example.com", full),
        "shared reader": ("reader@example.com", full),
        "shared writer": ("writer@example.com", full),
        "shared admin": ("admin@example.com", full),
        "read-only key": ("alice@example.com", ["read"]),
    }
    for email in {email for email, _ in people.values()}:
        await admin.create_identity(database, email, 10**9)
    for permission, grantee in (("read", "reader"), ("write", "writer"), ("admin", "admin")):
        await admin.grant(
            database, "alice@example.com", "Library", f"{grantee}@example.com", permission
        )
    expected = {name: "ok" for name in people}
    expected["owner, revoked key"] = "unauthenticated"
    expected["read-only key"] = "forbidden"
    outcomes: dict[str, str] = {}
    try:
        for name, (email, scopes) in people.items():
            created = await admin.create_key(database, email, scopes)
            if name == "owner, revoked key":
                await admin.revoke_key(database, created.record.id)
            server = build_aggregate_server(replace(services, default_api_key=created.secret))
            async with Client(server) as client:
                result = await client.call_tool(
                    "scrape_page_screenshot",
                    {"url": site.url("/", host=SITE)},
                    raise_on_error=False,
                )
            if result.is_error:
                outcomes[name] = result.content[0].text.split(":", 1)[0]  # type: ignore[union-attr]
                continue
            assert result.structured_content is not None
            artifact_id = result.structured_content["artifactId"]
            async with database.unit_of_work() as uow:
                owners = [
                    who
                    for who in sorted({e for e, _ in people.values()})
                    if await uow.artifacts.get_owned(who, artifact_id) is not None
                ]
            outcomes[name] = "ok" if owners == [email] else f"owned by {owners}"
    finally:
        await browser.close()
    assert outcomes == expected
    assert browser.launches == 1  # every caller's server used the one browser
    async with database.unit_of_work() as uow:
        assert (await uow.artifacts.live_usage("alice@example.com")).count == 2
        recorded = await session_of(uow).execute(
            text(
                "SELECT outcome, count(*) FROM mem_provenance "
                "WHERE operation = 'artifact_store' GROUP BY outcome"
            )
        )
        # Six screenshots stored; the read-only key's refusal audited as a denial.
        assert {outcome: count for outcome, count in recorded.all()} == {
            "succeeded": 6,
            "denied": 1,
        }


async def test_the_tool_is_declared_completely(client: Client[Any]) -> None:
    (tool,) = [t for t in await client.list_tools() if t.name == "scrape_page_screenshot"]
    assert tool.title == "Screenshot a page"
    hints = tool.annotations
    assert hints is not None
    assert (hints.read_only_hint, hints.destructive_hint, hints.idempotent_hint) == (
        False,
        False,
        False,
    )
    assert hints.open_world_hint is True
    schema = tool.input_schema
    assert schema["additionalProperties"] is False
    assert schema["required"] == ["url"]
    assert set(schema["properties"]) == {"url", "fullPage", "width"}
    assert schema["properties"]["width"]["minimum"] == 320
    assert schema["properties"]["width"]["maximum"] == 2560
    assert schema["properties"]["url"]["maxLength"] == 4096
    assert tool.output_schema is not None
    assert {"artifactId", "expiresAt", "pageUrl", "pageTitle", "cut"} <= set(
        tool.output_schema["properties"]
    )


async def test_over_http_one_browser_serves_every_call_and_closes_with_the_server(
    services: MemoryServices, key: str, site: WebServer
) -> None:
    """The real HTTP stack (stateless, bearer keys): the browser is launched by the first
    screenshot, reused by the next (each request stands alone), and closed at shutdown."""
    site.routes["/"] = html("<p>over http</p>", "Over HTTP")
    server = build_http_server(
        services, name="mcp-scraper", build_server=build_aggregate_server, tools=AGGREGATE_SELECTION
    )
    sock = bind_listening_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    transport = StreamableHttpTransport(f"http://127.0.0.1:{port}/mcp", auth=key)
    with capture_logs() as logs:
        async with anyio.create_task_group() as group:
            group.start_soon(functools.partial(run_http, server, "127.0.0.1", port, sockets=[sock]))
            for _ in range(2):
                async with Client(transport) as client:
                    result = await client.call_tool(
                        "scrape_page_screenshot", {"url": site.url("/", host=SITE)}
                    )
                assert result.structured_content is not None
                assert result.structured_content["pageTitle"] == "Over HTTP"
            group.cancel_scope.cancel()
    sock.close()
    events = [line["event"] for line in logs if line["event"].startswith("screenshot_browser_")]
    assert events.count("screenshot_browser_launched") == 1
    assert events[-1] == "screenshot_browser_closed"


def _with_timeout(services: MemoryServices, key: str, seconds: float) -> MemoryServices:
    settings = services.settings.model_copy(update={"scraper_screenshot_timeout_seconds": seconds})
    return replace(services, default_api_key=key, settings=settings)


# Dripped a byte every 0.05 s, these bodies take over 80 minutes: within a test they never end,
# so only the call's own deadline can end a wait on them.
ENDLESS = b"x" * 100_000


async def test_time_is_bounded_for_a_slow_document_and_a_hanging_subresource(
    services: MemoryServices,
    key: str,
    database: Database,
    site: WebServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    site.routes["/drip"] = Reply(body=b"<p>" + ENDLESS, drip_seconds=0.05)
    site.routes["/hangs"] = html('<p>visible</p><img src="/forever">', "Hangs")
    site.routes["/forever"] = Reply(body=ENDLESS, drip_seconds=0.05)
    site.routes["/"] = html("<p>quick</p>", "Quick")
    # The guards below only stop a hang (a deadline that is not enforced); they measure nothing.
    async with Client(build_aggregate_server(_with_timeout(services, key, 3))) as client:
        with (
            anyio.fail_after(120),
            pytest.raises(ToolError, match="fetch_failed: the page was not captured within 3 s"),
        ):
            await client.call_tool("scrape_page_screenshot", {"url": site.url("/drip", host=SITE)})
    assert await artifact_count(database) == 0
    # A page whose image never finishes is captured as it is, within the call's deadline.
    # Settling may last an hour here, so the capture succeeds only because settling stops
    # halfway to the deadline; the deadline (10 s) leaves the capture about 5 s, and the
    # browser is launched beforehand, by a quick page on the same Chromium with a generous
    # deadline, so that its start (seconds on a busy machine) is not spent from them.
    monkeypatch.setattr(scraper_chromium, "SETTLE_SECONDS", 3600.0)
    chromium = system_chromium(services.settings)
    assert chromium is not None

    def screenshot(seconds: float) -> Any:
        tools = build_scraper_tools(_with_timeout(services, key, seconds), chromium=chromium)
        return next(tool for tool in tools if tool.name == "scrape_page_screenshot")

    try:
        await screenshot(120).run({"url": site.url("/", host=SITE)})
        assert chromium.launches == 1
        with anyio.fail_after(120), capture_logs() as logs:
            result = await screenshot(10).run({"url": site.url("/hangs", host=SITE)})
        assert chromium.launches == 1
    finally:
        await chromium.close()
    assert [line["event"] for line in logs].count("screenshot_page_still_loading") == 1
    assert result.structured_content is not None
    assert result.structured_content["pageTitle"] == "Hangs"
