"""What the duplicates page's read costs the database: one vault resolution and one read.

Counted as statements (``before_cursor_execute``), not time, so the bound does not depend on
the machine. The page's groups used to resolve the vault twice and read every image twice
(the pairs, then the same assets again for their size, bytes and preview): 4 statements.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastmcp import Client
from sqlalchemy import event

from memory_tools import MemoryServices
from memory_tools.access import authenticate
from memory_tools.serving.job_worker import job_worker
from memory_tools.workflows.browsing import duplicate_groups

from ..tool_calls import call
from .photos import b64, photo

# The vault (one statement), then the open pairs with both images' objects joined in. Before
# the images rode on the pair read it was 4: the vault and the pairs, the vault again and the
# same images again.
GROUPS_STATEMENTS = 2


async def test_a_page_of_groups_resolves_the_vault_once_and_reads_the_images_once(
    saving: MemoryServices,
    make_person: Callable[..., Awaitable[Any]],
    client_as: Callable[[str], Client[Any]],
) -> None:
    alice = await make_person("alice@example.com")
    saved: dict[str, str] = {}
    async with client_as(alice.key) as c:
        for name, data in (
            ("Cat", photo("chelsea")),
            ("Cat copy", photo("chelsea", ".jpg", Q=60)),
            ("Coffee", photo("coffee")),
            ("Coffee copy", photo("coffee", ".jpg", Q=70)),
        ):
            answer = await call(c, "image_asset_save", {"imageBase64": b64(data), "title": name})
            saved[name] = answer["assetId"]
    await job_worker(saving, handlers={}).drain()

    sent: list[str] = []

    def record(*args: Any) -> None:
        sent.append(" ".join(str(args[2]).split()))

    engine = saving.database.engine.sync_engine
    async with saving.database.unit_of_work() as uow:
        caller = await authenticate(uow, alice.key)
        await duplicate_groups(uow, caller, saving, vault=None, limit=10, cursor=None)  # warm
        event.listen(engine, "before_cursor_execute", record)
        try:
            page = await duplicate_groups(uow, caller, saving, vault=None, limit=10, cursor=None)
        finally:
            event.remove(engine, "before_cursor_execute", record)

    cards = {card.title: card for group in page.groups for card in group.cards}
    assert [sorted(card.title for card in group.cards) for group in page.groups] == [
        ["Coffee", "Coffee copy"],
        ["Cat", "Cat copy"],
    ]
    # What the read carried is each image's own: its size, its bytes, its preview.
    assert cards["Cat"].width == 160 and 0 < cards["Cat"].height < 160
    assert cards["Cat"].bytes != cards["Cat copy"].bytes
    assert all(card.preview is not None and card.preview.url for card in cards.values())
    assert {card.asset_id for card in cards.values()} == set(saved.values())
    listing = "\n".join(sql[:160] for sql in sent)
    assert len(sent) == GROUPS_STATEMENTS, listing
