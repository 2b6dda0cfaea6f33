"""The operator's one line while search understands words only, over real HTTP.

The app searches with ``local-hash-v1`` until the alias moves to a learned model: its operator
(a key with ``admin``) sees one line naming ``make model`` on every page, nobody else does, and
once a clip model is active (here the tiny test model, switched to with the rebuild an install
runs) the line is gone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from memory_db.runtime import prepare_vector_index
from memory_db.testing.clip_model import write_tiny_model
from memory_tools.operations.reindex import ReindexRequest, reindex
from memory_tools.testing.web_app import WebApp, WebClient
from memory_tools.workflows.meaning import OPERATOR_NOTICE

OPERATOR = ("read", "admin")
NOTICE = 'class="operator-notice"'


async def test_only_the_operator_sees_the_line_and_only_while_search_is_words_only(
    browser_for: Callable[[], WebClient], make_person: Callable[..., Any], webapp: WebApp
) -> None:
    alice = await make_person("alice@example.com")
    operator = await make_person("ops@example.com", OPERATOR)
    async with browser_for() as person, browser_for() as ops:
        await person.sign_in(alice.key)
        await ops.sign_in(operator.key)
        for path in ("/library", "/search", "/account"):
            page = await ops.get(path)
            assert page.status_code == 200
            assert page.text.count(NOTICE) == 1, path
            assert "make model" in page.text
            mine = await person.get(path)
            assert mine.status_code == 200 and NOTICE not in mine.text, path
        assert "make model" in OPERATOR_NOTICE

        # The rebuild moves the alias to a clip model: search understands meaning now.
        services = webapp.services
        assert services.embedder is not None
        # What a server's start does: the first index, of the configured (words-only) embedder.
        await prepare_vector_index(services.database, services.settings, services.embedder)
        write_tiny_model(services.settings.model_dir / "tiny-clip")
        switched = await reindex(
            services, ReindexRequest(target="clip_tiny", provider="clip", model="tiny-clip")
        )
        assert switched.switched
        page = await ops.get("/library")
        assert page.status_code == 200 and NOTICE not in page.text
