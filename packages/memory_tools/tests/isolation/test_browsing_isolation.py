"""The web pages' views (memory_tools.workflows.browsing) over the isolation matrix's callers.

Callers: the owner, another owner, a shared reader and writer, and a revoked key. Targets: the
owner's asset (shared with the grantees) and an id that never existed. A caller that may not
read the asset learns nothing: its page, its original and its place in a grid answer exactly
like the missing id.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastmcp import Client

from memory_tools import MemoryServices
from memory_tools.access import authenticate
from memory_tools.errors import ToolFailure
from memory_tools.operations import admin
from memory_tools.workflows import browsing
from memory_tools.workflows.assets import ListRequest

from ..pictures import b64, picture
from ..tool_calls import call

MISSING = "ast_" + "z" * 26


async def _outcome(services: MemoryServices, key: str, view: str, asset_id: str) -> tuple[str, str]:
    """``(code, message)`` of one cell; ``ok`` / ``absent`` for the grid."""
    try:
        async with services.database.unit_of_work() as uow:
            caller = await authenticate(uow, key)
            if view == "detail":
                await browsing.asset_detail(uow, caller, services, asset_id=asset_id)
            elif view == "original":
                await browsing.original_link(uow, caller, services, asset_id=asset_id)
            else:
                grid = await browsing.asset_grid(uow, caller, services, ListRequest(limit=100))
                shown = {card.summary.asset_id for card in grid.cards}
                return ("ok" if asset_id in shown else "absent"), ""
    except ToolFailure as failure:
        return failure.code, failure.message
    return "ok", ""


async def test_every_page_view_caller_and_target(
    client_as: Callable[[str], Client[Any]],
    saving: MemoryServices,
    make_person: Callable[..., Awaitable[Any]],
) -> None:
    alice = await make_person("alice@example.com")
    alice_old = await make_person("alice@example.com")
    bob = await make_person("bob@example.com")
    reader = await make_person("reader@example.com")
    writer = await make_person("writer@example.com")
    for grantee, permission in (("reader", "read"), ("writer", "write")):
        await admin.grant(
            saving.database, "alice@example.com", "Library", f"{grantee}@example.com", permission
        )
    async with client_as(alice.key) as client:
        saved = await call(client, "image_asset_save", {"imageBase64": b64(picture(3))})
    await admin.revoke_key(saving.database, alice_old.key_id)
    callers = {
        "owner": alice.key,
        "other owner": bob.key,
        "reader": reader.key,
        "writer": writer.key,
        "revoked": alice_old.key,
    }
    mismatches: list[str] = []
    for name, key in callers.items():
        for view in ("detail", "original", "grid"):
            got = await _outcome(saving, key, view, saved["assetId"])
            missing = await _outcome(saving, key, view, MISSING)
            if name == "revoked":
                wanted = "unauthenticated"
            elif name == "other owner":
                wanted = "absent" if view == "grid" else "not_found"
            else:
                wanted = "ok"
            if got[0] != wanted:
                mismatches.append(f"{view} / {name}: {got} != {wanted}")
            if wanted == "not_found" and got != missing:
                mismatches.append(f"{view} / {name}: {got} differs from a missing id {missing}")
    assert mismatches == []
