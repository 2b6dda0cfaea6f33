"""The Keys page over real HTTP: list, create (the secret in that answer only), pause, resume
and revoke with the CSRF token; another owner's key refused like a missing one; a paused key's
web session stops until it is resumed."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import unquote

import pytest

from memory_tools.testing.web_app import WebApp, WebClient
from memory_tools.workflows import keys as key_workflows


def _flash(answer: Any) -> str:
    """The flash message a redirect carries (its cookie), decoded."""
    for value in answer.headers.get_list("set-cookie"):
        if value.startswith("mem_flash="):
            return unquote(value.split(";", 1)[0].removeprefix("mem_flash="))
    return ""


async def _state(webapp: WebApp, owner: str, key_id: str) -> str:
    async with webapp.services.database.unit_of_work() as uow:
        return (await uow.api_keys.get(key_id)).state if owner else ""


@pytest.fixture
async def alice_web(browser_for: Callable[[], WebClient], alice: Any) -> AsyncIterator[WebClient]:
    async with browser_for() as client:
        assert (await client.sign_in(alice.key)).status_code == 303
        yield client


async def test_the_keys_page_creates_shows_once_and_switches_keys(
    webapp: WebApp, alice: Any, bob: Any, alice_web: WebClient
) -> None:
    page = await alice_web.get("/keys")
    assert page.status_code == 200, page.text
    assert alice.key_id in page.text and bob.key_id not in page.text
    assert 'href="/keys" aria-current="page"' in page.text

    # Without the CSRF token nothing is made.
    refused = await alice_web.submit("/keys/create", {"label": "x", "scopes": "read"}, csrf=False)
    assert refused.status_code == 403
    made = await alice_web.submit(
        "/keys/create", {"label": "claude-code@laptop", "note": "nightly", "scopes": "read"}
    )
    assert made.status_code == 200, made.text
    (secret,) = re.findall(r'<code id="new-key-secret">(mk_[^<]+)</code>', made.text)
    assert made.headers["cache-control"] == "no-store"
    again = await alice_web.get("/keys")
    assert secret not in again.text and "claude-code@laptop" in again.text
    (agent_id,) = re.findall(r'data-key-id="(akey_[^"]+)"', again.text.split(alice.key_id)[0])

    paused = await alice_web.submit("/keys/pause", {"key": agent_id, "back": "/keys"})
    assert paused.status_code == 303 and "paused" in _flash(paused)
    assert await _state(webapp, "alice", agent_id) == "paused"
    resumed = await alice_web.submit("/keys/resume", {"key": agent_id})
    assert "resumed" in _flash(resumed) and await _state(webapp, "alice", agent_id) == "active"

    # Another owner's key is not found, and nothing changes; so is one's own signed-in key.
    other = await alice_web.submit("/keys/revoke", {"key": bob.key_id, "back": "/keys"})
    assert other.status_code == 303 and f"no key '{bob.key_id}'" in _flash(other)
    assert await _state(webapp, "bob", bob.key_id) == "active"
    own = await alice_web.submit("/keys/pause", {"key": alice.key_id, "back": "/keys"})
    assert "you cannot pause the key you are using" in _flash(own)
    # Bad values are refused beside the form, with what was typed kept.
    long = await alice_web.submit("/keys/create", {"label": "y" * 121, "scopes": "read"})
    assert long.status_code == 422 and "key label must be 1-120 characters" in long.text
    stronger = await alice_web.submit("/keys/create", {"label": "z", "scopes": "admin"})
    assert stronger.status_code == 403 and "scopes it lacks: admin" in stronger.text
    assert len((await alice_web.get("/keys")).text.split('data-key-id="')) == 3  # two keys


async def test_a_paused_keys_session_stops_until_it_is_resumed(
    webapp: WebApp, alice: Any, browser_for: Callable[[], WebClient], make_person: Any
) -> None:
    agent = await make_person("alice@example.com", ("read", "write"))
    async with browser_for() as owner, browser_for() as agent_web:
        assert (await owner.sign_in(alice.key)).status_code == 303
        assert (await agent_web.sign_in(agent.key)).status_code == 303
        assert (await agent_web.get("/library")).status_code == 200
        await owner.submit("/keys/pause", {"key": agent.key_id})
        stopped = await agent_web.get("/library")
        assert stopped.status_code == 303 and "/sign-in" in stopped.headers["location"]
        await owner.submit("/keys/resume", {"key": agent.key_id})
        assert (await agent_web.get("/library")).status_code == 200
    assert key_workflows.MAX_KEYS_LISTED >= 100
