"""Assets as MCP resources (memory_tools.mcp.resources), in process: the template, reading one
(the preview's bytes and the metadata), the caller's listing with its cursor, the refusals, and
both kinds of subscription announcing a finished embedding."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import anyio
import mcp_types
import pytest
import pyvips
from fastmcp import Client
from mcp.client.subscriptions import ResourceUpdated, listen
from mcp.shared.exceptions import MCPError

from memory_tools import MemoryServices, build_memory_server
from memory_tools.errors import InvalidInputFailure
from memory_tools.serving import build_http_server
from memory_tools.serving.job_worker import job_worker
from memory_tools.workflows import asset_resources
from memory_tools.workflows.asset_resources import (
    RESOURCE_PAGE_SIZE,
    asset_id_in,
    reduce_preview,
)

from ..pictures import picture
from ..tool_calls import call

MISSING = "ast_" + "z" * 26
# Generous: a notification follows a worker's commit within milliseconds; the bound only keeps a
# broken subscription from hanging the suite.
NOTIFIED_WITHIN = 30.0


def uri(asset_id: str) -> str:
    return f"image-memory://assets/{asset_id}"


async def _save(client: Client[Any], seed: int, size: int = 48) -> str:
    saved = await call(
        client,
        "image_asset_save",
        {"imageBase64": base64.b64encode(picture(seed, size)).decode(), "title": f"Pic {seed}"},
    )
    return str(saved["assetId"])


def _server(services: MemoryServices, key: str) -> Any:
    return build_memory_server(replace(services, default_api_key=key))


async def _error(read: Any) -> MCPError:
    with pytest.raises(MCPError) as raised:
        await read
    return raised.value


async def test_template_read_and_list(
    saving: MemoryServices, make_person: Callable[..., Any]
) -> None:
    alice = await make_person("alice@example.com")
    bob = await make_person("bob@example.com")
    async with Client(_server(saving, bob.key)) as b:
        bobs = await _save(b, 99)
    async with Client(_server(saving, alice.key)) as c:
        templates = await c.list_resource_templates()
        assert [t.uri_template for t in templates] == ["image-memory://assets/{assetId}"]
        assert templates[0].mime_type == "image/webp"
        asset_id = await _save(c, 1, size=120)
        read = await c.read_resource_mcp(uri(asset_id))
        blob, text = read.contents
        assert isinstance(blob, mcp_types.BlobResourceContents)
        assert isinstance(text, mcp_types.TextResourceContents)
        assert blob.mime_type == "image/webp" and text.mime_type == "application/json"
        image = pyvips.Image.new_from_buffer(base64.b64decode(blob.blob), "")
        assert (image.width, image.height) == (120, 120)
        assert image.get_fields().count("exif-data") == 0
        metadata = json.loads(text.text)
        got = await call(c, "image_asset_get", {"assetId": asset_id})
        assert metadata.pop("rendition") == "preview"
        assert metadata == got  # image_asset_get's own answer, without links
        # Another owner's asset and an id that never existed: the same not_found.
        for other in (bobs, MISSING):
            error = await _error(c.read_resource_mcp(uri(other)))
            assert error.error.code == mcp_types.INVALID_PARAMS
            assert error.error.message == "not_found: asset not found"
        for malformed in ("not-an-id", "ast_" + "a" * 61, "ast_%2F..%2F"):
            bad = await _error(c.read_resource_mcp(uri(malformed)))
            assert bad.error.code == mcp_types.INVALID_PARAMS
            assert bad.error.message == (
                "invalid_input: uri: the assetId is not an asset id (ast_...)"
            )
        # The listing: only alice's own assets, newest first.
        listed = await c.list_resources_mcp()
        assert [r.uri for r in listed.resources] == [uri(asset_id)]
        assert listed.resources[0].title == "Pic 1" and listed.next_cursor is None


async def test_listing_pages_with_a_cursor(
    saving: MemoryServices, make_person: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(asset_resources, "RESOURCE_PAGE_SIZE", 2)
    alice = await make_person("alice@example.com")
    async with Client(_server(saving, alice.key)) as c:
        saved = [await _save(c, seed) for seed in range(5)]
        seen: list[str] = []
        cursor: str | None = None
        pages = 0
        while True:
            page = await c.list_resources_mcp(cursor=cursor)
            pages += 1
            assert len(page.resources) <= 2
            seen.extend(r.uri for r in page.resources)
            cursor = page.next_cursor
            if cursor is None:
                break
        assert seen == [uri(a) for a in reversed(saved)] and pages == 3
        bad = await _error(c.list_resources_mcp(cursor="garbage"))
        assert bad.error.code == mcp_types.INVALID_PARAMS
        assert bad.error.message.startswith("invalid_input: cursor")
    assert RESOURCE_PAGE_SIZE == 50


async def test_a_revoked_key_reads_and_lists_nothing(
    saving: MemoryServices, make_person: Callable[..., Any]
) -> None:
    from memory_tools.operations import admin

    alice = await make_person("alice@example.com")
    async with Client(_server(saving, alice.key)) as c:
        asset_id = await _save(c, 3)
        await admin.revoke_key(saving.database, alice.key_id)
        for attempt in (c.read_resource_mcp(uri(asset_id)), c.list_resources_mcp()):
            error = await _error(attempt)
            assert error.error.message.startswith("unauthenticated:"), error.error.message


def test_asset_uris_are_checked() -> None:
    assert asset_id_in(uri(MISSING)) == MISSING
    for wrong in ("image-memory://assets/", "image-memory://projects/" + MISSING, uri("ast_x/y")):
        with pytest.raises(InvalidInputFailure):
            asset_id_in(wrong)


def test_a_large_preview_is_reduced_to_fit() -> None:
    noise = pyvips.Image.gaussnoise(2048, 2048).cast("uchar")
    preview = noise.bandjoin([noise, noise]).copy(interpretation="srgb").webpsave_buffer(Q=82)
    reduced = reduce_preview(preview, len(preview) // 3)
    assert reduced is not None
    image, edge = reduced
    assert len(image) <= len(preview) // 3 and edge in (1024, 512, 256)
    assert reduce_preview(preview, 10) is None


async def _subscribe(client: Client[Any], resource: str) -> Any:
    # Deprecated by the SDK for 2026-07-28 only; the session revisions still define it.
    return await client.session.subscribe_resource(resource)  # pyright: ignore[reportDeprecated]


# The SDK client marks resources/subscribe deprecated (removed in 2026-07-28); the session
# revisions it serves are still what stdio clients speak.
@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
async def test_session_subscribe_announces_the_finished_embedding(
    saving: MemoryServices, make_person: Callable[..., Any]
) -> None:
    alice = await make_person("alice@example.com")
    bob = await make_person("bob@example.com")
    updates: list[str] = []
    arrived = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, mcp_types.ResourceUpdatedNotification):
            updates.append(message.params.uri)
            arrived.set()

    async with Client(_server(saving, bob.key)) as b:
        bobs = await _save(b, 98)
    server = _server(saving, alice.key)
    async with Client(server, mode="legacy", message_handler=on_message) as c:
        init = c.initialize_result
        assert init is not None and init.capabilities.resources is not None
        assert init.capabilities.resources.subscribe is True
        asset_id = await _save(c, 4)
        await _subscribe(c, uri(asset_id))
        await _subscribe(c, uri(asset_id))  # again: one follower
        for other in (bobs, MISSING):
            error = await _error(_subscribe(c, uri(other)))
            assert error.error.message == "not_found: asset not found"
        assert (await call(c, "image_asset_get", {"assetId": asset_id}))["embeddingStatus"] == (
            "pending"
        )
        await job_worker(saving, handlers={}).drain()
        with anyio.fail_after(NOTIFIED_WITHIN):
            await arrived.wait()
        assert updates == [uri(asset_id)]
        got = await call(c, "image_asset_get", {"assetId": asset_id})
        assert got["embeddingStatus"] == "ready"


async def test_listen_announces_the_finished_embedding(
    saving: MemoryServices, make_person: Callable[..., Any]
) -> None:
    alice = await make_person("alice@example.com")
    bob = await make_person("bob@example.com")
    async with Client(_server(saving, bob.key)) as b:
        bobs = await _save(b, 97)
    async with Client(_server(saving, alice.key)) as c:
        asset_id = await _save(c, 5)
        # Another owner's asset: refused like a read, before any acknowledgement.
        with pytest.raises(MCPError) as refused:
            async with listen(c.session, resource_subscriptions=[uri(bobs)]):
                pass
        assert refused.value.error.message == "not_found: asset not found"
        async with listen(c.session, resource_subscriptions=[uri(asset_id)]) as subscription:
            await job_worker(saving, handlers={}).drain()
            with anyio.fail_after(NOTIFIED_WITHIN):
                event = await anext(aiter(subscription))
        assert event == ResourceUpdated(uri=uri(asset_id))


def _subscribe_capability(client: Client[Any]) -> bool | None:
    capabilities = client.server_capabilities
    assert capabilities is not None and capabilities.resources is not None
    return capabilities.resources.subscribe


async def test_the_subscribe_capability_is_true_only_where_it_works(
    saving: MemoryServices, make_person: Callable[..., Any]
) -> None:
    """stdio (a session, or 2026-07-28 with listen) and HTTP's 2026-07-28 carry updates; a
    session revision over stateless HTTP cannot, and is told so."""
    alice = await make_person("alice@example.com")
    stdio = _server(saving, alice.key)
    http = build_http_server(saving)
    async with Client(stdio, mode="legacy") as c:
        assert _subscribe_capability(c) is True
    async with Client(stdio) as c:
        assert _subscribe_capability(c) is True
    async with Client(http) as c:
        assert _subscribe_capability(c) is True
    async with Client(http, mode="legacy") as c:
        assert _subscribe_capability(c) is False


async def test_a_follower_stops_when_its_key_is_revoked(
    saving: MemoryServices, make_person: Callable[..., Any]
) -> None:
    """Each notified change is read as the subscriber again: a key revoked meanwhile ends the
    follow at the next change, announcing nothing."""
    from memory_tools.operations import admin
    from memory_tools.workflows.asset_resources import follow_asset
    from memory_tools.workflows.calls import ApiKey

    alice = await make_person("alice@example.com")
    async with Client(_server(saving, alice.key)) as c:
        asset_id = await _save(c, 6)
    announced: list[str] = []

    async def announce() -> None:
        announced.append(asset_id)

    ended: list[str] = []

    async def follow(*, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        ended.append(
            await follow_asset(
                saving, ApiKey(alice.key), asset_id, announce, task_status=task_status
            )
        )

    # Leaving the task group waits for the follower to end by itself.
    with anyio.fail_after(NOTIFIED_WITHIN):
        async with anyio.create_task_group() as group:
            await group.start(follow)
            await admin.revoke_key(saving.database, alice.key_id)
            await job_worker(saving, handlers={}).drain()  # the embedding finishes: notified
    assert ended == ["unreadable"] and announced == []


async def test_no_revision_is_promised_a_resource_list_change(
    saving: MemoryServices, make_person: Callable[..., Any]
) -> None:
    """Saves and deletes change ``resources/list`` but send no list-changed notice, so no
    client is told to wait for one (it would keep a stale list): the session revisions'
    ``resources.listChanged`` is false over stdio and HTTP, and a 2026-07-28 listen stream
    that asks for resource list changes is acknowledged without them."""
    alice = await make_person("alice@example.com")
    for server in (_server(saving, alice.key), build_http_server(saving)):
        async with Client(server, mode="legacy") as c:
            capabilities = c.server_capabilities
            assert capabilities is not None and capabilities.resources is not None
            assert capabilities.resources.list_changed is False
    async with (
        Client(_server(saving, alice.key)) as c,
        listen(c.session, resources_list_changed=True, tools_list_changed=True) as subscription,
    ):
        assert subscription.honored.resources_list_changed is None
        assert subscription.honored.tools_list_changed is True


def test_the_connection_is_read_where_the_sdk_keeps_it() -> None:
    """The one read of the SDK's private state (``_connection_of``, mcp 2.3.0) still finds
    the connection a real ``ServerSession`` was built with; a release that moves it fails
    here, naming the function to update, instead of refusing subscriptions in silence."""
    from mcp.server.connection import Connection
    from mcp.server.context import ServerRequestContext
    from mcp.server.session import ServerSession

    from memory_tools.mcp.resources import (
        _connection_of,  # pyright: ignore[reportPrivateUsage]
    )

    class _Nowhere:
        async def notify(self, *args: Any, **kwargs: Any) -> None:
            raise AssertionError("nothing is sent")

        async def send_request(self, *args: Any, **kwargs: Any) -> Any:
            raise AssertionError("nothing is sent")

    connection = Connection(_Nowhere(), protocol_version="2025-11-25")  # type: ignore[arg-type]
    session = ServerSession(_Nowhere(), connection)  # type: ignore[arg-type]
    ctx = ServerRequestContext[Any](
        session=session,
        lifespan_context=None,
        protocol_version="2025-11-25",
        method="resources/subscribe",
    )
    assert _connection_of(ctx) is connection
