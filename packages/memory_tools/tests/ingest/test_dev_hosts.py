"""ASSET_FETCH_DEV_HOSTS: exactly the named host:port pairs are reachable, nothing else.

Every fetcher here is built the way a server builds it (``fetch_policy(settings)``) from settings
that name the pair, against real servers on 127.0.0.1 (and ::1). A second server, the
*private* one, stands for another service on the same machine: its empty request log proves
that nothing reached it. Refusals without the setting name the decisive reason first.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from memory_db import MemorySettings
from memory_tools.errors import UnsafeUrl
from memory_tools.ingest import MappedResolver, Resolver, SafeFetcher
from memory_tools.ingest.fetch import fetch_policy
from memory_tools.testing.web import Reply, WebServer, serve_web

from ..web_routes import BODY
from .test_fetch import _tls_pair  # pyright: ignore[reportPrivateUsage]

HINT = "ASSET_FETCH_DEV_HOSTS (never set it in production)"


def dev_fetcher(
    tmp_path: Path,
    dev_hosts: str | None,
    resolver: Resolver | None = None,
    *,
    ports: str = "80,443",
) -> SafeFetcher:
    """A fetcher as a server with ``ASSET_FETCH_DEV_HOSTS=dev_hosts`` builds it."""
    settings = MemorySettings.model_validate(
        {
            "memory_data_dir": tmp_path / "data",
            "asset_fetch_dev_hosts": dev_hosts or (),
            "asset_fetch_allowed_ports": ports,  # as the environment gives them
            "asset_fetch_timeout_seconds": 10,
        }
    )
    return SafeFetcher(fetch_policy(settings), resolver=resolver)


@pytest.fixture
def private() -> Iterator[WebServer]:
    """Another service on this machine (another port): nothing may reach it."""
    with serve_web({"/secret": Reply(body=b"internal secret")}) as server:
        yield server


@pytest.fixture
def site(web: WebServer, private: WebServer) -> WebServer:
    """The developer's page server (127.0.0.1, its own port), with redirects to elsewhere."""

    def to(location: str) -> Reply:
        return Reply(status=302, headers={"Location": location})

    web.routes.update(
        {
            "/ok": Reply(body=BODY, headers={"Content-Type": "image/png"}),
            "/hop": to("/ok"),
            "/to-other-port": to(private.url("/secret")),
            "/to-localhost-other-port": to(private.url("/secret", host="localhost")),
            "/to-loopback-name": to(private.url("/secret", host="sneaky.test")),
            "/to-same-port-by-name": to(web.url("/ok", host="sneaky.test")),
            "/to-private": to("http://10.0.0.5/secret"),
            "/to-metadata": to("http://169.254.169.254/latest/meta-data/"),
            "/to-v6-loopback": to(f"http://[::1]:{private.port}/secret"),
        }
    )
    return web


RESOLVER = MappedResolver({"sneaky.test": ["127.0.0.1"], "localhost": ["127.0.0.1"]})


