"""Attacks on the sign-in, session, CSRF and flash layer that once got through or crashed it."""

from __future__ import annotations

from collections.abc import Callable
from http.cookies import SimpleCookie
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast
from urllib.parse import urlsplit

import pytest
from starlette.requests import Request
from starlette.responses import Response

from memory_db import MemorySettings
from memory_db.ids import new_id
from memory_db.repositories import web_sessions
from memory_db.storage.keys import build_object_key, build_staging_key
from memory_db.storage.s3 import S3AssetObjectStore
from memory_tools.errors import InvalidInputFailure
from memory_tools.testing.web_app import WebApp, WebClient
from memory_tools.web import security
from memory_tools.web.handlers import read_json
from memory_tools.web.rendering import Flash, read_flash, set_flash
from memory_tools.web.security import FLASH_COOKIE


def test_a_token_of_any_characters_compares_without_raising() -> None:
    # hmac.compare_digest raises TypeError on a str with non-ASCII characters.
    assert not security.same_token("é" * 43, "a" * 43)
    assert not security.same_token("a" * 43, "é" * 43)
    assert not security.same_token("", "a")
    assert not security.same_token(None, "a")
    assert security.same_token("é" * 3, "é" * 3)


async def test_a_non_ascii_csrf_token_is_refused_not_a_crash(signed_in: WebClient) -> None:
    answer = await signed_in.submit("/sign-out", {"csrf": "é" * 43})
    assert answer.status_code == 403
    assert "content-security-policy" in answer.headers
    assert (await signed_in.get("/account")).status_code == 200  # still signed in


async def test_a_non_ascii_sign_in_token_is_refused_not_a_crash(
    browser_for: Callable[[], WebClient], make_person: Callable[..., Any], webapp: WebApp
) -> None:
    alice = await make_person("alice@example.com")
    async with browser_for() as client:
        await client.http.get("/sign-in")
        answer = await client.http.post(
            "/sign-in",
            data={"signInToken": "é" * 43, "apiKey": alice.key},
            headers={"Origin": webapp.base_url},
        )
        assert answer.status_code == 403
        assert "mem_session" not in answer.headers.get("set-cookie", "")


async def test_signing_in_again_ends_the_session_the_browser_had(
    browser_for: Callable[[], WebClient], make_person: Callable[..., Any]
) -> None:
    # A shared browser: Bob signs in over Alice's session. Alice's session must not live on
    # (with its cookie overwritten nobody could sign it out before it expires).
    alice = await make_person("alice@example.com")
    bob = await make_person("bob@example.com")
    async with browser_for() as client, browser_for() as other:
        assert (await client.sign_in(alice.key)).status_code == 303
        first = client.http.cookies.get("mem_session")
        assert first
        assert (await client.sign_in(bob.key)).status_code == 303
        assert client.http.cookies.get("mem_session") != first
        replay = await other.http.get("/account", headers={"Cookie": f"mem_session={first}"})
        assert replay.status_code == 303 and replay.headers["location"].startswith("/sign-in")
        page = await client.get("/account")
        assert page.status_code == 200 and "bob@example.com" in page.text


