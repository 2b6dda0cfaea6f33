"""The request-body limit of ``/mcp``: what the save schema accepts, and a JSON-RPC error beyond.

The MCP SDK's streamable HTTP session manager refuses bodies over 4 MiB
(``DEFAULT_MAX_REQUEST_BODY_SIZE``) with a bare ``413``, and fastmcp builds that manager without
a way to pass another limit. A base64 save of an image of ``ASSET_MAX_BYTES`` (20 MiB by
default) needs about 27 MiB. This middleware, in front of every ``/mcp`` request:

- sets the SDK's limit to :func:`mcp_body_limit` on the session manager fastmcp made (its
  ``asgi_app`` is the SDK's ``RequestBodyLimitMiddleware``, whose ``max_body_size`` it sets);
- admits bodies of 1 MiB or more against a budget of :data:`BODY_BUDGET_FACTOR` largest
  bodies, so concurrent large saves wait their turn instead of growing memory, and gives the
  memory back afterwards;
- answers a larger body itself, before authentication, with a JSON-RPC error that names the
  limit and the direct-upload route, so a client shows why. The body is read and discarded
  first (never kept): a client still sending its body when the answer comes would see a
  broken connection instead of the answer. Beyond :data:`DRAIN_FACTOR` times the limit the
  connection is closed without reading on.
"""

from __future__ import annotations

from typing import Any

import anyio
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memory_db import MemorySettings, get_logger
from memory_tools.capacity import DecodeAdmission, trim_allocator
from memory_tools.mcp.refusals import send_jsonrpc_error

log = get_logger(__name__)

MCP_PATH = "/mcp"
UPLOAD_ROUTE = "/uploads"
# Room for the JSON-RPC envelope and the other arguments of a save (title, description, alt
# text, tags, sourceRef) next to the base64 image.
HEADROOM_BYTES = 1024 * 1024
# JSON-RPC "Invalid Request".
INVALID_REQUEST = -32600
# How much of a refused body is read (and discarded) so the client can read the answer.
DRAIN_FACTOR = 4
# Large bodies are admitted against a budget of this many largest bodies at once; more wait
# their turn. A base64 save holds its body, the decoded string and the image bytes at once
# (several times the body), before any decode admission applies: 24 concurrent 13 MB GIF
# saves took the server 2.3 GiB above its baseline without this.
BODY_BUDGET_FACTOR = 2
# Bodies from this size on go through the budget; after one, memory is given back to the OS.
LARGE_BODY = 1024 * 1024


def mcp_body_limit(settings: MemorySettings) -> int:
    """Largest accepted ``/mcp`` body: the base64 form of ``ASSET_MAX_BYTES`` plus headroom."""
    return (settings.asset_max_bytes + 2) // 3 * 4 + HEADROOM_BYTES


def mcp_middleware(settings: MemorySettings) -> list[Middleware]:
    """The ASGI middleware a memory HTTP server runs ``/mcp`` behind."""
    limit = mcp_body_limit(settings)
    return [
        Middleware(
            McpBodyLimit,
            limit=limit,
            max_image_bytes=settings.asset_max_bytes,
            budget=BODY_BUDGET_FACTOR * limit,
        )
    ]


