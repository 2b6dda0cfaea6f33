"""The SSRF-safe fetcher against a real server on 127.0.0.1 and a corpus of hostile URLs."""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from memory_tools.errors import FetchFailed, UnsafeUrl
from memory_tools.ingest import FetchPolicy, MappedResolver, SafeFetcher, check_url
from memory_tools.ingest.addresses import IpAddress
from memory_tools.ingest.fetch import system_trust
from memory_tools.testing.web import Reply, WebServer, serve_web

from ..web_routes import BODY, HOSTS, MAX_BYTES, routes_for


@dataclass(frozen=True)
class Hostile:
    name: str
    url: str


HOSTILE = [
    Hostile("loopback literal", "http://127.0.0.1:{port}/secret"),
    Hostile("loopback other", "http://127.8.9.10:{port}/secret"),
    Hostile("localhost", "http://localhost:{port}/secret"),
    Hostile("localhost with dot", "http://localhost.:{port}/secret"),
    Hostile("sub.localhost", "http://app.localhost:{port}/secret"),
    Hostile("decimal integer host", "http://2130706433:{port}/secret"),
    Hostile("hex shorthand host", "http://0x7f.1:{port}/secret"),
    Hostile("octal host", "http://017700000001:{port}/secret"),
    Hostile("short dotted host", "http://127.1:{port}/secret"),
    Hostile("ipv6 loopback", "http://[::1]:{port}/secret"),
    Hostile("ipv4-mapped loopback", "http://[::ffff:127.0.0.1]:{port}/secret"),
    Hostile("ipv4-mapped metadata", "http://[::ffff:a9fe:a9fe]/latest/"),
    Hostile("unspecified", "http://0.0.0.0:{port}/secret"),
    Hostile("unspecified v6", "http://[::]:{port}/secret"),
    Hostile("metadata ip", "http://169.254.169.254/latest/meta-data/"),
    Hostile("invalid punycode host", "http://xn--localhost-:{port}/secret"),
    Hostile("port zero", "http://example.com:0/secret"),
    Hostile("aws v6 metadata", "http://[fd00:ec2::254]/latest/meta-data/"),
    Hostile("alibaba metadata", "http://100.100.100.200/latest/meta-data/"),
    Hostile("gcp metadata name", "http://metadata.google.internal/computeMetadata/v1/"),
    Hostile("metadata short name", "http://metadata/computeMetadata/v1/"),
    Hostile("instance-data", "http://instance-data/latest/meta-data/"),
    Hostile(".local name", "http://printer.local/"),
    Hostile("rfc1918 literal", "http://10.1.2.3/"),
    Hostile("rfc1918 192.168", "https://192.168.0.1/"),
    Hostile("name to private", "http://intranet.test:{port}/secret"),
    Hostile("name to metadata", "http://metadata.test/latest/"),
    Hostile("rebinding service name", "http://169.254.169.254.nip.io/latest/"),
    Hostile("name to public and private", "http://mixed.test:{port}/secret"),
    Hostile("loopback name not allowed", "http://loopback-alias.test:{port}/secret"),
    Hostile("name to aws v6 metadata", "http://aws6.test/"),
    Hostile("name to mapped loopback", "http://mapped.test:{port}/secret"),
    Hostile("name to nat64 metadata", "http://nat64.test/"),
    Hostile("name to 6to4 loopback", "http://sixtofour.test:{port}/secret"),
    Hostile("name to teredo", "http://teredo.test/"),
    Hostile("name to cgnat", "http://cgnat.test/"),
    Hostile("name to benchmarking", "http://bench.test/"),
    Hostile("name to multicast", "http://mcast.test/"),
    Hostile("name to broadcast", "http://bcast.test/"),
    Hostile("name to zero", "http://zero.test:{port}/secret"),
    Hostile("name to link-local v6", "http://linklocal6.test/"),
    Hostile("name to ula", "http://ula.test/"),
    Hostile("file scheme", "file:///etc/passwd"),
    Hostile("gopher scheme", "gopher://img.test:{port}/_GET%20/secret"),
    Hostile("ftp scheme", "ftp://img.test/image.png"),
    Hostile("data url", "data:image/png;base64,iVBORw0KGgo="),
    Hostile("javascript url", "javascript:alert(1)"),
    Hostile("userinfo", "http://good@evil.test/"),
    Hostile("user and password", "http://user:pass@img.test:{port}/ok"),
    Hostile("disallowed port", "http://img.test:6379/"),
    Hostile("ssh port", "https://img.test:22/"),
    Hostile("no host", "http:///secret"),
    Hostile("whitespace", "http://img.test:{port}/ok\r\nX-Injected: 1"),
    Hostile("overlong", "http://img.test:{port}/" + "a" * 4100),
    Hostile("redirect to loopback literal", "http://img.test:{port}/to-literal-loopback"),
    Hostile("redirect to private name", "http://img.test:{port}/to-intranet"),
    Hostile("redirect to metadata", "http://img.test:{port}/to-metadata"),
    Hostile("redirect to file", "http://img.test:{port}/to-file"),
    Hostile("redirect to localhost", "http://img.test:{port}/to-localhost"),
    Hostile("redirect to userinfo", "http://img.test:{port}/to-userinfo"),
    Hostile("redirect to bad port", "http://img.test:{port}/to-bad-port"),
    Hostile("redirect to data", "http://img.test:{port}/to-data"),
    Hostile("redirect to mailto", "http://img.test:{port}/to-mailto"),
    Hostile("redirect to javascript", "http://img.test:{port}/to-javascript"),
    Hostile("redirect to javascript upper", "http://img.test:{port}/to-javascript-upper"),
    Hostile("redirect to unparsable", "http://img.test:{port}/to-unparsable"),
    Hostile("redirect loop", "http://img.test:{port}/loop-a"),
    Hostile("six redirects", "http://img.test:{port}/r0"),
    Hostile("oversized with length", "http://img.test:{port}/big-length"),
    Hostile("oversized without length", "http://img.test:{port}/big-stream"),
    Hostile("slow drip", "http://img.test:{port}/drip"),
    Hostile("slow drip without length", "http://img.test:{port}/drip-no-length"),
    Hostile("compressed body", "http://img.test:{port}/gzip"),
]


