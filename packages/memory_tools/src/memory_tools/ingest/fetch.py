"""SSRF-safe download of a public image URL (docs/design.md#untrusted-bytes).

Every URL — the first and each redirect target — passes :func:`check_url` (scheme, port, no
userinfo, no numeric-host tricks, no local names), and every connection goes through
:class:`~memory_tools.ingest.network.SafeNetworkBackend`, which resolves the host once, refuses
it if any address is not public and connects to the checked address. Redirects are followed by
hand (at most ``max_redirects``) in :func:`follow_redirects`, which a screenshot's page requests
(``scraper_mcp.page_requests``) use too, and :func:`request_failures` says what a failed request
means to the caller for both. The body is never decompressed (``Accept-Encoding:
identity``; an encoded body is refused) and its size is enforced from ``Content-Length`` first
and then while streaming. One deadline covers the whole download, redirects included.
"""

from __future__ import annotations

import functools
import re
import ssl
from collections.abc import Awaitable, Callable, Generator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal, TypeVar

import anyio
import httpcore
import httpx
import structlog

from memory_db import MemorySettings
from memory_tools.errors import FetchFailed, ToolFailure, UnsafeUrl
from memory_tools.ingest.addresses import (
    IpAddress,
    blocked_reason,
    parse_address,
    refused_even_in_development,
)
from memory_tools.ingest.network import (
    AddressPolicy,
    Resolver,
    SafeNetworkBackend,
    SystemResolver,
    UnresolvableHost,
    UnsafeDestination,
)

log = structlog.get_logger(__name__)

MAX_URL_LENGTH = 4096
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
# Names that always mean "this machine" or a cloud's internal plane, whatever DNS says.
_LOCAL_SUFFIXES = (".localhost", ".local", ".internal", ".localdomain", ".home.arpa", ".lan")
_LOCAL_NAMES = frozenset(
    {"localhost", "metadata", "metadata.google.internal", "instance-data", "kubernetes"}
)
_NUMERIC_LABEL = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$", re.IGNORECASE)
_Answer = TypeVar("_Answer")  # what one request of a redirect chain produces besides a Location


@dataclass(frozen=True)
class FetchPolicy:
    """The limits of one fetch; built from settings, never from caller input."""

    max_bytes: int
    max_redirects: int = 5
    allow_http: bool = False
    allowed_ports: frozenset[int] = frozenset({80, 443})
    total_timeout: float = 60.0
    connect_timeout: float = 10.0
    read_timeout: float = 20.0
    user_agent: str = "mcp-memory/0.1 (+image fetch)"
    addresses: AddressPolicy = field(default_factory=AddressPolicy)


@dataclass(frozen=True)
class FetchedBody:
    """What a successful fetch produced."""

    data: bytes
    final_url: str
    declared_type: str | None
    redirects: int
    truncated: bool = False  # only a page may be cut at its bound (``fetch_page``)


_IMAGE_ACCEPT = "image/avif;q=0,image/webp,image/png,image/jpeg,image/gif,image/*;q=0.5"
_PAGE_ACCEPT = "text/html,application/xhtml+xml;q=0.9"


@dataclass(frozen=True)
class _Read:
    """How one fetch reads its body: the bound, what it asks for, what a refusal calls it."""

    max_bytes: int
    accept: str
    noun: Literal["image", "page"]
    truncate: bool = False


# Said with every refusal of a loopback or private destination, so that a developer trying a
# page of their own learns at once that the allowance exists (and what it is for).
DEV_HOSTS_HINT = (
    "only public addresses are fetched; a development server can allow exact host:port pairs "
    "with ASSET_FETCH_DEV_HOSTS (never set it in production)"
)
UNFOLLOWABLE_REDIRECT = "the server redirected to a URL that could not be parsed"
_URL_SCHEME = re.compile(r"^([a-z][a-z0-9+.-]*):", re.IGNORECASE)