class McpBodyLimit:
    """One body limit for ``/mcp``, with a JSON-RPC error (not a bare 413) beyond it."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        limit: int,
        max_image_bytes: int,
        budget: int | None = None,
        path: str = MCP_PATH,
    ) -> None:
        self.app = app
        self.limit = limit
        self.max_image_bytes = max_image_bytes
        self.paths = {path, path + "/"}
        # Bytes of large bodies in flight (first come, first served; one larger than the whole
        # budget runs alone), held until the request is answered.
        self.admission = DecodeAdmission(budget or BODY_BUDGET_FACTOR * limit)

    async def _admitted(self, size: int, scope: Scope, receive: Receive, send: Send) -> None:
        if size < LARGE_BODY:
            await self.app(scope, receive, send)
            return
        try:
            async with self.admission.admit(size):
                await self.app(scope, receive, send)
        finally:
            # Whatever the outcome (a refused body is never decoded, so no decode trims), the
            # buffers of a large request go back to the OS instead of staying in the heap.
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(trim_allocator)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Refuse an oversized ``/mcp`` body, else pass the request on with the SDK's limit set."""
        if scope["type"] != "http" or scope["path"] not in self.paths:
            await self.app(scope, receive, send)
            return
        _lift_sdk_limit(scope.get("app"), self.limit)
        declared = Headers(scope=scope).get("content-length")
        if declared is not None and declared.isdigit():
            if int(declared) > self.limit:
                if int(declared) <= DRAIN_FACTOR * self.limit:
                    await _drain(receive)
                await self._refuse(int(declared), send)
                return
            await self._admitted(int(declared), scope, receive, send)
            return
        if scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        # No declared length (a chunked body): read it here, up to the limit, then replay it.
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            body.extend(message.get("body", b""))
            if len(body) > self.limit:
                body.clear()
                if message.get("more_body", False):
                    await _drain(receive, DRAIN_FACTOR * self.limit)
                await self._refuse(None, send)
                return
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        await self._admitted(len(body), scope, replay, send)

    async def _refuse(self, declared: int | None, send: Send) -> None:
        size = f"{declared} bytes" if declared is not None else "more bytes"
        message = (
            f"request body too large: {size} for a limit of {self.limit} bytes (an image of at "
            f"most ASSET_MAX_BYTES={self.max_image_bytes} bytes as base64, plus the rest of the "
            f"call). Send large images with the direct-upload route POST {UPLOAD_ROUTE} instead "
            "of imageBase64; images over ASSET_MAX_BYTES are refused on every route."
        )
        log.info("mcp_body_refused", declared=declared, limit=self.limit)
        await send_jsonrpc_error(
            send,
            413,
            {
                "code": INVALID_REQUEST,
                "message": message,
                "data": {
                    "limitBytes": self.limit,
                    "maxImageBytes": self.max_image_bytes,
                    "uploadRoute": UPLOAD_ROUTE,
                },
            },
            [(b"connection", b"close")],
        )


async def _drain(receive: Receive, budget: int | None = None) -> None:
    """Read and discard the rest of a request body (at most ``budget`` bytes)."""
    seen = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return
        seen += len(message.get("body", b""))
        if not message.get("more_body", False) or (budget is not None and seen > budget):
            return


def _lift_sdk_limit(app: Any, limit: int) -> None:
    """Set the SDK session manager's body limit on the ``/mcp`` route of ``app`` to ``limit``.

    fastmcp makes a new session manager in every lifespan cycle, so this runs per request (a
    few attribute reads). Raises ``RuntimeError`` when fastmcp's structure is not what this
    expects, so a fastmcp upgrade that changes it fails loudly instead of capping saves at
    4 MiB again.
    """
    manager = _session_manager(app)
    # The SDK's RequestBodyLimitMiddleware (mcp.server.transport_security), by its attribute.
    limiter: Any = getattr(manager, "asgi_app", None)
    if not isinstance(getattr(limiter, "max_body_size", None), int):
        raise RuntimeError("the MCP session manager has no request body limit to set")
    if limiter.max_body_size != limit:
        limiter.max_body_size = limit
        manager.max_request_body_size = limit


def _session_manager(app: Any) -> Any:
    for route in getattr(app, "routes", ()):
        if getattr(route, "path", None) != MCP_PATH:
            continue
        endpoint = getattr(route, "endpoint", None)
        for _ in range(4):  # RequireAuthMiddleware(StreamableHTTPASGIApp(...)) and the like
            manager = getattr(endpoint, "session_manager", None)
            if manager is not None:
                return manager
            endpoint = getattr(endpoint, "app", None)
    raise RuntimeError(f"no running MCP session manager found on {MCP_PATH}")
