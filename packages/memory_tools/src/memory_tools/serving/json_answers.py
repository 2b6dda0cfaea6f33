"""A quick call that can receive no notification is answered as one JSON body.

Over streamable HTTP a server may answer a POSTed request either way (``application/json`` or
``text/event-stream``); a client must accept both. The MCP SDK's server answers every request
of a handshake-era client (protocol 2025-11-25 and before: every client that sends
``initialize``) with an event stream, unless a whole server is switched to JSON. The stream
costs the server about 1.5 ms of CPU per call (sse-starlette's response with its task group,
pings and writer; docs/performance.md), about a tenth of a small call.

A stream carries something besides the answer only when the call sends notifications. Ours
send one kind, progress, and only to a request that carried a progress token
(``memory_tools.mcp.tools.client_progress``); without MCP sessions (``stateless_http``), nothing
else reaches a request's stream. So a request without a progress token is answered as JSON,
and one with a token keeps the SDK's stream.

But a JSON answer sends its headers only when the call ends, and a handshake client waits for
them under its HTTP read timeout (5 s with httpx's defaults), while a stream's headers come at
once: a long call (``waitSeconds`` up to 30 s, a save from a slow URL) would fail such a client.
So, as the SDK does for clients of the stateless protocol (``2026-07-28``), the JSON answer is
deferred, not promised: a call still running after :data:`DEFER_SECONDS` gets what the SDK's
stream gave it (headers, a keep-alive comment every :data:`PING_SECONDS`, then its answer as one
event), so read timeouts of clients and proxies behave as before. And since nothing else watches
the connection while a JSON answer is prepared, a client that goes away ends the call, as it did
with the stream.

A body over :data:`SEARCHED_BODY_BYTES` (an image sent as base64) keeps the SDK's stream: searching
megabytes for a progress token would cost more than the stream it saves.

The SDK builds a transport per stateless request from a module global, with no hook to choose
the answer's form per request, so :func:`install` replaces that global with a subclass that
changes only the form of the answer. It checks the SDK still has what it relies on, and
refuses to start otherwise.
"""

from __future__ import annotations

import inspect
from typing import Literal

import anyio
import pydantic_core
from mcp.server import streamable_http_manager
from mcp.server.streamable_http import StreamableHTTPServerTransport, check_accept_headers
from starlette.requests import ClientDisconnect, Request
from starlette.types import Message, Receive, Scope, Send

# A call still running after this long is answered as an event stream.
DEFER_SECONDS = 1.0
# Keep-alive comments of such a stream, as the SDK's own streams send them.
PING_SECONDS = 15.0

# The largest body searched for a progress token (about 1 ms of the event loop at most).
SEARCHED_BODY_BYTES = 1024 * 1024

_TOKEN = b'"progressToken"'
_STREAM_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache, no-transform"),
    (b"connection", b"keep-alive"),
    (b"x-accel-buffering", b"no"),
]


def may_be_notified(body: bytes) -> bool:
    r"""Whether the JSON-RPC request ``body`` asks for progress (``params._meta.progressToken``).

    A byte search, since a body can hold megabytes of base64; exact when the body escapes no
    character (``\u``), which the key itself would need to hide from it; otherwise parsed.
    True for what cannot be read as one request: the SDK answers it with its own error.
    """
    if _TOKEN in body:
        return True
    # A backslash is found by memchr; the two-byte escape only where there is one.
    if b"\\" not in body or b"\\u" not in body:
        return False
    try:
        message = pydantic_core.from_json(body)
    except ValueError:
        return True
    if not isinstance(message, dict):
        return True
    params = message.get("params")
    if params is None:
        return False
    meta = params.get("_meta") if isinstance(params, dict) else True
    if meta is None:
        return False
    return not isinstance(meta, dict) or "progressToken" in meta


def stream_event(body: bytes) -> bytes:
    """A JSON-RPC message as the one event of an MCP event stream (``event: message``)."""
    data = b"".join(b"data: " + line + b"\r\n" for line in body.splitlines() or [b""])
    return b"event: message\r\n" + data + b"\r\n"


