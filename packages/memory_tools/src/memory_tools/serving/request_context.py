"""Every HTTP request's log lines carry its ``request_id`` (docs/observability.md#logs).

An ASGI middleware around the whole app (MCP, web, uploads, signed objects) binds a request id
into structlog's context variables for the request's task, starting from an empty context, and
clears it afterwards. The id is the caller's ``X-Request-Id`` when it is a short plain token (so
a proxy's id can be followed through), else a new one; either way it is answered back in
``X-Request-Id``. Workflows add what they learn (``namespace_id``, ``asset_id``) to the same
context; the worker binds ``job_id``, ``asset_id``, ``model``, ``task`` and ``representation``
per job.
"""

from __future__ import annotations

import re
import secrets

import structlog
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADER = "x-request-id"
_PLAIN_ID = re.compile(r"[A-Za-z0-9._-]{8,64}")


def request_id(scope: Scope) -> str:
    """The caller's request id when it is a plain token of 8-64 characters, else a new one."""
    for name, value in scope.get("headers", []):
        if name == HEADER.encode():
            given = value.decode("latin-1")
            if _PLAIN_ID.fullmatch(given):
                return given
    return "req_" + secrets.token_hex(8)


class RequestContext:
    """Bind ``request_id`` for each HTTP request's log lines; answer it in ``X-Request-Id``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the request with its id bound, then clear the context."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = request_id(scope)

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)[HEADER] = rid
            await send(message)

        # A kept-alive connection serves several requests: nothing bound by one leaks into
        # the next.
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(request_id=rid)
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            structlog.contextvars.clear_contextvars()
