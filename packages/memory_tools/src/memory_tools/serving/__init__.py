"""Serving the memory: what every server app (``memory-server``, ``scraper-mcp-server``) composes.

An app parses its command line, describes itself once as a :class:`ServerApp` (its name, the
MCP server it builds, the argv that runs it again) and calls the commands here:

- :func:`serve_http`: MCP over streamable HTTP at ``/mcp`` behind bearer API keys, the signed
  object routes, the direct-upload routes, ``/healthz`` and ``/healthz/ready``, the ``/mcp``
  body limit, the start-up banner and, unless told not to, the embedding worker in-process;
- :func:`serve_stdio`: MCP over stdio as ``MEMORY_API_KEY``'s identity, with its preview links;
- :func:`serve_http_processes`: ``--processes N``, supervised children on one port;
- :func:`run_worker`: an embedding worker process;
- :func:`run_command`: settings, logging, signals and exit statuses around any of them.

Modules: ``bootstrap`` (settings → runtime → services), ``app`` (the HTTP server),
``http_routes`` and ``upload_routes`` (the plain routes), ``body_limit``, ``json_answers`` (the
form of an answer on ``/mcp``), ``links`` (stdio), ``processes`` (the supervisor), ``commands``
and ``serve`` (the above), ``subcommands`` (how every command is declared and run) and the
``*_commands`` modules declaring them. The HTTP stack
(fastmcp, starlette, uvicorn) and the serving runtime (the worker, the ingest pipeline) load on
first use, so an app's operator commands start quickly.
"""

from typing import TYPE_CHECKING

from memory_db.lazy_exports import lazy_exports
from memory_tools.serving.commands import (
    Terminated,
    install_sigterm_handler,
    notice,
    run_command,
)
from memory_tools.serving.defaults import DEFAULT_HOST, DEFAULT_PORT

if TYPE_CHECKING:
    from memory_tools.serving.app import (
        BuildServer,
        add_http_routes,
        build_http_server,
        run_http,
    )
    from memory_tools.serving.bootstrap import public_base_url, running, stdio_api_key
    from memory_tools.serving.serve import (
        ServerApp,
        banner,
        run_worker,
        serve_http,
        serve_http_processes,
        serve_stdio,
    )

# Loaded on first use, so an operator command (`admin`, `backup` ...) imports neither the HTTP
# app (fastmcp, starlette) nor what serving needs (the worker, the ingest pipeline, pyvips).
_LAZY = {
    "memory_tools.serving.app": (
        "BuildServer",
        "add_http_routes",
        "build_http_server",
        "run_http",
    ),
    "memory_tools.serving.bootstrap": ("public_base_url", "running", "stdio_api_key"),
    "memory_tools.serving.serve": (
        "ServerApp",
        "banner",
        "run_worker",
        "serve_http",
        "serve_http_processes",
        "serve_stdio",
    ),
}
__getattr__ = lazy_exports(__name__, globals(), _LAZY)


__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "BuildServer",
    "ServerApp",
    "Terminated",
    "add_http_routes",
    "banner",
    "build_http_server",
    "install_sigterm_handler",
    "notice",
    "public_base_url",
    "run_command",
    "run_http",
    "run_worker",
    "running",
    "serve_http",
    "serve_http_processes",
    "serve_stdio",
    "stdio_api_key",
]
