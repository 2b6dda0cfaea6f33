"""The caller's own usage (``memory_tools.workflows.usage``): counters, bytes by project and tokens by
month, for the key's identity and never another owner's."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from fastmcp import Client
from sqlalchemy import text

from memory_db.unit_of_work import session_of
from memory_tools import MemoryServices
from memory_tools.workflows import usage

from ..pictures import b64, picture
from ..tool_calls import call as _call
from ..workflow_calls import refused, run

OWNER = "alice@example.com"


async def _tokens(
    services: MemoryServices, owner: str, when: str, total: int, model: str = "m1"
) -> None:
    async with services.database.unit_of_work() as uow:
        entry = await uow.usage.record(
            owner_identity=owner, source="embed_image_document", model=model, total_tokens=total
        )
        await session_of(uow).execute(
            text("UPDATE mem_usage_ledger SET created_at = :w WHERE id = :i"),
            {"w": datetime.fromisoformat(when), "i": entry},
        )


async def test_usage_is_the_callers_own(
    saving: MemoryServices,
    client_as: Callable[[str], Client[Any]],
    alice: Any,
    bob: Any,
    make_person: Callable[..., Any],
) -> None:
    async with client_as(alice.key) as client:
        pid = (await _call(client, "image_project_create", {"name": "Coast"}))["projectId"]
        await _call(client, "image_asset_save", {"imageBase64": b64(picture(1)), "projectId": pid})
        await _call(client, "image_asset_save", {"imageBase64": b64(picture(2))})
    async with client_as(bob.key) as client:
        await _call(client, "image_asset_save", {"imageBase64": b64(picture(3))})
    await _tokens(saving, OWNER, "2026-01-10 10:00:00+00", 10)
    await _tokens(saving, OWNER, "2026-01-20 10:00:00+00", 5)
    await _tokens(saving, OWNER, "2026-03-01 10:00:00+00", 7)
    await _tokens(saving, bob.email, "2026-02-01 10:00:00+00", 99)

    mine = await run(saving, alice.key, usage.my_usage)
    assert mine.quota_bytes == 10**9 and mine.used_bytes > 0
    assert [(p.vault, p.project_name, p.assets) for p in mine.projects] == [
        ("Library", "Coast", 1),
        ("Library", None, 1),
    ]
    assert all(p.bytes > 0 for p in mine.projects)
    assert [(m.month, m.total_tokens, m.calls) for m in mine.months] == [
        ("2026-01", 15, 2),
        ("2026-03", 7, 1),
    ]
    assert [(t.month, t.total_tokens) for t in mine.tokens] == [("2026-03", 7), ("2026-01", 15)]
    bobs = await run(saving, bob.key, usage.my_usage)
    assert [(m.month, m.total_tokens) for m in bobs.months] == [("2026-02", 99)]
    assert [p.assets for p in bobs.projects] == [1]
    # A key without the read scope is refused.
    writer = await make_person(OWNER, ("write",))
    assert (await refused(run(saving, writer.key, usage.my_usage))).startswith("forbidden")


async def test_the_offline_embedders_inputs_are_not_provider_tokens(
    saving: MemoryServices, alice: Any
) -> None:
    # The ledger counts the local-hash embedder's inputs too; no provider bills them.
    await _tokens(saving, OWNER, "2026-01-10 10:00:00+00", 40, model="local-hash-v1")
    await _tokens(saving, OWNER, "2026-02-10 10:00:00+00", 7)
    mine = await run(saving, alice.key, usage.my_usage)
    assert [(t.month, t.model, t.total_tokens) for t in mine.tokens] == [("2026-02", "m1", 7)]
    assert [(m.month, m.total_tokens) for m in mine.months] == [("2026-02", 7)]
    assert mine.provider_embedder is False  # the suite's servers embed with local-hash
    # A clip model is offline only on a server that runs it.
    assert usage.offline_models(saving.settings) == {"local-hash-v1"}
    clip = saving.settings.model_copy(
        update={"asset_embed_provider": "clip", "asset_embed_model": "m1"}
    )
    assert usage.offline_models(clip) == {"local-hash-v1", "m1"}
