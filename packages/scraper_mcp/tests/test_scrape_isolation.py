"""The isolation matrix rows of ``scrape_page_images`` (docs/design.md#tenancy), over the same
seven callers as ``memory_tools``' matrix: the owner, another owner, a shared reader, writer and
admin, the owner's key without ``destructive`` and a revoked key.

Without ``save`` the tool reads only the web: every authenticated caller may use it and nothing
is stored. With ``save`` the vault decides, exactly as ``image_asset_save`` does: another
owner's vault is ``not_found`` (indistinguishable from a vault that does not exist), a read
grant is ``forbidden``; a refused save stores nothing, and the asset of an allowed one lands in
the target vault.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastmcp import Client
from sqlalchemy import text

from memory_tools import MemoryServices
from memory_tools.operations import admin
from memory_tools.testing.web import Reply, WebServer

from .test_scrape_page_images import html, png


@dataclass(frozen=True)
class Caller:
    name: str
    key: str
    identity: str
    grant: str | None = None
    revoked: bool = False


async def _outcome(client: Client[Any], arguments: dict[str, Any]) -> tuple[str, Any]:
    result = await client.call_tool("scrape_page_images", arguments, raise_on_error=False)
    if result.is_error:
        message = result.content[0].text  # type: ignore[union-attr]
        return message.split(":", 1)[0], message
    return "ok", result.structured_content


async def _assets(services: MemoryServices) -> int:
    async with services.database.engine.connect() as conn:
        return (await conn.execute(text("SELECT count(*) FROM mem_assets"))).scalar_one()


async def test_every_caller_and_vault(
    scraper_services: MemoryServices,
    aggregate_client: Callable[[str], Client[Any]],
    make_key: Callable[..., Any],
    site: WebServer,
) -> None:
    database = scraper_services.database
    full = ("read", "write", "destructive")
    alice = await make_key("alice@example.com", full)
    alice_safe = await make_key("alice@example.com", ("read", "write"))
    bob = await make_key("bob@example.com", full)
    names = {"read": "reader", "write": "writer", "admin": "admin"}
    grantees = {p: await make_key(f"{names[p]}@example.com", full) for p in names}
    for permission in grantees:
        await admin.grant(
            database, "alice@example.com", "Library", f"{names[permission]}@example.com", permission
        )
    alice_old = await make_key("alice@example.com", full)
    async with database.unit_of_work() as uow:
        record = await uow.api_keys.resolve(alice_old)
    assert record is not None
    await admin.revoke_key(database, record.id)
    callers = [
        Caller("owner", alice, "alice"),
        Caller("other owner", bob, "bob"),
        *[Caller(f"shared {names[p]}", key, names[p], grant=p) for p, key in grantees.items()],
        Caller("no destructive", alice_safe, "alice"),
        Caller("revoked", alice_old, "alice", revoked=True),
    ]

    def expect(caller: Caller, owner: str | None) -> str:
        if caller.revoked:
            return "unauthenticated"
        if owner is None:  # no save: reading the web only
            return "ok"
        readable = caller.identity == owner or (owner == "alice" and caller.grant is not None)
        if not readable:
            return "not_found"
        if caller.identity != owner and caller.grant == "read":
            return "forbidden"
        return "ok"

    mismatches: list[str] = []
    cells = 0
    for serial, caller in enumerate(callers):
        for owner in (None, "alice", "bob"):
            cells += 1
            # A page with an image of its own per cell, so every allowed save stores new bytes.
            path = f"/page-{serial}-{owner}"
            site.routes[path] = html(f'<title>Cell</title><img src="/img{path}.png" alt="cell">')
            site.routes[f"/img{path}.png"] = png(20 + cells)
            arguments: dict[str, Any] = {"url": site.url(path, host="site.test")}
            if owner is not None:
                vault = "Library" if caller.identity == owner else f"{owner}@example.com/Library"
                arguments["save"] = {"vault": vault, "max": 1}
            before = await _assets(scraper_services)
            async with aggregate_client(caller.key) as client:
                kind, answer = await _outcome(client, arguments)
            after = await _assets(scraper_services)
            wanted = expect(caller, owner)
            if kind == "ok" and owner is not None and answer["saved"] != 1:
                kind = f"not saved: {answer['candidates'][0]['saveError']}"
            if kind != wanted:
                mismatches.append(f"{caller.name} / {owner}: {kind} != {wanted}")
            stored = after - before
            if stored != (1 if wanted == "ok" and owner is not None else 0):
                mismatches.append(f"{caller.name} / {owner}: stored {stored}")
            if wanted != "ok" and owner is not None and f"/img{path}.png" in site.requested:
                mismatches.append(f"{caller.name} / {owner}: fetched the image of a refused save")
    assert mismatches == []
    assert cells == 7 * 3
    # The missing vault answers like another owner's: nothing tells them apart.
    site.routes["/missing"] = Reply(
        body=b"<img src='/x.png'>", headers={"Content-Type": "text/html"}
    )
    async with aggregate_client(bob) as client:
        kind, _ = await _outcome(
            client,
            {
                "url": site.url("/missing", host="site.test"),
                "save": {"vault": "nobody@example.com/Library"},
            },
        )
    assert kind == "not_found"
