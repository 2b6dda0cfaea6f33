"""The web app: a person's library in the browser, served next to ``/mcp`` (docs/web.md).

Server-rendered with Starlette routes and Jinja2 templates, plus small hand-written scripts
under ``static/``. A browser signs in with an API key and gets a session that acts as that key
(:mod:`memory_tools.sessions`); every page and action then runs the same workflows under the
same authorisation as the MCP tools (:mod:`memory_tools.web.handlers`). Nothing here reads the
database around them.

Modules: ``security`` (headers, CSP nonce, cookies, CSRF), ``rendering`` (templates, flash),
``handlers`` (page, action and JSON endpoint), ``account`` (sign-in, sign-out, account,
static files), ``not_found`` (the 404 page of an address no route serves, a middleware),
``bulk`` (the library's and the trash's bulk actions), and one module per page group.
"""

from __future__ import annotations

from starlette.middleware import Middleware
from starlette.routing import Route

from memory_tools.services import MemoryServices
from memory_tools.web import (
    account,
    asset_page,
    bulk,
    duplicates,
    jobs,
    keys,
    library,
    search_page,
    sharing,
    trash,
    uploads,
    usage,
)
from memory_tools.web.not_found import NotFoundPage

_PAGE_GROUPS = (
    account,
    library,
    asset_page,
    uploads,
    search_page,
    duplicates,
    trash,
    bulk,
    usage,
    sharing,
    keys,
    jobs,
)


def web_routes(services: MemoryServices) -> list[Route]:
    """Every route of the web app, for ``services``."""
    return [route for group in _PAGE_GROUPS for route in group.routes(services)]


def web_middleware(services: MemoryServices) -> list[Middleware]:
    """The ASGI middleware the web app needs around the whole HTTP app: its 404 page."""
    return [Middleware(NotFoundPage, services=services)]


__all__ = ["web_middleware", "web_routes"]
