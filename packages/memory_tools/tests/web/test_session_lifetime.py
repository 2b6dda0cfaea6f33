"""``WEB_SESSION_TTL_SECONDS`` is the session's lifetime end to end: cookie, row and refusal."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from memory_db import MemorySettings
from memory_db.unit_of_work import session_of
from memory_tools.testing.web_app import WebApp, WebClient

LIFETIME = 900  # not the default (43,200), so the test shows the setting is what is read


@pytest.fixture
def web_settings(tmp_path: Path) -> MemorySettings:
    return MemorySettings(memory_data_dir=tmp_path / "data", web_session_ttl_seconds=LIFETIME)


async def test_the_configured_lifetime_bounds_cookie_and_session(
    browser_for: Callable[[], WebClient], make_person: Callable[..., Any], webapp: WebApp
) -> None:
    alice = await make_person("alice@example.com")
    async with browser_for() as client:
        answer = await client.sign_in(alice.key, next_path="/account")
        cookies = [c for c in answer.headers.get_list("set-cookie") if c.startswith("mem_session=")]
        assert len(cookies) == 1 and f"max-age={LIFETIME}" in cookies[0].lower()
        async with webapp.services.database.unit_of_work() as uow:
            lifetime = await session_of(uow).scalar(
                text(
                    "SELECT extract(epoch FROM expires_at - created_at) FROM mem_web_sessions "
                    "WHERE key_id = :key"
                ),
                {"key": alice.key_id},
            )
        assert lifetime is not None and abs(float(lifetime) - LIFETIME) < 5
        assert (await client.get("/account")).status_code == 200

        # The lifetime has passed (moved back rather than waited for): the cookie, which a
        # browser might still send, opens nothing and the sign-in page asks for the key again.
        async with webapp.services.database.unit_of_work() as uow:
            await session_of(uow).execute(
                text(
                    "UPDATE mem_web_sessions SET created_at = created_at - make_interval("
                    "secs => :s), expires_at = expires_at - make_interval(secs => :s) "
                    "WHERE key_id = :key"
                ),
                {"s": LIFETIME + 1, "key": alice.key_id},
            )
        answer = await client.get("/account")
        assert answer.status_code == 303 and answer.headers["location"].startswith("/sign-in")