async def test_one_key_cannot_pile_up_sessions_without_bound(
    browser_for: Callable[[], WebClient],
    make_person: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Anyone with any key (even read-only) could sign in in a loop and grow the table forever.
    monkeypatch.setattr(web_sessions, "MAX_SESSIONS_PER_KEY", 3)
    alice = await make_person("alice@example.com")
    secrets: list[str] = []
    for _ in range(5):
        async with browser_for() as client:
            assert (await client.sign_in(alice.key)).status_code == 303
            secret = client.http.cookies.get("mem_session")
            assert secret
            secrets.append(secret)
    async with browser_for() as probe:
        alive = []
        for secret in secrets:
            answer = await probe.http.get("/account", headers={"Cookie": f"mem_session={secret}"})
            alive.append(answer.status_code == 200)
    assert alive == [False, False, True, True, True]  # the newest stay, the oldest end


@pytest.mark.parametrize("message", ["é" * 2000, "😀" * 2000, '"\\;,' * 2000, "ok" * 2000])
def test_a_long_flash_message_still_fits_in_its_cookie(message: str) -> None:
    # A browser silently drops a cookie over 4096 bytes: the failure would never be shown.
    response = Response()
    set_flash(response, Flash("error", message, "invalid_input"), secure=True)
    header = response.headers["set-cookie"]
    assert len(header) < 4096
    jar = SimpleCookie()
    jar.load(header)
    sent = f"{FLASH_COOKIE}={jar[FLASH_COOKIE].coded_value}"
    shown = read_flash(Request({"type": "http", "headers": [(b"cookie", sent.encode())]}))
    assert shown is not None and shown.kind == "error" and shown.code == "invalid_input"
    assert shown.message and message.startswith(shown.message.removesuffix("…"))


@pytest.mark.parametrize(
    ("region", "bucket", "endpoint"),
    [
        ("us-east-1", "photos", None),
        ("eu-west-1", "photos", None),
        ("eu-west-1", "my.photos", None),
        ("eu-west-1", "photos", "https://minio.example:9000"),
    ],
)
async def test_the_policy_admits_the_links_an_s3_store_really_signs(
    region: str, bucket: str, endpoint: str | None, tmp_path: Path
) -> None:
    # Otherwise the browser blocks every preview and upload of an S3 deployment (botocore signs
    # AWS links with the global host, https://<bucket>.s3.amazonaws.com, for every region).
    store = S3AssetObjectStore(
        bucket=bucket,
        region=region,
        endpoint_url=endpoint,
        access_key_id="AKIDEXAMPLE",
        secret_access_key="secret",
    )
    settings = MemorySettings(
        memory_data_dir=tmp_path,
        asset_storage_provider="s3",
        asset_s3_bucket=bucket,
        asset_s3_region=region,
        asset_s3_endpoint=endpoint,
    )
    services = cast(Any, SimpleNamespace(store=store, settings=settings))
    namespace = new_id("ans")
    key = build_staging_key("test", namespace, new_id("aur"), "png")
    try:
        get = await store.create_signed_get_url(
            build_object_key("test", namespace, new_id("aob"), "preview", "webp"), expires_in=60
        )
        put = await store.create_signed_put_url(
            key, content_type="image/png", content_length=10, expires_in=60
        )
    finally:
        await store.close()
    for url in (get, put.url):
        parts = urlsplit(url)
        assert f"{parts.scheme}://{parts.netloc}" in security.store_origins(services), url


async def test_behind_a_proxy_that_rewrites_host_the_public_origin_is_ours(
    signed_in: WebClient, webapp: WebApp
) -> None:
    # nginx's default `proxy_set_header Host $proxy_host` (and Apache without
    # ProxyPreserveHost) hand us the upstream's Host; the browser's Origin is the public URL.
    proxied = {"Host": "upstream.internal:8000"}
    foreign = await signed_in.submit(
        "/sign-out", headers={**proxied, "Origin": "https://evil.example"}
    )
    assert foreign.status_code == 403
    answer = await signed_in.submit("/sign-out", headers={**proxied, "Origin": webapp.base_url})
    assert answer.status_code == 303 and answer.headers["location"] == "/sign-in"


async def test_a_static_file_opened_as_a_page_runs_nothing(
    browser_for: Callable[[], WebClient],
) -> None:
    # An SVG navigated to is a document: without a policy any script in it would run here.
    async with browser_for() as client:
        for name in ("icon.svg", "app.css", "app.js"):
            answer = await client.http.get(f"/static/{name}")
            assert answer.status_code == 200
            policy = answer.headers.get("content-security-policy", "")
            assert "default-src 'none'" in policy and "sandbox" in policy, name
            assert answer.headers.get("x-frame-options") == "DENY"


async def test_a_malformed_form_is_refused_with_our_page_and_headers(
    signed_in: WebClient, webapp: WebApp
) -> None:
    # Starlette's own 400 for these carried none of the security headers.
    malformed: list[dict[str, Any]] = [
        {"files": {f"f{i}": (None, "x") for i in range(300)}},
        {"files": {f"f{i}": (f"n{i}.txt", b"x") for i in range(6)}},
        {"content": b"x", "headers": {"content-type": "multipart/form-data"}},
    ]
    for path in ("/sign-out", "/sign-in"):
        for kwargs in malformed:
            headers = {"Origin": webapp.base_url, **kwargs.get("headers", {})}
            sent = {k: v for k, v in kwargs.items() if k != "headers"}
            answer = await signed_in.http.post(path, headers=headers, **sent)
            assert answer.status_code == 422, (path, answer.text)
            assert "default-src 'none'" in answer.headers.get("content-security-policy", "")
            assert answer.headers.get("cache-control") == "no-store"
    assert (await signed_in.get("/account")).status_code == 200


def _streamed(chunks: list[bytes], headers: dict[str, str] | None = None) -> Request:
    pending = list(chunks)

    async def receive() -> dict[str, Any]:
        body = pending.pop(0) if pending else b""
        return {"type": "http.request", "body": body, "more_body": bool(pending)}

    raw = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    return Request({"type": "http", "method": "POST", "headers": raw}, receive)


async def test_a_json_body_is_bounded_and_checked() -> None:
    # Only /mcp has a body limit: a JSON endpoint reading request.json() would take any size.
    huge = _streamed([b"[" + b"1," * 40_000] * 10)  # chunked, no Content-Length
    with pytest.raises(InvalidInputFailure, match="larger than"):
        await read_json(huge)
    declared = _streamed([b"{}"], {"content-length": str(10**9)})
    with pytest.raises(InvalidInputFailure, match="larger than"):
        await read_json(declared)
    for bad in (b"{", b"[" * 50_000 + b"]" * 50_000):
        with pytest.raises(InvalidInputFailure):
            await read_json(_streamed([bad]), max_bytes=200_000)
    assert await read_json(_streamed([b'{"a": ', b"[1, 2]}"])) == {"a": [1, 2]}
