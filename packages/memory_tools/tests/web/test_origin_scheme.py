"""An Origin of this host over plain HTTP is not ours when the browser reached us over HTTPS.

A page of ``http://host`` is whatever anyone on the network path made of it, so a change it
posts to ``https://host`` is cross-origin: refused before the CSRF token is even read, as any
other site's. An HTTPS Origin reaching a server that sees plain HTTP (TLS ended at a proxy) is
still ours.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest
from starlette.requests import Request

from memory_tools.web import security


def _request(scheme: str, origin: str, host: str = "photos.example") -> Request:
    return Request(
        {
            "type": "http",
            "scheme": scheme,
            "method": "POST",
            "path": "/sign-out",
            "headers": [(b"host", host.encode()), (b"origin", origin.encode())],
            "server": (host, 443 if scheme == "https" else 80),
        }
    )


def _services(public_base_url: str | None) -> Any:
    return cast(Any, SimpleNamespace(public_base_url=public_base_url))


@pytest.mark.parametrize("check", [security.same_origin, security.script_of_ours])
def test_the_same_host_over_plain_http_is_refused_on_an_https_site(check: Any) -> None:
    assert not check(_request("https", "http://photos.example"), _services(None))
    assert check(_request("https", "https://photos.example"), _services(None))
    # TLS ended at a proxy that says so only through the public base URL.
    behind = _services("https://photos.example")
    assert not check(_request("http", "http://photos.example"), behind)
    assert check(_request("http", "https://photos.example"), behind)


@pytest.mark.parametrize("check", [security.same_origin, security.script_of_ours])
def test_a_plain_http_site_still_accepts_its_own_pages(check: Any) -> None:
    assert check(_request("http", "http://127.0.0.1:8765", "127.0.0.1:8765"), _services(None))
    assert check(_request("http", "http://127.0.0.1:8765", "127.0.0.1:8765"), None)
    assert not check(_request("http", "http://evil.example", "127.0.0.1:8765"), None)
