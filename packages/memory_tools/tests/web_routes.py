"""The scripted web server's names and routes, shared by the fetch and save fixtures and tests."""

from __future__ import annotations

from memory_tools.testing.web import Reply

# Names the tests resolve themselves; only img.test may reach loopback (the test allowance).
HOSTS = {
    "img.test": ["127.0.0.1"],
    "cdn.img.test": ["127.0.0.1"],
    "loopback-alias.test": ["127.0.0.1"],
    "intranet.test": ["10.0.0.5"],
    "mixed.test": ["93.184.216.34", "10.0.0.5"],
    "metadata.test": ["169.254.169.254"],
    "169.254.169.254.nip.io": ["169.254.169.254"],
    "aws6.test": ["fd00:ec2::254"],
    "mapped.test": ["::ffff:127.0.0.1"],
    "nat64.test": ["64:ff9b::a9fe:a9fe"],
    "sixtofour.test": ["2002:7f00:1::1"],
    "teredo.test": ["2001:0:4136:e378:8000:63bf:3fff:fdd2"],
    "cgnat.test": ["100.64.1.1"],
    "bench.test": ["198.18.0.1"],
    "mcast.test": ["224.0.0.1"],
    "bcast.test": ["255.255.255.255"],
    "zero.test": ["0.0.0.0"],
    "linklocal6.test": ["fe80::1"],
    "ula.test": ["fc00::1"],
}
ALLOWED_NAMES = frozenset({"img.test", "cdn.img.test"})
MAX_BYTES = 4096
SAVE_LIMIT = 65536


BODY = b"\x89PNG\r\n\x1a\n" + b"pixels" * 20


def routes_for(port: int) -> dict[str, Reply]:
    def to(location: str) -> Reply:
        return Reply(status=302, headers={"Location": location.format(port=port)})

    routes = {
        "/ok": Reply(body=BODY, headers={"Content-Type": "image/png"}),
        "/secret": Reply(body=b"internal secret"),
        "/to-literal-loopback": to("http://127.0.0.1:{port}/secret"),
        "/to-intranet": to("http://intranet.test:{port}/secret"),
        "/to-metadata": to("http://169.254.169.254/latest/meta-data/"),
        "/to-file": to("file:///etc/passwd"),
        "/to-localhost": to("http://localhost:{port}/secret"),
        "/to-userinfo": to("http://user@img.test:{port}/ok"),
        "/to-bad-port": to("http://img.test:22/ok"),
        "/to-data": to("data:image/png;base64,iVBORw0KGgo="),
        "/to-mailto": to("mailto:someone@example.com"),
        "/to-javascript": to("javascript:alert(document.domain)"),
        "/to-javascript-upper": to("JavaScript:alert(1)"),
        "/to-unparsable": to("http:no-slash"),
        "/loop-a": to("/loop-b"),
        "/loop-b": to("/loop-a"),
        "/big-length": Reply(body=b"x" * (MAX_BYTES + 1)),
        "/big-stream": Reply(body=b"x" * (MAX_BYTES + 1), send_length=False),
        "/drip": Reply(body=b"y" * 200, drip_seconds=0.05),
        "/drip-no-length": Reply(body=b"y" * 200, drip_seconds=0.05, send_length=False),
        "/gzip": Reply(body=BODY, headers={"Content-Encoding": "gzip"}),
    }
    for hop in range(6):
        routes[f"/r{hop}"] = to(f"/r{hop + 1}")
    routes["/r6"] = Reply(body=BODY)
    return routes