async def test_an_allowed_pair_is_fetched_over_plain_http(tmp_path: Path, site: WebServer) -> None:
    # The default policy: https only, ports 80 and 443; the pair is allowed as it is.
    fetcher = dev_fetcher(tmp_path, f"127.0.0.1:{site.port}")
    try:
        assert fetcher.policy.allow_http is False
        fetched = await fetcher.fetch(site.url("/ok"))
        followed = await fetcher.fetch(site.url("/hop"))  # a redirect within the pair
        page = await fetcher.fetch_page(site.url("/ok"), max_bytes=1000)
    finally:
        await fetcher.aclose()
    assert fetched.data == followed.data == page.data == BODY
    assert followed.redirects == 1


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:{private}/secret",  # the same host on another port
        "http://localhost:{private}/secret",
        "http://localhost:{site}/ok",  # the same server under a form that was not named
        "http://127.0.0.2:{site}/ok",
        "http://[::1]:{site}/ok",
        "http://sneaky.test:{site}/ok",  # a name that resolves to the allowed address
    ],
)
async def test_nothing_but_the_exact_pair_is_reachable(
    tmp_path: Path, site: WebServer, private: WebServer, url: str
) -> None:
    fetcher = dev_fetcher(tmp_path, f"127.0.0.1:{site.port}", RESOLVER)
    try:
        with pytest.raises(UnsafeUrl, match="loopback"):
            await fetcher.fetch(url.format(site=site.port, private=private.port))
    finally:
        await fetcher.aclose()
    assert private.requested == []
    assert site.requested == []


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("/to-other-port", "the host 127.0.0.1 is a loopback address"),
        ("/to-localhost-other-port", "'localhost' is this machine"),
        ("/to-loopback-name", "the host sneaky.test resolves to a loopback address"),
        ("/to-same-port-by-name", "the host sneaky.test resolves to a loopback address"),
        ("/to-private", "the host 10.0.0.5 is a private or reserved address"),
        ("/to-metadata", "the host 169.254.169.254 is a link-local address"),
        ("/to-v6-loopback", "the host ::1 is a loopback address"),
    ],
)
async def test_a_redirect_from_an_allowed_pair_to_anywhere_private_is_refused(
    tmp_path: Path, site: WebServer, private: WebServer, path: str, reason: str
) -> None:
    fetcher = dev_fetcher(tmp_path, f"127.0.0.1:{site.port}", RESOLVER)
    try:
        with pytest.raises(UnsafeUrl) as caught:
            await fetcher.fetch(site.url(path))
        with pytest.raises(UnsafeUrl):
            await fetcher.fetch_page(site.url(path), max_bytes=1000)
    finally:
        await fetcher.aclose()
    assert reason in caught.value.message
    assert private.requested == []
    assert site.requested == [path, path]