def check_url(raw: str, policy: FetchPolicy) -> httpx.URL:
    """The parsed URL if the policy allows requesting it; :class:`UnsafeUrl` otherwise.

    The first refusal is the decisive one: a URL that is not a web URL at all is refused for
    its scheme, but an http(s) URL at a loopback or private address is refused for its address
    (not first for plain http or its port, which would reveal the policy one step at a time).
    An ``ASSET_FETCH_DEV_HOSTS`` pair is allowed over http and https on its own port.
    """
    if len(raw) > MAX_URL_LENGTH:
        raise UnsafeUrl(f"the URL is longer than {MAX_URL_LENGTH} characters")
    if any(ch.isspace() or ord(ch) < 0x20 for ch in raw):
        raise UnsafeUrl("the URL contains whitespace or control characters")
    try:
        url = httpx.URL(raw)
    except (httpx.InvalidURL, ValueError, TypeError):
        raise UnsafeUrl("the URL could not be parsed") from None
    if url.scheme not in ("https", "http"):
        raise UnsafeUrl(_scheme_refusal(url.scheme, policy))
    if url.userinfo:
        raise UnsafeUrl("URLs with a user name or password are not allowed")
    try:
        host = url.host.lower().rstrip(".")
    except UnicodeError:  # an invalid IDNA label (e.g. "xn--a-"), decoded lazily by httpx
        raise UnsafeUrl("the URL's host is not a valid internationalised name") from None
    if not host:
        raise UnsafeUrl("the URL has no host")
    if url.port == 0:
        raise UnsafeUrl("port 0 is not allowed")
    port = url.port or (443 if url.scheme == "https" else 80)
    if policy.addresses.is_dev_host(host, port):
        return url  # the development allowance: this exact pair, http or https
    _check_host(host, policy)
    if url.scheme == "http" and not policy.allow_http:
        raise _TransportRefused(_scheme_refusal(url.scheme, policy))
    if port not in policy.allowed_ports:
        allowed = ", ".join(str(each) for each in sorted(policy.allowed_ports))
        raise _TransportRefused(f"port {port} is not allowed (allowed: {allowed})")
    return url


class _TransportRefused(UnsafeUrl):
    """Refused for its scheme or port only; a host name's address may be the decisive reason.

    :meth:`SafeFetcher.check` resolves the name to find out.
    """


def _scheme_refusal(scheme: str, policy: FetchPolicy) -> str:
    allowed = ("https", "http") if policy.allow_http else ("https",)
    return f"scheme {scheme or '(none)'!r} is not allowed; use {' or '.join(allowed)}"


def redirect_target(url: httpx.URL, location: str) -> httpx.URL:
    """Where a redirect from ``url`` to ``location`` leads, *before* it is checked.

    A ``Location`` that is not a web URL (``data:``, ``mailto:``, ``javascript:``...) is refused
    for its scheme here: joined to an http URL with a port, httpx cannot even represent it.
    """
    scheme = _URL_SCHEME.match(location)
    if scheme is not None and scheme.group(1).lower() not in ("http", "https"):
        shown = scheme.group(1).lower()
        raise UnsafeUrl(f"the server redirected to a {shown}: URL; only http(s) is followed")
    try:
        return url.join(location)
    except (httpx.InvalidURL, ValueError, TypeError, UnicodeError):
        raise UnsafeUrl(UNFOLLOWABLE_REDIRECT) from None


def _check_host(host: str, policy: FetchPolicy) -> None:
    literal = parse_address(host)
    if literal is not None:
        reason = blocked_reason(literal)
        if reason is not None:
            raise UnsafeUrl(_address_refusal(f"the host {host} is {reason}", literal))
        return
    local = host in _LOCAL_NAMES or host.endswith(_LOCAL_SUFFIXES)
    if local and host not in policy.addresses.loopback_names:
        if host == "localhost" or host.endswith(".localhost"):
            raise UnsafeUrl(f"the host name {host!r} is this machine (loopback); {DEV_HOSTS_HINT}")
        if host in _LOCAL_NAMES or host.endswith(".internal"):  # a cloud's or cluster's own
            raise UnsafeUrl(f"the host name {host!r} names a local or internal service")
        raise UnsafeUrl(
            f"the host name {host!r} names a machine of the local network; {DEV_HOSTS_HINT}"
        )
    labels = host.split(".")
    # 2130706433, 0x7f.1, 017700000001, 127.1: resolvers read these as IPv4 addresses. A real
    # host name never ends in a numeric label, so anything numeric must be a canonical literal.
    if _NUMERIC_LABEL.match(labels[-1]):
        raise UnsafeUrl("IP addresses must be written as canonical dotted-decimal literals")


