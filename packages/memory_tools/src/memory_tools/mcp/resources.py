"""Assets as MCP resources: the template, the caller's listing, and change subscriptions.

Registered on every server ``build_memory_server`` makes (the memory server and the aggregate
server alike) when its tool selection offers ``image_asset_get``:

- ``resources/templates/list``: ``image-memory://assets/{assetId}``;
- ``resources/read``: the asset's sanitised preview (``image/webp`` blob) and its metadata
  (``application/json``: ``image_asset_get``'s answer, without links);
- ``resources/list``: the caller's most recent assets, a bounded page per call with a cursor;
- change notifications, ``notifications/resources/updated`` when an asset's embedding or OCR
  finishes, in the two ways the MCP revisions define (docs/tools.md#resources):

  - revision 2026-07-28 (every transport; the HTTP server's only one): the client opens a
    ``subscriptions/listen`` request naming the asset URIs; the notifications ride that
    request's own response stream;
  - the session revisions (2025-11-25 and earlier) over a transport with a standing channel
    (stdio): ``resources/subscribe``/``resources/unsubscribe``. The HTTP server keeps no
    sessions (``stateless_http``), so it does not offer them
    (:func:`without_session_subscriptions`) and advertises ``resources.subscribe`` false there.

The SDK derives ``resources.subscribe`` from the handlers registered, per revision, so the
capability is true exactly where one of the two works.

Everything runs as the caller through the one call runner and the tools' workflows
(:mod:`memory_tools.workflows.asset_resources`): the same checks, the same ``not_found``. A
refusal reaches the client as a JSON-RPC error whose message is ``"<code>: <message>"``, with
``-32602`` (invalid params) for ``invalid_input`` and ``not_found`` (a resource that does not
exist, as the specification asks) and ``-32603`` for the others.

fastmcp serves templates and reads but has no per-caller listing and no subscriptions, so those
handlers are registered on its low-level SDK server (:func:`_low_level`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import anyio
import mcp_types
from anyio.abc import TaskGroup
from fastmcp import FastMCP
from fastmcp.exceptions import ResourceError, ValidationError
from fastmcp.resources import ResourceContent, ResourceResult, ResourceTemplate
from fastmcp.server.low_level import LowLevelServer
from mcp.server.connection import Connection
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY

from memory_db import get_logger
from memory_tools.errors import ToolFailure
from memory_tools.mcp.registry import Refused
from memory_tools.mcp.tools import presented_key, run_as_caller, run_authorised
from memory_tools.services import MemoryServices
from memory_tools.workflows.asset_resources import (
    ASSET_URI_TEMPLATE,
    PREVIEW_MIME_TYPE,
    AssetResource,
    asset_id_in,
    asset_uri,
    follow_asset,
    list_asset_resources,
    read_asset_resource,
)

log = get_logger(__name__)

# Assets one connection (session revisions) or one listen stream may follow at once.
MAX_SUBSCRIPTIONS = 100
# Updates queued for a listen stream whose client reads slowly; past it, repeats are dropped
# (an update is a level trigger: "read it again"; one queued is as good as several).
MAX_QUEUED_UPDATES = 256
# Where a connection's followed assets are kept (``Connection.state``).
FOLLOWS_KEY = "image-memory.asset-follows"
# The handlers a server without sessions does not offer.
SESSION_METHODS = ("resources/subscribe", "resources/unsubscribe")

TEMPLATE_DESCRIPTION = "An image you can read: its preview (image/webp) and metadata (JSON)."


def _wire_error(failure: ToolFailure, uri: str | None = None) -> MCPError:
    """A workflow's refusal as a JSON-RPC error (see the module's docstring for the codes)."""
    log.info("resource_refused", code=failure.code)
    invalid = failure.code in ("invalid_input", "not_found")
    code = mcp_types.INVALID_PARAMS if invalid else mcp_types.INTERNAL_ERROR
    return MCPError(code=code, message=str(failure), data=None if uri is None else {"uri": uri})


def _failure(error: Refused | ToolFailure) -> ToolFailure:
    return error.failure if isinstance(error, Refused) else error


def _low_level(server: FastMCP) -> LowLevelServer[Any]:
    """Fastmcp's SDK server, where handlers for the methods fastmcp does not serve are added.

    fastmcp 4.2 has no public way to serve ``resources/subscribe`` or ``subscriptions/listen``
    or to list resources per caller; its ``_mcp_server`` is the SDK ``Server`` it dispatches to.
    """
    return server._mcp_server  # pyright: ignore[reportPrivateUsage]


class _Started:
    """When a detached follower started (its first read done), or why it could not.

    anyio's ``TaskStatus``, for a task that is not in a task group.
    """

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.failure: BaseException | None = None

    def started(self, value: None = None) -> None:
        self.event.set()


class AssetResources:
    """The resource handlers of one server.

    A session revision's ``resources/subscribe`` answers at once while its follower runs on,
    until the client unsubscribes, its connection closes or the asset becomes unreadable to
    it. No task group spans that: fastmcp enters and leaves a server's lifespan in an order a
    task group cannot follow, and the SDK's per-connection task group is private. So each
    such follower is a task of its own (:meth:`_detach`), kept here and cancelled by its
    connection's teardown (``Connection.exit_stack``) or by ``resources/unsubscribe``.
    """

    def __init__(self, services: MemoryServices) -> None:
        self.services = services
        self._detached: set[asyncio.Task[None]] = set()

    def register(self, server: FastMCP) -> None:
        """Serve the asset template, the listing and both kinds of subscription on ``server``."""
        server.add_template(
            ResourceTemplate.from_function(
                self.read,
                uri_template=ASSET_URI_TEMPLATE,
                name="image_asset",
                title="Image",
                description=TEMPLATE_DESCRIPTION,
                mime_type=PREVIEW_MIME_TYPE,
            )
        )
        low = _low_level(server)
        # The resource list changes with every save and delete, but no list-changed notice is
        # sent: a client that sees ``listChanged`` waits for the notice to list again, and
        # would keep a stale list. fastmcp advertises it by default on the session revisions
        # (its public ``notification_options``); 2026-07-28 derives it from serving ``listen``,
        # whose acknowledgement then declines ``resourcesListChanged`` (:meth:`listen`).
        low.notification_options = NotificationOptions(
            prompts_changed=low.notification_options.prompts_changed,
            resources_changed=False,
            tools_changed=low.notification_options.tools_changed,
        )
        low.add_request_handler(
            "resources/list", mcp_types.PaginatedRequestParams, self.list_resources
        )
        low.add_request_handler(
            "subscriptions/listen", mcp_types.SubscriptionsListenRequestParams, self.listen
        )
        low.add_request_handler(
            "resources/subscribe", mcp_types.SubscribeRequestParams, self.subscribe
        )
        low.add_request_handler(
            "resources/unsubscribe", mcp_types.UnsubscribeRequestParams, self.unsubscribe
        )

    async def read(self, assetId: str) -> ResourceResult:
        """``resources/read`` of ``image-memory://assets/{assetId}``: preview and metadata.

        ``assetId`` is checked by :func:`asset_id_in` (a bound given to fastmcp instead would
        be refused as a masked internal error, not as ``invalid_input``).
        """
        try:
            asset_id = asset_id_in(asset_uri(assetId))
            resource = await run_as_caller(
                self.services, read_asset_resource, self.services, asset_id=asset_id
            )
        except (Refused, ToolFailure) as error:
            failure = _failure(error)
            log.info("resource_refused", code=failure.code)
            level = logging.ERROR if failure.code == "internal" else logging.DEBUG
            if failure.code in ("invalid_input", "not_found"):
                raise ValidationError(str(failure), log_level=level) from None
            raise ResourceError(str(failure), log_level=level) from None
        return _contents(resource)

    async def list_resources(
        self, _ctx: ServerRequestContext[Any], params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListResourcesResult:
        """``resources/list``: a page of the caller's most recent assets, newest first."""
        cursor = params.cursor if params is not None else None
        try:
            page = await run_authorised(self.services, list_asset_resources, cursor=cursor)
        except Refused as refused:
            raise _wire_error(refused.failure) from None
        resources = [
            mcp_types.Resource(
                uri=asset_uri(item.asset_id),
                name=item.asset_id,
                title=item.title,
                mime_type=PREVIEW_MIME_TYPE,
            )
            for item in page.items
        ]
        return mcp_types.ListResourcesResult(resources=resources, next_cursor=page.next_cursor)

    async def _start_follow(
        self, group: TaskGroup, uri: str, announce: Callable[[], Awaitable[None]]
    ) -> None:
        """Check ``uri`` as the caller and follow it in ``group``; the caller's refusal raises."""
        try:
            asset_id = asset_id_in(uri)
        except ToolFailure as failure:
            raise _wire_error(failure, uri) from None
        try:
            await group.start(
                follow_asset, self.services, presented_key(self.services), asset_id, announce
            )
        except ToolFailure as failure:
            raise _wire_error(failure, uri) from None

    async def listen(
        self, ctx: ServerRequestContext[Any], params: mcp_types.SubscriptionsListenRequestParams
    ) -> mcp_types.SubscriptionsListenResult:
        """``subscriptions/listen`` (2026-07-28): updates of the named assets on this stream.

        Every URI is checked as the caller before the acknowledgement: one the caller may not
        read fails the request with its ``not_found``. List changes of tools and prompts are
        honoured (these lists do not change while a server runs); the resource list's changes
        are not announced, so they are not honoured.
        """
        request_id = ctx.request_id
        if request_id is None:
            raise MCPError(mcp_types.INVALID_REQUEST, "subscriptions/listen needs a request id")
        wanted = params.notifications
        uris = list(dict.fromkeys(wanted.resource_subscriptions or ()))
        if len(uris) > MAX_SUBSCRIPTIONS:
            raise MCPError(
                mcp_types.INVALID_PARAMS,
                f"invalid_input: at most {MAX_SUBSCRIPTIONS} resource subscriptions per stream",
            )
        meta: dict[str, Any] = {SUBSCRIPTION_ID_META_KEY: request_id}
        send, updates = anyio.create_memory_object_stream[str](MAX_QUEUED_UPDATES)
        honored = mcp_types.SubscriptionFilter(
            tools_list_changed=True if wanted.tools_list_changed else None,
            prompts_list_changed=True if wanted.prompts_list_changed else None,
            resource_subscriptions=uris or None,
        )
        refused: MCPError | None = None
        with send, updates:
            async with anyio.create_task_group() as group:
                for uri in uris:

                    async def announce(uri: str = uri) -> None:
                        try:
                            send.send_nowait(uri)
                        except anyio.WouldBlock:
                            log.debug("resource_update_dropped")  # the client reads slowly

                    try:
                        await self._start_follow(group, uri, announce)
                    except MCPError as error:
                        # Raised after the group is left: inside it, it would come out wrapped.
                        refused = error
                        group.cancel_scope.cancel()
                        break
                else:
                    await ctx.session.send_notification(
                        mcp_types.SubscriptionsAcknowledgedNotification(
                            params=mcp_types.SubscriptionsAcknowledgedNotificationParams(
                                notifications=honored, _meta=meta
                            )
                        ),
                        related_request_id=request_id,
                    )
                    async for uri in updates:
                        await ctx.session.send_notification(
                            mcp_types.ResourceUpdatedNotification(
                                params=mcp_types.ResourceUpdatedNotificationParams(
                                    uri=uri, _meta=meta
                                )
                            ),
                            related_request_id=request_id,
                        )
        if refused is not None:
            raise refused
        return mcp_types.SubscriptionsListenResult(_meta=meta)

    async def subscribe(
        self, ctx: ServerRequestContext[Any], params: mcp_types.SubscribeRequestParams
    ) -> mcp_types.EmptyResult:
        """``resources/subscribe`` (session revisions): updates on the connection's channel."""
        connection = _connection_of(ctx)
        uri = str(params.uri)
        if not connection.has_standalone_channel:
            raise MCPError(
                mcp_types.INVALID_REQUEST,
                "invalid_input: this connection cannot carry notifications; "
                "use subscriptions/listen (MCP 2026-07-28)",
            )
        follows = _follows(connection)
        if uri in follows:
            return mcp_types.EmptyResult()
        if len(follows) >= MAX_SUBSCRIPTIONS:
            raise MCPError(
                mcp_types.INVALID_PARAMS,
                f"invalid_input: at most {MAX_SUBSCRIPTIONS} subscriptions per connection",
            )
        try:
            asset_id = asset_id_in(uri)
        except ToolFailure as failure:
            raise _wire_error(failure, uri) from None
        key = presented_key(self.services)

        async def announce() -> None:
            await connection.send_resource_updated(uri)

        status = _Started()

        async def follow() -> None:
            try:
                await follow_asset(self.services, key, asset_id, announce, task_status=status)
            except Exception as exc:
                if not status.event.is_set():  # refused before it started: the answer says why
                    status.failure = exc
                    return
                log.warning("asset_follow_stopped", exc_info=True)
            finally:
                status.event.set()  # also when cancelled before it started
                if follows.get(uri) is task:
                    del follows[uri]

        task = self._detach(follow())
        follows[uri] = task
        await status.event.wait()
        if isinstance(status.failure, ToolFailure):
            raise _wire_error(status.failure, uri)
        if status.failure is not None:
            raise status.failure
        return mcp_types.EmptyResult()

    def _detach(self, follower: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Run ``follower`` as a task of its own, kept until it ends."""
        task = asyncio.get_running_loop().create_task(follower)
        self._detached.add(task)
        task.add_done_callback(self._detached.discard)
        return task

    async def unsubscribe(
        self, ctx: ServerRequestContext[Any], params: mcp_types.UnsubscribeRequestParams
    ) -> mcp_types.EmptyResult:
        """``resources/unsubscribe``: stop following; unknown URIs are a no-op."""
        task = _follows(_connection_of(ctx)).pop(str(params.uri), None)
        if task is not None:
            task.cancel()
        return mcp_types.EmptyResult()


def _connection_of(ctx: ServerRequestContext[Any]) -> Connection:
    """The connection a request came on (its state and teardown outlive the request).

    The one place that reads the SDK's private state. Written against mcp 2.3.0 (fastmcp
    4.2.3): a low-level handler gets a ``ServerRequestContext`` whose per-request
    ``ServerSession`` keeps the connection in ``_connection``, with no public accessor (the
    SDK's ``Context.connection`` is public, but the runner does not build that context for
    handlers); fastmcp reads it the same way (``fastmcp.server.context``, the client's log
    level). If an SDK release moves it, this fails loudly rather than refusing subscriptions
    in silence; ``test_the_connection_is_read_where_the_sdk_keeps_it`` checks it.
    """
    connection = getattr(ctx.session, "_connection", None)
    if not isinstance(connection, Connection):
        raise RuntimeError(
            "the MCP SDK no longer keeps a request's connection in ServerSession._connection "
            "(written against mcp 2.3.0): update memory_tools.mcp.resources._connection_of"
        )
    return connection


def _follows(connection: Connection) -> dict[str, asyncio.Task[None]]:
    """The assets this connection follows, by URI; all stopped when the connection closes."""
    follows: dict[str, asyncio.Task[None]] | None = connection.state.get(FOLLOWS_KEY)
    if follows is None:
        made: dict[str, asyncio.Task[None]] = {}
        connection.state[FOLLOWS_KEY] = made

        def stop() -> None:
            for task in made.values():
                task.cancel()
            made.clear()

        connection.exit_stack.callback(stop)
        return made
    return follows


def _contents(resource: AssetResource) -> ResourceResult:
    """The read answer: the image (when there is one), then the metadata as JSON."""
    metadata = resource.metadata.model_dump(mode="json")
    metadata["rendition"] = resource.rendition
    contents = [ResourceContent(metadata, mime_type="application/json")]
    if resource.image is not None:
        contents.insert(0, ResourceContent(resource.image, mime_type=resource.mime_type))
    return ResourceResult(contents)


def without_session_subscriptions(server: FastMCP) -> None:
    """Withdraw ``resources/subscribe`` from a server that keeps no sessions (stateless HTTP).

    Without a standing channel a session revision's notifications have nowhere to go, so the
    server neither offers the method nor advertises ``resources.subscribe`` to such clients;
    ``subscriptions/listen`` (2026-07-28) still works there.
    """
    handlers = _low_level(server)._request_handlers  # pyright: ignore[reportPrivateUsage]
    for method in SESSION_METHODS:
        handlers.pop(method, None)
