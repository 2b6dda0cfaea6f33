"""Every request of a page being screenshotted, made by us under the fetch policy.

Chromium never reaches the network for a page: the browser context routes every request
(``**/*``) to :meth:`PageRequests.handle`, which checks the URL with the fetcher's
:func:`~memory_tools.ingest.fetch.check_url` (scheme, port, host), makes the request itself
through a client of the server's :class:`~memory_tools.ingest.fetch.SafeFetcher` (which resolves
the host once, refuses any non-public address and connects to the address it checked, so DNS
rebinding between check and connect is impossible), follows redirects with the fetcher's
:func:`~memory_tools.ingest.fetch.follow_redirects` (each target checked again) and hands
Chromium the answer with ``route.fulfill``. A refused request is
aborted; the page sees a network error.

Why fulfil rather than let Chromium fetch after a check: Chromium resolves host names itself,
so a check on our side and a connect on its side could see different DNS answers (rebinding);
and a 3xx answer handed to Chromium is followed by its network stack without asking the route
again (measured with Playwright 1.65 and Chromium 150), so redirects must be followed here.

Bounds of one page: only GET and HEAD (no request body leaves the machine), at most
:data:`MAX_REQUESTS` requests, ``SCRAPER_SCREENSHOT_MAX_PAGE_BYTES`` of bodies in all, each body
at most ``ASSET_MAX_BYTES``, and nothing after the call's deadline.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field

import anyio
import httpx
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Route

from memory_db import get_logger
from memory_tools import ToolFailure
from memory_tools.mcp.for_scrapers import (
    FetchFailed,
    FetchPolicy,
    UnsafeUrl,
    check_url,
    follow_redirects,
    redirect_location,
    request_failures,
)

log = get_logger(__name__)

MAX_REQUESTS = 300
_METHODS = frozenset({"GET", "HEAD"})
# What is sent upstream of the page's own request headers: no cookies, no referrer, no range.
_FORWARDED = ("accept", "accept-language", "user-agent")
# What Chromium is not handed back: hop-by-hop and framing headers (fulfil sets the length),
# cookies (a context lives for one screenshot), and headers that would make it try the network.
_DROPPED = frozenset(
    {
        "connection",
        "keep-alive",
        "transfer-encoding",
        "content-length",
        "content-encoding",
        "set-cookie",
        "alt-svc",
        "strict-transport-security",
        "link",
    }
)


class PageBudgetSpent(Exception):
    """The page used up its requests or bytes; this request is not made."""


@dataclass(frozen=True)
class PageResponse:
    """An answer fetched for the page, ready to hand to Chromium."""

    url: str  # after redirects
    status: int
    headers: dict[str, str]
    body: bytes


@dataclass
class PageRequests:
    """The requests of one page: the policy, the client, what is left of the budget."""

    client: httpx.AsyncClient
    policy: FetchPolicy
    max_bytes: int
    deadline: float  # anyio.current_time() after which nothing is fetched
    requests: int = 0
    bytes_fetched: int = 0
    refused: list[str] = field(default_factory=list)  # why, per refused request (no URLs)
    _primed: dict[str, PageResponse] = field(default_factory=dict)

    def prime(self, response: PageResponse) -> None:
        """Answer the next request for ``response.url`` with ``response`` (the document)."""
        self._primed[response.url] = response

    async def handle(self, route: Route) -> None:
        """The route handler: fulfil the request from our fetch, or abort it."""
        request = route.request
        primed = self._primed.pop(request.url, None)
        try:
            response = primed or await self.fetch(request.method, request.url, request.headers)
        except (ToolFailure, PageBudgetSpent) as refusal:
            self.refused.append(str(refusal))
            log.info("page_request_refused", resource=request.resource_type, reason=str(refusal))
            await _quietly(route.abort("blockedbyclient"))
            return
        await _quietly(
            route.fulfill(status=response.status, headers=response.headers, body=response.body)
        )

    async def fetch(self, method: str, raw_url: str, headers: Mapping[str, str]) -> PageResponse:
        """``raw_url`` fetched under the policy, redirects followed and each target checked."""
        if method.upper() not in _METHODS:
            raise UnsafeUrl(f"a page may only read ({method} refused)")
        url = check_url(raw_url, self.policy)
        sent = {name: headers[name] for name in _FORWARDED if name in headers}
        return await follow_redirects(
            url,
            max_redirects=self.policy.max_redirects,
            request=lambda target, _redirects: self._once(method.upper(), target, sent),
            check=self._check,
        )

    async def _check(self, raw_url: str) -> httpx.URL:
        return check_url(raw_url, self.policy)

    async def _once(
        self, method: str, url: httpx.URL, headers: dict[str, str]
    ) -> PageResponse | str:
        """One request: the answer, or the ``Location`` of a redirect."""
        if self.requests >= MAX_REQUESTS:
            raise PageBudgetSpent(f"the page made more than {MAX_REQUESTS} requests")
        left = self.deadline - anyio.current_time()
        if left <= 0:
            raise PageBudgetSpent("the screenshot's time is up")
        self.requests += 1
        try:
            with anyio.fail_after(left), request_failures(noun="request", timeout=FetchFailed):
                async with self.client.stream(method, url, headers=headers) as response:
                    location = redirect_location(response)
                    if location is not None:
                        return location
                    body = await self._read(response)
                    kept = {
                        name: value
                        for name, value in response.headers.items()
                        if name.lower() not in _DROPPED
                    }
                    return PageResponse(str(url), response.status_code, kept, body)
        except TimeoutError:
            raise PageBudgetSpent("the screenshot's time is up") from None

    async def _read(self, response: httpx.Response) -> bytes:
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            raise UnsafeUrl(f"the server sent an encoded body ({encoding}); identity was asked")
        declared = response.headers.get("content-length", "").strip()
        if declared.isdigit() and int(declared) > min(
            self.policy.max_bytes, self.max_bytes - self.bytes_fetched
        ):
            raise UnsafeUrl(f"the response is larger than the page's {self.max_bytes}-byte limit")
        chunks: list[bytes] = []
        received = 0
        async for chunk in response.aiter_raw():
            # Counted as it arrives, across all of the page's requests at once: requests in
            # flight together share one budget, and a refused body's bytes count too.
            received += len(chunk)
            self.bytes_fetched += len(chunk)
            if received > self.policy.max_bytes or self.bytes_fetched > self.max_bytes:
                raise UnsafeUrl(
                    f"the response is larger than the page's {self.max_bytes}-byte limit"
                )
            chunks.append(chunk)
        return b"".join(chunks)


async def _quietly(action: Awaitable[None]) -> None:
    """Await a route action; the page may have closed meanwhile (the call ended)."""
    try:
        await action
    except PlaywrightError:
        log.debug("page_request_abandoned", exc_info=True)
