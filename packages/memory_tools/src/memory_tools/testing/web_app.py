"""The web app over real HTTP for tests: a served app, and a client that acts as a browser.

:func:`serve_web_app` picks the port first, so the object store's signed links can point at
the server that serves them. :class:`WebClient` keeps cookies like a browser, signs in through
the sign-in form, and sends changes the way the app's own pages do (same-origin, CSRF token).
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from memory_tools.services import MemoryServices
from memory_tools.testing.mcp_http import free_port, serve_mcp_http

_CSRF_META = re.compile(r'<meta name="csrf-token" content="([^"]*)">')
_SIGN_IN_TOKEN = re.compile(r'name="signInToken" value="([^"]*)"')


@dataclass(frozen=True)
class WebApp:
    """A web app being served: its base URL and the services behind it."""

    base_url: str
    services: MemoryServices


@asynccontextmanager
async def serve_web_app(make_services: Callable[[str], MemoryServices]) -> AsyncGenerator[WebApp]:
    """Serve the memory server's HTTP app (web app included) on 127.0.0.1 for a test.

    ``make_services(base_url)`` builds the services (e.g. a local store signing links on it).
    """
    from memory_tools.serving.app import build_http_server
    from memory_tools.web import web_middleware

    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    services = make_services(base_url)
    server = build_http_server(services)
    async with serve_mcp_http(server, web_middleware(services), port=port):
        yield WebApp(base_url, services)


class WebClient:
    """A browser-like HTTP client of the web app (cookies kept, redirects not followed)."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.http = httpx.AsyncClient(base_url=base_url, follow_redirects=False, timeout=30)
        self.csrf = ""

    async def __aenter__(self) -> WebClient:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.http.aclose()

    async def sign_in(self, api_key: str, *, next_path: str = "/account") -> httpx.Response:
        """Sign in through the form, as a person would; then read the session's CSRF token."""
        form = await self.http.get("/sign-in")
        token = _SIGN_IN_TOKEN.search(form.text)
        if token is None:
            raise RuntimeError("the sign-in page has no form token")
        answer = await self.http.post(
            "/sign-in",
            data={"signInToken": token.group(1), "apiKey": api_key, "next": next_path},
            headers={"Origin": self.base_url},
        )
        if answer.status_code == 303:
            await self.get(answer.headers["location"])
        return answer

    async def get(self, path: str, **kwargs: Any) -> httpx.Response:
        """GET a page; remembers the CSRF token the page carries."""
        answer = await self.http.get(path, **kwargs)
        found = (
            _CSRF_META.search(answer.text)
            if "text/html" in answer.headers.get("content-type", "")
            else None
        )
        if found and found.group(1):
            self.csrf = found.group(1)
        return answer

    async def submit(
        self, path: str, data: dict[str, Any] | None = None, *, csrf: bool = True, **kwargs: Any
    ) -> httpx.Response:
        """POST a form as the app's pages do: our Origin and, unless told not to, the token."""
        fields = dict(data or {})
        if csrf:
            fields.setdefault("csrf", self.csrf)
        headers = {"Origin": self.base_url, **kwargs.pop("headers", {})}
        return await self.http.post(path, data=fields, headers=headers, **kwargs)

    async def call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """Call a JSON endpoint as the app's scripts do (Origin and X-CSRF-Token headers)."""
        headers = {"Origin": self.base_url, "X-CSRF-Token": self.csrf, **kwargs.pop("headers", {})}
        return await self.http.request(method, path, headers=headers, **kwargs)