class _DeferredAnswer:
    """The ASGI ``send`` of a JSON answer that becomes an event stream when it is late."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self._lock = anyio.Lock()
        # The form whose headers went out first: the JSON answer's or the stream's.
        self._form: Literal["json", "stream"] | None = None
        self._done = False  # the answer was sent whole, in either form
        self._body = bytearray()

    @property
    def done(self) -> bool:
        """Whether the whole answer was sent (a 202 for a notification included)."""
        return self._done

    async def send(self, message: Message) -> None:
        """What the transport sends: passed on, or turned into the stream's last event."""
        async with self._lock:
            if message["type"] == "http.response.start":
                if self._form is None:
                    self._form = "json"
                    await self._send(message)
                return
            if self._form == "json":
                # Marked before the send: the server may tell the watcher the exchange is over
                # while the send is still flushing.
                self._done = not message.get("more_body", False)
                await self._send(message)
                return
            self._body.extend(message.get("body", b""))
            if not message.get("more_body", False):
                self._done = True
                event = stream_event(bytes(self._body))
                await self._send({"type": "http.response.body", "body": event, "more_body": False})

    async def stream_when_late(self) -> None:
        """After :data:`DEFER_SECONDS` without an answer: open the stream, then keep it alive."""
        await anyio.sleep(DEFER_SECONDS)
        async with self._lock:
            if self._form is not None:
                return
            self._form = "stream"
            start = {"type": "http.response.start", "status": 200, "headers": _STREAM_HEADERS}
            await self._send(start)
        while True:
            await anyio.sleep(PING_SECONDS)
            async with self._lock:
                if self._done:
                    return
                ping = {"type": "http.response.body", "body": b": ping\r\n\r\n", "more_body": True}
                await self._send(ping)


class _JsonWhenSilent(StreamableHTTPServerTransport):
    """The SDK's transport, answering a stateless request without a progress token as JSON."""

    async def _handle_post_request(
        self, scope: Scope, request: Request, receive: Receive, send: Send
    ) -> None:
        if self.mcp_session_id is not None or self.is_json_response_enabled:
            # A session's transport serves many requests: its form is the session's.
            await super()._handle_post_request(scope, request, receive, send)
            return
        # A client that does not take a stream is refused by the SDK, as before: a late answer
        # could not reach it.
        takes_json, takes_stream = check_accept_headers(request)
        if not (takes_json and takes_stream):
            await super()._handle_post_request(scope, request, receive, send)
            return
        try:
            # Read once: Starlette keeps the body on the request, and the SDK reads it there.
            body = await request.body()
        except ClientDisconnect:
            return  # gone before its request was whole: nothing to answer, nothing was run
        if len(body) > SEARCHED_BODY_BYTES or may_be_notified(body):
            await super()._handle_post_request(scope, request, receive, send)
            return
        self.is_json_response_enabled = True
        answer = _DeferredAnswer(send)
        async with anyio.create_task_group() as call:

            async def end_when_gone() -> None:
                # The body is read: what comes next is the client going away, or the answer
                # sent (a notification's 202 comes before the SDK hands the notification on,
                # which must not be cut short).
                while (await receive())["type"] != "http.disconnect":
                    pass
                if not answer.done:
                    call.cancel_scope.cancel()

            call.start_soon(end_when_gone)
            call.start_soon(answer.stream_when_late)
            await super()._handle_post_request(scope, request, receive, answer.send)
            call.cancel_scope.cancel()


def install() -> None:
    """Answer quick silent calls as JSON in every stateless HTTP server of this process.

    Idempotent. Raises ``RuntimeError`` when the MCP SDK no longer builds its transports the way
    this relies on (a dependency upgrade): better a server that does not start than one that
    answers wrong.
    """
    current = getattr(streamable_http_manager, "StreamableHTTPServerTransport", None)
    if current is _JsonWhenSilent:
        return
    built_with = inspect.signature(StreamableHTTPServerTransport.__init__).parameters
    if (
        current is not StreamableHTTPServerTransport
        or not hasattr(StreamableHTTPServerTransport, "_handle_post_request")
        or not {"mcp_session_id", "is_json_response_enabled"} <= set(built_with)
    ):
        raise RuntimeError(
            "the MCP SDK's streamable HTTP transport changed: "
            "memory_tools.serving.json_answers needs updating"
        )
    streamable_http_manager.StreamableHTTPServerTransport = _JsonWhenSilent  # type: ignore[misc]