@pytest.fixture
async def fetcher(fetch_policy: FetchPolicy, resolver: MappedResolver, web: WebServer):  # type: ignore[no-untyped-def]
    web.routes.update(routes_for(web.port))
    fetcher = SafeFetcher(fetch_policy, resolver=resolver)
    yield fetcher
    await fetcher.aclose()


def test_the_corpus_is_large_enough() -> None:
    assert len(HOSTILE) >= 40
    assert len({case.name for case in HOSTILE}) == len(HOSTILE)


@pytest.mark.parametrize("case", HOSTILE, ids=[case.name for case in HOSTILE])
async def test_hostile_url_is_refused_as_unsafe(
    case: Hostile, fetcher: SafeFetcher, web: WebServer
) -> None:
    with pytest.raises(UnsafeUrl) as caught:
        await fetcher.fetch(case.url.format(port=web.port))
    assert caught.value.code == "unsafe_url"
    assert caught.value.message  # a reason the caller can read
    assert "/secret" not in web.requested


# Oversized bodies are not refused by a page read (it cuts them); every other case is.
_PAGE_HOSTILE = [case for case in HOSTILE if not case.name.startswith("oversized")]


@pytest.mark.parametrize("case", _PAGE_HOSTILE, ids=[case.name for case in _PAGE_HOSTILE])
async def test_a_page_read_refuses_what_an_image_read_refuses(
    case: Hostile, fetcher: SafeFetcher, web: WebServer
) -> None:
    with pytest.raises(UnsafeUrl) as caught:
        await fetcher.fetch_page(case.url.format(port=web.port), max_bytes=MAX_BYTES)
    assert caught.value.code == "unsafe_url"
    assert "/secret" not in web.requested


@pytest.mark.parametrize(
    ("path", "scheme"),
    [
        ("/to-data", "data"),
        ("/to-mailto", "mailto"),
        ("/to-javascript", "javascript"),
        ("/to-javascript-upper", "javascript"),
    ],
)
async def test_a_redirect_to_a_non_web_scheme_names_it(
    fetcher: SafeFetcher, web: WebServer, path: str, scheme: str
) -> None:
    """httpx cannot even represent these redirects: they were an ``InvalidURL`` (internal)."""
    expected = f"the server redirected to a {scheme}: URL; only http(s) is followed"
    with pytest.raises(UnsafeUrl) as caught:
        await fetcher.fetch(web.url(path, host="img.test"))
    assert caught.value.message == expected
    with pytest.raises(UnsafeUrl) as caught:
        await fetcher.fetch_page(web.url(path, host="img.test"), max_bytes=MAX_BYTES)
    assert caught.value.message == expected


@pytest.mark.parametrize("path", ["/big-length", "/big-stream"])
async def test_a_page_read_cuts_a_long_page_at_its_bound(
    fetcher: SafeFetcher, web: WebServer, path: str
) -> None:
    fetched = await fetcher.fetch_page(web.url(path, host="img.test"), max_bytes=100)
    assert fetched.data == b"x" * 100
    assert fetched.truncated is True
    assert web.request_headers[-1]["accept"].startswith("text/html")
    whole = await fetcher.fetch_page(web.url(path, host="img.test"), max_bytes=MAX_BYTES + 1)
    assert len(whole.data) == MAX_BYTES + 1
    assert whole.truncated is False
    # An image read of the same body is still refused, not cut.
    with pytest.raises(UnsafeUrl, match="the image is larger than"):
        await fetcher.fetch(web.url(path, host="img.test"))


