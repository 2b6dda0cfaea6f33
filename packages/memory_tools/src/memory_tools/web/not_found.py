"""The page of an address no route serves: the app's own 404, for browsers.

Starlette answers a path that matches no route with a plain-text ``Not Found``. A person who
follows a stale bookmark or mistypes an address should land on a page of the app instead: its
layout (with the navigation when signed in), what was not found, and a link home, still with
status 404. :class:`NotFoundPage` is an ASGI middleware around the whole app that replaces only
that answer, and only for a browser's ``GET`` or ``HEAD`` (one that accepts ``text/html``):

- a 404 some route gave itself (an unknown asset's page, a JSON endpoint's ``not_found``, a
  signed link that names no object) is left as it is: a route that matched is recorded in the
  request's scope (``scope["route"]``, set by Starlette's router before it calls the route);
- a request for another method (``GET /mcp`` answers 405) and an API client's request (no
  ``text/html`` in ``Accept``) keep Starlette's answer.
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memory_tools.services import MemoryServices
from memory_tools.web.handlers import not_found_page


def wants_html(scope: Scope) -> bool:
    """Whether the request is a browser's page load: ``GET``/``HEAD`` accepting ``text/html``."""
    if scope["method"] not in ("GET", "HEAD"):
        return False
    return "text/html" in Headers(scope=scope).get("accept", "")


class NotFoundPage:
    """Answer a browser's request for an address no route serves with the app's 404 page."""

    def __init__(self, app: ASGIApp, *, services: MemoryServices) -> None:
        self.app = app
        self.services = services

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on; replace the router's own 404 with the page."""
        if scope["type"] != "http" or not wants_html(scope):
            await self.app(scope, receive, send)
            return
        replaced = False

        async def send_unless_unrouted(message: Message) -> None:
            nonlocal replaced
            if (
                message["type"] == "http.response.start"
                and message["status"] == 404
                and "route" not in scope
            ):
                replaced = True
            if not replaced:
                await send(message)
            # Otherwise the router's plain "Not Found" (its start and body) is dropped.

        await self.app(scope, receive, send_unless_unrouted)
        if replaced:
            response = await not_found_page(Request(scope, receive), self.services)
            await response(scope, receive, send)
