"""Signing in and out of the web app, over real HTTP: cookies, CSRF, revocation, headers."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import httpx

from memory_tools.operations import admin
from memory_tools.testing.web_app import WebApp, WebClient


def _cookie_header(answer: httpx.Response, name: str) -> str:
    for value in answer.headers.get_list("set-cookie"):
        if value.startswith(f"{name}="):
            return value
    raise AssertionError(f"no {name} cookie in {answer.headers.get_list('set-cookie')}")


async def test_sign_in_sets_a_strict_http_only_session_cookie(
    browser_for: Callable[[], WebClient], make_person: Callable[..., Any]
) -> None:
    alice = await make_person("alice@example.com")
    async with browser_for() as client:
        answer = await client.sign_in(alice.key, next_path="/account")
        assert answer.status_code == 303 and answer.headers["location"] == "/account"
        cookie = _cookie_header(answer, "mem_session").lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "path=/" in cookie
        assert "secure" not in cookie  # plain http on loopback: a Secure cookie would be dropped
        assert alice.key not in answer.headers.get("set-cookie", "")
        page = await client.get("/account")
        assert page.status_code == 200 and "alice@example.com" in page.text
        assert alice.key_id in page.text and alice.key not in page.text


async def test_over_https_the_cookie_is_secure_and_host_only(
    browser_for: Callable[[], WebClient], make_person: Callable[..., Any], webapp: WebApp
) -> None:
    alice = await make_person("alice@example.com")
    async with browser_for() as client:
        # The public base URL says https (a TLS proxy in front): cookies are made for it.
        object.__setattr__(webapp.services, "public_base_url", "https://memory.example")
        form = await client.http.get("/sign-in")
        assert "secure" in _cookie_header(form, "mem_sign_in").lower()
        token = re.search(r'name="signInToken" value="([^"]*)"', form.text)
        assert token is not None
        assert 'placeholder="mk_…"' in form.text  # what a key looks like, in view
        # httpx keeps Secure cookies off plain http, as browsers do: send it as the proxy would,
        # with the Origin of the page the browser was on (the https one).
        answer = await client.http.post(
            "/sign-in",
            data={"signInToken": token.group(1), "apiKey": alice.key, "next": "/account"},
            headers={
                "Origin": "https://memory.example",
                "Cookie": f"mem_sign_in={token.group(1)}",
            },
        )
        assert answer.status_code == 303
        cookie = _cookie_header(answer, "__Host-mem_session").lower()
        assert "secure" in cookie and "httponly" in cookie and "samesite=strict" in cookie
        assert "domain=" not in cookie and "path=/" in cookie


async def test_a_wrong_key_gets_no_session(
    browser_for: Callable[[], WebClient], make_person: Callable[..., Any]
) -> None:
    await make_person("alice@example.com")
    async with browser_for() as client:
        answer = await client.sign_in("mk_not-a-real-key")
        assert answer.status_code == 401
        assert "unknown or revoked" in answer.text
        assert "mem_session" not in answer.headers.get("set-cookie", "")
        assert (await client.get("/account")).status_code == 303


async def test_sign_in_without_its_form_token_is_refused(
    browser_for: Callable[[], WebClient], make_person: Callable[..., Any], webapp: WebApp
) -> None:
    # Login CSRF: another site must not sign a victim's browser into the attacker's account.
    alice = await make_person("alice@example.com")
    async with browser_for() as client:
        answer = await client.http.post(
            "/sign-in",
            data={"signInToken": "forged", "apiKey": alice.key},
            headers={"Origin": webapp.base_url},
        )
        assert answer.status_code == 403
        assert "mem_session" not in answer.headers.get("set-cookie", "")
        cross = await client.http.post(
            "/sign-in", data={"apiKey": alice.key}, headers={"Origin": "https://evil.example"}
        )
        assert cross.status_code == 403


async def test_no_page_without_a_session(browser_for: Callable[[], WebClient]) -> None:
    async with browser_for() as client:
        answer = await client.get("/account?tab=1")
        assert answer.status_code == 303
        assert answer.headers["location"] == "/sign-in?next=/account%3Ftab%3D1"
        forged = await client.http.get("/account", headers={"Cookie": "mem_session=wss_forged"})
        assert forged.status_code == 303 and forged.headers["location"].startswith("/sign-in")


async def test_revoking_the_key_ends_its_sessions_at_the_next_request(
    signed_in: WebClient, webapp: WebApp, make_person: Callable[..., Any]
) -> None:
    assert (await signed_in.get("/account")).status_code == 200
    keys = await admin.list_keys(webapp.services.database, "alice@example.com")
    await admin.revoke_key(webapp.services.database, keys[0].id)
    answer = await signed_in.get("/account")
    assert answer.status_code == 303 and answer.headers["location"].startswith("/sign-in")
    refused = await signed_in.submit("/sign-out")
    assert refused.status_code == 303 and refused.headers["location"].startswith("/sign-in")


async def test_a_change_without_the_csrf_token_is_refused_and_changes_nothing(
    signed_in: WebClient,
) -> None:
    refused = await signed_in.submit("/sign-out", csrf=False)
    assert refused.status_code == 403
    wrong = await signed_in.submit("/sign-out", {"csrf": "x" * 43})
    assert wrong.status_code == 403
    cross = await signed_in.submit("/sign-out", headers={"Origin": "https://evil.example"})
    assert cross.status_code == 403
    assert (await signed_in.get("/account")).status_code == 200  # still signed in


async def test_sign_out_ends_the_session_even_for_a_replayed_cookie(
    signed_in: WebClient, browser_for: Callable[[], WebClient]
) -> None:
    stolen = signed_in.http.cookies.get("mem_session")
    assert stolen
    answer = await signed_in.submit("/sign-out")
    assert answer.status_code == 303 and answer.headers["location"] == "/sign-in"
    async with browser_for() as other:
        replay = await other.http.get("/account", headers={"Cookie": f"mem_session={stolen}"})
        assert replay.status_code == 303


async def test_pages_carry_a_strict_policy_and_their_scripts_its_nonce(
    signed_in: WebClient,
) -> None:
    page = await signed_in.get("/account")
    policy = page.headers["content-security-policy"]
    nonce = re.search(r"script-src 'nonce-([^']+)'", policy)
    assert nonce is not None
    assert "frame-ancestors 'none'" in policy and "default-src 'none'" in policy
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
    assert page.headers["x-content-type-options"] == "nosniff"
    assert page.headers["referrer-policy"] == "same-origin"
    assert page.headers["cache-control"] == "no-store"
    scripts = re.findall(r"<script([^>]*)>", page.text)
    assert scripts and all(f'nonce="{nonce.group(1)}"' in attrs for attrs in scripts)
    assert " style=" not in page.text and "onclick=" not in page.text
    again = await signed_in.get("/account")
    assert again.headers["content-security-policy"] != policy  # a fresh nonce per response


async def test_sign_in_goes_only_to_a_local_path(
    browser_for: Callable[[], WebClient], make_person: Callable[..., Any]
) -> None:
    alice = await make_person("alice@example.com")
    for hostile in ("//evil.example/x", "https://evil.example/", "/\\evil.example", "/ok\r\nX: y"):
        async with browser_for() as client:
            answer = await client.sign_in(alice.key, next_path=hostile)
            assert answer.status_code == 303
            assert answer.headers["location"] == "/library", hostile


async def test_static_files_are_served_only_by_name(browser_for: Callable[[], WebClient]) -> None:
    async with browser_for() as client:
        script = await client.http.get("/static/app.js")
        assert script.status_code == 200
        assert script.headers["content-type"].startswith("text/javascript")
        assert script.headers["x-content-type-options"] == "nosniff"
        for hostile in ("..%2fhandlers.py", "handlers.py", "app.JS", "%2e%2e/__init__.py"):
            assert (await client.http.get(f"/static/{hostile}")).status_code == 404, hostile


async def test_a_huge_form_is_refused_before_it_is_read(signed_in: WebClient) -> None:
    answer = await signed_in.submit("/sign-out", {"pad": "x" * 200_000})
    assert answer.status_code == 422
    assert (await signed_in.get("/account")).status_code == 200
