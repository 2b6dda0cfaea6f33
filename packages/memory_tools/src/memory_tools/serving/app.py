"""The MCP server of a running process: tools, HTTP auth and plain routes, served by uvicorn."""

from __future__ import annotations

import socket
from typing import Protocol

from fastmcp import FastMCP
from fastmcp.server.auth import AuthProvider
from starlette.middleware import Middleware

from memory_tools.mcp import ApiKeyVerifier, build_memory_server
from memory_tools.mcp.resources import without_session_subscriptions
from memory_tools.mcp.toolsets import MEMORY_SELECTION, ToolSelection
from memory_tools.services import MemoryServices
from memory_tools.serving import json_answers
from memory_tools.serving.http_routes import health_routes, object_routes
from memory_tools.serving.metrics_route import metrics_routes
from memory_tools.serving.request_context import RequestContext
from memory_tools.serving.upload_routes import upload_routes


class BuildServer(Protocol):
    """Makes an app's MCP server from the services: ``build_memory_server`` or a superset."""

    def __call__(
        self,
        services: MemoryServices,
        *,
        name: str,
        auth: AuthProvider | None,
        tools: ToolSelection,
    ) -> FastMCP:
        """A server named ``name`` on ``services`` offering ``tools``.

        ``auth`` checks HTTP callers (stdio: None).
        """
        ...


def add_http_routes(
    server: FastMCP, services: MemoryServices, *, listen_host: str | None = None
) -> None:
    """Register the signed-object routes, the upload routes, health, metrics and the web app.

    ``listen_host``: the address the server is bound to; ``/metrics`` is open when it is a
    loopback address, and needs an ``admin`` key otherwise (or when it is not known).
    """
    from memory_tools.web import web_routes

    plain = [
        *object_routes(services),
        *upload_routes(services),
        *health_routes(services),
        *metrics_routes(services, listen_host=listen_host),
    ]
    for route in [*plain, *web_routes(services)]:
        methods = sorted((route.methods or set()) - {"HEAD"})
        server.custom_route(route.path, methods=methods)(route.endpoint)


async def run_http(
    server: FastMCP,
    host: str,
    port: int,
    *,
    sockets: list[socket.socket] | None = None,
    middleware: list[Middleware] | None = None,
) -> None:
    """Serve ``server`` over streamable HTTP at ``/mcp`` until shutdown (SIGINT/SIGTERM).

    ``sockets`` are already bound and listening (``bind_listening_socket``); without them
    uvicorn binds ``host:port`` itself. ``middleware``: ASGI middleware around the app, e.g.
    ``body_limit.mcp_middleware``.
    """
    await server.run_http_async(
        sockets=sockets,
        show_banner=False,
        host=host,
        port=port,
        path="/mcp",
        middleware=[Middleware(RequestContext), *(middleware or [])],
        # No MCP session lives in this process: every request stands alone (the key is checked
        # per request, the state is in the database), so any process behind one port or a
        # proxy answers any request, with no session affinity. Clients of the 2026-07-28
        # protocol are stateless anyway; this makes older, handshake clients so too.
        stateless_http=True,
        # Our logging config (with redaction) handles uvicorn's loggers; access lines would
        # carry signed-link query strings, so they are off.
        uvicorn_config={"access_log": False, "log_config": None},
    )


def build_http_server(
    services: MemoryServices,
    *,
    name: str = "image-memory",
    build_server: BuildServer = build_memory_server,
    tools: ToolSelection = MEMORY_SELECTION,
    listen_host: str | None = None,
) -> FastMCP:
    """An MCP server for HTTP: bearer API keys on ``/mcp`` plus the plain routes.

    ``build_server`` makes the MCP server (the memory tools alone by default, or an app's
    superset such as the aggregate server); ``tools`` the tools it offers; ``listen_host`` the
    address it will be bound to (see :func:`add_http_routes`).
    """
    # A quick call that asked for no progress is answered as JSON, not as an event stream.
    json_answers.install()
    auth = ApiKeyVerifier(services.database)
    server = build_server(services, name=name, auth=auth, tools=tools)
    # No sessions over HTTP (run_http: stateless_http), so no session-revision subscriptions.
    without_session_subscriptions(server)
    add_http_routes(server, services, listen_host=listen_host)
    return server