def _address_refusal(refusal: str, address: IpAddress) -> str:
    """``refusal``, with the development hint when the allowance could admit ``address``."""
    if refused_even_in_development(address) is not None:
        return refusal
    return f"{refusal}; {DEV_HOSTS_HINT}"


@functools.cache
def system_trust() -> ssl.SSLContext:
    """The TLS context of fetches: the system's trust store (``SSL_CERT_FILE``/``SSL_CERT_DIR``).

    Loaded once per process and shared by every fetcher and client made from it (a context is
    safe to share between connections): loading the certificates costs tens of milliseconds
    of CPU, which every server built in the process (the web app's, each test's) paid again.
    """
    return httpx.create_ssl_context(trust_env=True)


class SafeFetcher:
    """Downloads public images under a :class:`FetchPolicy`. One instance per server."""

    def __init__(
        self,
        policy: FetchPolicy,
        *,
        resolver: Resolver | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._policy = policy
        self._resolver = resolver or SystemResolver()
        self._ssl_context = ssl_context or system_trust()
        self._client = self.client({"Accept": _IMAGE_ACCEPT})

    def client(self, headers: Mapping[str, str]) -> httpx.AsyncClient:
        """A new client that connects only where this fetcher may (same addresses, resolver, TLS).

        It follows no redirects and decodes nothing (``Accept-Encoding: identity``): a caller
        that needs the response itself (status, headers) checks each URL with :func:`check_url`
        and bounds the body as :meth:`fetch` does. The caller closes it.
        """
        policy = self._policy
        context = self._ssl_context
        backend = SafeNetworkBackend(self._resolver, policy.addresses)
        transport = httpx.AsyncHTTPTransport(verify=context, trust_env=False, retries=0)
        # httpx has no public hook for httpcore's network backend; the pool is rebuilt with the
        # same TLS context and our backend (pinned: httpx 0.28, httpcore 1.0).
        transport._pool = httpcore.AsyncConnectionPool(  # pyright: ignore[reportPrivateUsage]
            ssl_context=context,
            max_connections=32,
            max_keepalive_connections=8,
            keepalive_expiry=5.0,
            http1=True,
            http2=False,
            retries=0,
            network_backend=backend,
        )

        async def refuse_foreign_redirect(response: httpx.Response) -> None:
            # httpx prepares the next request of every redirect, even one it will not follow,
            # and cannot represent a Location such as data:... there (InvalidURL, before the
            # caller sees the answer): such a Location is refused here, naming its scheme.
            if response.has_redirect_location:
                redirect_target(response.request.url, response.headers["location"])

        return httpx.AsyncClient(
            transport=transport,
            trust_env=False,
            follow_redirects=False,
            event_hooks={"response": [refuse_foreign_redirect]},
            timeout=httpx.Timeout(
                connect=policy.connect_timeout,
                read=policy.read_timeout,
                write=policy.read_timeout,
                pool=policy.connect_timeout,
            ),
            headers={"Accept-Encoding": "identity", "User-Agent": policy.user_agent, **headers},
        )

    @property
    def policy(self) -> FetchPolicy:
        """The limits this fetcher enforces."""
        return self._policy

    async def aclose(self) -> None:
        """Close pooled connections."""
        await self._client.aclose()

    async def check(self, raw_url: str) -> httpx.URL:
        """:func:`check_url`, with the decisive reason for a host *name* refused otherwise.

        ``check_url`` cannot know where a name leads: ``http://devbox.test:8000/`` would be
        refused for its scheme and then, once that is changed, for its port, and only then for
        the loopback address the name resolves to. A name refused for its scheme or port is
        therefore resolved here (as the fetch would resolve it), and a refused address is the
        reason given.
        """
        try:
            return check_url(raw_url, self._policy)
        except _TransportRefused as refusal:
            decisive = await self._address_refusal_of_name(raw_url)
            if decisive is not None:
                raise decisive from None
            raise refusal from None

    async def _address_refusal_of_name(self, raw_url: str) -> UnsafeUrl | None:
        """The refusal of the address ``raw_url``'s host name leads to, if it is refused."""
        try:
            url = httpx.URL(raw_url)
            host = url.host.lower().rstrip(".")
        except (httpx.InvalidURL, ValueError, TypeError, UnicodeError):
            return None
        if url.scheme not in ("http", "https") or url.userinfo or not host:
            return None  # refused for what it is, wherever it leads
        if parse_address(host) is not None or _NUMERIC_LABEL.match(host.split(".")[-1]):
            return None  # a literal: check_url has judged its address already
        port = url.port or (443 if url.scheme == "https" else 80)
        for address in await self._resolver.resolve(host, port):
            reason = self._policy.addresses.reason_to_refuse(host, port, address, literal=False)
            if reason is not None:
                return UnsafeUrl(destination_refusal(UnsafeDestination(host, reason, address)))
        return None

    async def fetch(self, raw_url: str) -> FetchedBody:
        """The body of ``raw_url`` after at most ``max_redirects`` checked redirects."""
        return await self._fetch(raw_url, _Read(self._policy.max_bytes, _IMAGE_ACCEPT, "image"))

    async def fetch_page(self, raw_url: str, *, max_bytes: int) -> FetchedBody:
        """An HTML page under the same policy (checks, redirects, time), cut at ``max_bytes``.

        A page longer than ``max_bytes`` is not refused: its first ``max_bytes`` are returned
        with ``truncated=True`` and the connection is closed (an HTML parser reads a cut page).
        """
        return await self._fetch(raw_url, _Read(max_bytes, _PAGE_ACCEPT, "page", truncate=True))

    async def _fetch(self, raw_url: str, read: _Read) -> FetchedBody:
        url = await self.check(raw_url)
        try:
            with anyio.fail_after(self._policy.total_timeout):
                return await self._follow(url, read)
        except TimeoutError:
            raise UnsafeUrl(
                f"the download did not finish within {self._policy.total_timeout:g} s"
            ) from None

    async def _follow(self, url: httpx.URL, read: _Read) -> FetchedBody:
        return await follow_redirects(
            url,
            max_redirects=self._policy.max_redirects,
            request=lambda target, redirects: self._request(target, redirects, read),
            check=self.check,
        )

    async def _request(self, url: httpx.URL, redirects: int, read: _Read) -> FetchedBody | str:
        """The body, or the ``Location`` of a redirect."""
        headers = {"Accept": read.accept}
        with request_failures(noun="download"):
            async with self._client.stream("GET", url, headers=headers) as response:
                location = redirect_location(response)
                if location is not None:
                    return location
                if response.status_code != 200:
                    raise FetchFailed(f"the server answered HTTP {response.status_code}")
                data, truncated = await self._read_body(response, read)
                log.info(
                    "asset_fetched",
                    host=url.host,
                    bytes=len(data),
                    redirects=redirects,
                    kind=read.noun,
                    truncated=truncated,
                )
                return FetchedBody(
                    data=data,
                    final_url=str(url),
                    declared_type=response.headers.get("content-type"),
                    redirects=redirects,
                    truncated=truncated,
                )

    async def _read_body(self, response: httpx.Response, read: _Read) -> tuple[bytes, bool]:
        """The body and whether it was cut at ``read.max_bytes`` (only when it may be)."""
        limit = read.max_bytes
        too_large = f"the {read.noun} is larger than the {limit}-byte limit"
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            raise UnsafeUrl(f"the server sent an encoded body ({encoding}); identity was asked")
        declared = response.headers.get("content-length")
        if declared is not None:
            if not declared.strip().isdigit():
                raise UnsafeUrl("the server sent an invalid Content-Length")
            if int(declared) > limit and not read.truncate:
                raise UnsafeUrl(too_large)
        chunks: list[bytes] = []
        received = 0
        async for chunk in response.aiter_raw():
            if received + len(chunk) > limit:
                if not read.truncate:
                    raise UnsafeUrl(too_large)
                chunks.append(chunk[: limit - received])
                return b"".join(chunks), True
            received += len(chunk)
            chunks.append(chunk)
        if received == 0:
            raise FetchFailed("the server sent an empty body")
        return b"".join(chunks), False


def destination_refusal(refused: UnsafeDestination) -> str:
    """What the caller is told when the network backend refused where a host name led."""
    refusal = f"the host {refused.host} resolves to {refused.reason}"
    if refused.address is None:
        return refusal
    return _address_refusal(refusal, refused.address)


def redirect_location(response: httpx.Response) -> str | None:
    """The ``Location`` of a redirect answer, ``None`` for any other answer.

    A redirect without a ``Location`` is :class:`FetchFailed`: there is nothing to follow.
    """
    if response.status_code not in _REDIRECTS:
        return None
    location = response.headers.get("location")
    if not location:
        raise FetchFailed("the server redirected without a Location")
    return location


async def follow_redirects(
    url: httpx.URL,
    *,
    max_redirects: int,
    request: Callable[[httpx.URL, int], Awaitable[_Answer | str]],
    check: Callable[[str], Awaitable[httpx.URL]],
) -> _Answer:
    """``request(url, redirects so far)`` until it answers with something other than a Location.

    Each redirect target is resolved against the URL that led to it and passes ``check`` (the
    policy) before it is requested; a target seen before is a loop, and more than
    ``max_redirects`` redirects are refused, both as :class:`UnsafeUrl`. The image fetch and a
    screenshot's page requests follow redirects only through here.
    """
    seen = {str(url)}
    for redirects in range(max_redirects + 1):
        answer = await request(url, redirects)
        if not isinstance(answer, str):
            return answer
        target = redirect_target(url, answer)
        if str(target) in seen:
            raise UnsafeUrl("the redirects form a loop")
        seen.add(str(target))
        url = await check(str(target))
    raise UnsafeUrl(f"more than {max_redirects} redirects")


@contextmanager
def request_failures(*, noun: str, timeout: type[ToolFailure] = UnsafeUrl) -> Generator[None]:
    """What a refused destination or a failed request of the fetch client tells the caller.

    ``noun`` names the request in a transport failure ("the download failed (ConnectError)");
    ``timeout`` is the error of a server too slow to connect or to send.
    """
    try:
        yield
    except UnsafeDestination as exc:
        raise UnsafeUrl(destination_refusal(exc)) from None
    except UnresolvableHost:
        raise FetchFailed("the host name could not be resolved") from None
    except httpx.TimeoutException:
        raise timeout("the server was too slow to connect or to send") from None
    except httpx.InvalidURL:  # raised while httpx prepares a redirect it will not follow
        raise UnsafeUrl(UNFOLLOWABLE_REDIRECT) from None
    except httpx.HTTPError as exc:
        raise FetchFailed(f"the {noun} failed ({type(exc).__name__})") from None


def fetch_policy(
    settings: MemorySettings, *, addresses: AddressPolicy | None = None
) -> FetchPolicy:
    """The fetch policy the settings describe (``addresses`` is for tests only)."""
    return FetchPolicy(
        max_bytes=settings.asset_max_bytes,
        max_redirects=settings.asset_fetch_max_redirects,
        allow_http=settings.asset_fetch_allow_http,
        allowed_ports=frozenset(settings.asset_fetch_allowed_ports),
        total_timeout=settings.asset_fetch_timeout_seconds,
        connect_timeout=min(10.0, settings.asset_fetch_timeout_seconds),
        read_timeout=min(20.0, settings.asset_fetch_timeout_seconds),
        addresses=addresses or AddressPolicy(dev_hosts=frozenset(settings.asset_fetch_dev_hosts)),
    )