async def test_https_reaches_an_allowed_pair_too(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    server_tls, client_tls = _tls_pair(tmp_path_factory, "localhost")
    with serve_web({"/ok": Reply(body=BODY)}, tls=server_tls) as secure:
        settings = MemorySettings.model_validate(
            {
                "memory_data_dir": tmp_path / "data",
                "asset_fetch_dev_hosts": f"localhost:{secure.port}",
            }
        )
        fetcher = SafeFetcher(fetch_policy(settings), ssl_context=client_tls)
        try:
            fetched = await fetcher.fetch(secure.url("/ok", host="localhost", scheme="https"))
            with pytest.raises(UnsafeUrl, match="loopback"):  # the pair is the name, not the IP
                await fetcher.fetch(secure.url("/ok", scheme="https"))
        finally:
            await fetcher.aclose()
    assert fetched.data == BODY


class _V6Server(ThreadingHTTPServer):
    address_family = socket.AF_INET6


@pytest.fixture
def v6_site(site: WebServer) -> Iterator[int]:
    """The same routes served on [::1] (its own port)."""
    from memory_tools.testing.web import _handler  # pyright: ignore[reportPrivateUsage]

    httpd = _V6Server(("::1", 0), _handler(site))
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


async def test_an_ipv6_literal_pair_is_reachable_in_any_spelling(
    tmp_path: Path, site: WebServer, private: WebServer, v6_site: int
) -> None:
    fetcher = dev_fetcher(tmp_path, f"[0:0:0:0:0:0:0:1]:{v6_site}")
    try:
        assert (await fetcher.fetch(f"http://[::1]:{v6_site}/ok")).data == BODY
        assert (await fetcher.fetch(f"http://[0::1]:{v6_site}/ok")).data == BODY
        # Its loopback neighbours are not: the IPv4 loopback, another port.
        with pytest.raises(UnsafeUrl, match="loopback"):
            await fetcher.fetch(site.url("/ok"))
        with pytest.raises(UnsafeUrl, match="loopback"):
            await fetcher.fetch(site.url("/to-v6-loopback").replace("127.0.0.1", "[::1]"))
    finally:
        await fetcher.aclose()
    assert private.requested == []


@pytest.mark.parametrize("written", ["LocalHost", "LOCALHOST", "localhost."])
async def test_the_host_name_is_matched_whatever_its_case(
    tmp_path: Path, site: WebServer, written: str
) -> None:
    # The system resolver, as a server has it: localhost is 127.0.0.1 (and maybe ::1).
    fetcher = dev_fetcher(tmp_path, f"{written}:{site.port}")
    try:
        # (not "localhost." in the URL: this system's resolver does not know it)
        for url_host in ("localhost", "LOCALHOST", "LocalHost"):
            fetched = await fetcher.fetch(site.url("/ok", host=url_host))
            assert fetched.data == BODY
    finally:
        await fetcher.aclose()


@pytest.mark.parametrize("address", ["169.254.169.254", "fe80::1", "::ffff:169.254.169.254"])
async def test_a_dev_host_name_never_reaches_link_local_addresses(
    tmp_path: Path, address: str
) -> None:
    fetcher = dev_fetcher(tmp_path, "dev.test:80", MappedResolver({"dev.test": [address]}))
    try:
        with pytest.raises(UnsafeUrl, match="link-local"):
            await fetcher.fetch("http://dev.test/latest/meta-data/")
    finally:
        await fetcher.aclose()


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://127.0.0.1:8000/x", "the host 127.0.0.1 is a loopback address"),
        ("http://127.0.0.1/x", "the host 127.0.0.1 is a loopback address"),
        ("https://127.0.0.1:8443/x", "the host 127.0.0.1 is a loopback address"),
        ("http://[::1]:8000/x", "the host ::1 is a loopback address"),
        ("http://localhost:8000/x", "the host name 'localhost' is this machine (loopback)"),
        ("http://192.168.1.20:8080/x", "the host 192.168.1.20 is a private or reserved address"),
        (
            "http://printer.lan:631/x",
            "the host name 'printer.lan' names a machine of the local network",
        ),
        ("https://box.test:8443/x", "the host box.test resolves to a loopback address"),
        # A name refused for its scheme and port is resolved: its address is the reason.
        ("http://devbox.test:8000/x", "the host devbox.test resolves to a loopback address"),
        ("http://devbox.test/x", "the host devbox.test resolves to a loopback address"),
        ("https://devbox.test:8000/x", "the host devbox.test resolves to a loopback address"),
    ],
)
async def test_a_refusal_names_the_address_first_and_the_allowance(
    tmp_path: Path, url: str, reason: str
) -> None:
    # Port 8443 is allowed so that box.test passes the URL checks and reaches the resolver.
    resolver = MappedResolver({"box.test": ["127.0.0.1"], "devbox.test": ["127.0.0.1"]})
    fetcher = dev_fetcher(tmp_path, None, resolver, ports="80,443,8443")
    try:
        with pytest.raises(UnsafeUrl) as caught:
            await fetcher.fetch(url)
    finally:
        await fetcher.aclose()
    message = caught.value.message
    assert message.startswith(reason)
    assert HINT in message
    assert "scheme" not in message
    assert "port" not in message.replace("host:port", "")


@pytest.mark.parametrize(
    "url", ["http://169.254.169.254/latest/", "http://metadata.google.internal/computeMetadata/"]
)
async def test_metadata_refusals_do_not_point_at_the_allowance(tmp_path: Path, url: str) -> None:
    fetcher = dev_fetcher(tmp_path, None)
    try:
        with pytest.raises(UnsafeUrl) as caught:
            await fetcher.fetch(url)
    finally:
        await fetcher.aclose()
    assert "ASSET_FETCH_DEV_HOSTS" not in caught.value.message


async def test_a_public_url_is_still_refused_for_plain_http_and_its_port(tmp_path: Path) -> None:
    fetcher = dev_fetcher(tmp_path, "127.0.0.1:8000")
    try:
        with pytest.raises(UnsafeUrl, match="scheme 'http' is not allowed; use https"):
            await fetcher.fetch("http://example.com/x.png")
        with pytest.raises(UnsafeUrl, match=r"port 8000 is not allowed \(allowed: 80, 443\)"):
            await fetcher.fetch("https://example.com:8000/x.png")
    finally:
        await fetcher.aclose()