async def test_a_public_image_is_fetched(fetcher: SafeFetcher, web: WebServer) -> None:
    fetched = await fetcher.fetch(web.url("/ok", host="img.test"))
    assert fetched.data == BODY
    assert fetched.declared_type == "image/png"
    assert fetched.redirects == 0
    headers = web.request_headers[-1]
    assert headers["accept-encoding"] == "identity"
    assert headers["accept"].startswith("image/")


async def test_five_redirects_are_followed(fetcher: SafeFetcher, web: WebServer) -> None:
    fetched = await fetcher.fetch(web.url("/r1", host="img.test"))
    assert fetched.data == BODY
    assert fetched.redirects == 5
    assert fetched.final_url.endswith("/r6")


async def test_a_body_at_the_limit_is_accepted(fetcher: SafeFetcher, web: WebServer) -> None:
    web.routes["/exact"] = Reply(body=b"z" * MAX_BYTES, send_length=False)
    fetched = await fetcher.fetch(web.url("/exact", host="img.test"))
    assert len(fetched.data) == MAX_BYTES


@pytest.mark.parametrize(("status", "path"), [(404, "/missing"), (500, "/boom")])
async def test_http_errors_are_fetch_failures(
    fetcher: SafeFetcher, web: WebServer, status: int, path: str
) -> None:
    web.routes["/boom"] = Reply(status=500, body=b"no")
    with pytest.raises(FetchFailed, match=f"HTTP {status}"):
        await fetcher.fetch(web.url(path, host="img.test"))


async def test_unknown_names_are_fetch_failures(fetcher: SafeFetcher) -> None:
    with pytest.raises(FetchFailed, match="could not be resolved"):
        await fetcher.fetch("https://unknown.test/x.png")


async def test_http_is_refused_unless_allowed(fetch_policy: FetchPolicy, web: WebServer) -> None:
    strict = FetchPolicy(max_bytes=fetch_policy.max_bytes, addresses=fetch_policy.addresses)
    with pytest.raises(UnsafeUrl, match="scheme 'http' is not allowed"):
        check_url(web.url("/ok", host="img.test"), strict)


async def test_the_checked_address_is_the_connected_one(
    fetch_policy: FetchPolicy, web: WebServer
) -> None:
    """One lookup per connection: a name cannot answer 'public' to the check and 'private' to
    the connect, because there is no second lookup."""

    class CountingResolver:
        def __init__(self) -> None:
            self.calls = 0

        async def resolve(self, host: str, port: int) -> Sequence[IpAddress]:
            self.calls += 1
            answer = HOSTS["img.test"] if self.calls == 1 else HOSTS["intranet.test"]
            return await MappedResolver({host: answer}).resolve(host, port)

    web.routes.update(routes_for(web.port))
    counting = CountingResolver()
    fetcher = SafeFetcher(fetch_policy, resolver=counting)
    try:
        fetched = await fetcher.fetch(web.url("/ok", host="img.test"))
    finally:
        await fetcher.aclose()
    assert fetched.data == BODY
    assert counting.calls == 1


def _tls_pair(tmp_path: pytest.TempPathFactory, name: str) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server context with a self-signed certificate for ``name`` and a client trusting it."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    directory = tmp_path.mktemp("tls")
    cert_path = directory / "cert.pem"
    key_path = directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert_path, key_path)
    client = ssl.create_default_context(cafile=str(cert_path))
    return server, client


@pytest.mark.parametrize(("cert_name", "works"), [("img.test", True), ("other.test", False)])
async def test_tls_verifies_the_url_host_not_the_address(
    tmp_path_factory: pytest.TempPathFactory,
    fetch_policy: FetchPolicy,
    resolver: MappedResolver,
    cert_name: str,
    works: bool,
) -> None:
    server_tls, client_tls = _tls_pair(tmp_path_factory, cert_name)
    with serve_web({"/ok": Reply(body=BODY)}, tls=server_tls) as secure:
        policy = FetchPolicy(
            max_bytes=fetch_policy.max_bytes,
            allowed_ports=frozenset({secure.port}),
            addresses=fetch_policy.addresses,
            total_timeout=5.0,
        )
        fetcher = SafeFetcher(policy, resolver=resolver, ssl_context=client_tls)
        try:
            url = secure.url("/ok", host="img.test", scheme="https")
            if works:
                assert (await fetcher.fetch(url)).data == BODY
            else:
                with pytest.raises(FetchFailed):
                    await fetcher.fetch(url)
        finally:
            await fetcher.aclose()


def test_fetchers_share_one_trust_store_that_verifies() -> None:
    # Loading the certificates costs tens of ms of CPU: once per process, not per fetcher.
    trust = system_trust()
    assert system_trust() is trust
    assert trust.verify_mode is ssl.CERT_REQUIRED and trust.check_hostname
