"""The isolation matrix (docs/design.md#tenancy): every tool x caller x target, allow or deny.

Callers: the owner, another owner, a shared reader, writer and admin, the owner's key without
the ``destructive`` scope, and a revoked key. Targets: the owner's asset (shared with the
grantees), the other owner's unshared asset, and the caller's own asset. A denied caller learns
nothing: an asset it cannot read answers ``not_found`` exactly like an id that never existed,
listing and search never return it, however similar the query.
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, replace
from typing import Any

import pytest
from fastmcp import Client
from mcp.client.subscriptions import listen
from mcp.shared.exceptions import MCPError

from memory_tools import MemoryServices, ToolFailure, build_memory_server
from memory_tools.mcp.registry import ToolRegistry
from memory_tools.mcp.tools import tools as memory_registry
from memory_tools.operations import admin
from memory_tools.serving.job_worker import job_worker
from memory_tools.workflows import sharing, trash, usage

from ..pictures import picture
from ..workflow_calls import run, run_outside

MISSING = "ast_" + "z" * 26

# The rows of the matrix, for every registered tool (``memory_tools.mcp.tools``): a tool is
# checked by the matrix tests below that name it. ``test_every_registered_tool_has_a_row``
# enumerates the registry, so a new tool without a row here fails, naming it.
#
# The asset matrix: each cell kind and the tool it calls, in the order the cells run. Deletes
# come last, as they change what the other cells see; restores after them (within the delete
# grace window) bring the deleted images back, for exactly the callers a delete allows.
ASSET_CELLS: dict[str, str] = {
    "get": "image_asset_get",
    "original": "image_asset_get",  # with the download link and a thumbnail
    "similar": "image_asset_search",  # by the asset's own image
    "list": "image_asset_list",
    "search": "image_asset_search",
    # The asset resources (memory_tools.mcp.resources) share these tools' checks: reading
    # image-memory://assets/{id}, listing resources, and following an asset's updates with
    # subscriptions/listen (2026-07-28) or resources/subscribe (a session revision).
    "resource": "image_asset_get",
    "resource list": "image_asset_list",
    "listen": "image_asset_get",
    "subscribe": "image_asset_get",
    "move": "image_asset_move",
    "update": "image_asset_update",
    "enrich": "image_asset_enrich",
    # The same tools with assetIds (memory_tools.workflows.bulk): the target beside an id that
    # never existed, each authorised alone; the target's item must answer as its single call,
    # and a target the caller may not read exactly as the missing id does.
    "bulk move": "image_asset_move",
    "bulk update": "image_asset_update",
    "bulk enrich": "image_asset_enrich",
    "delete": "image_asset_delete",
    "bulk delete": "image_asset_delete",
    "restore": "image_asset_restore",
    "bulk restore": "image_asset_restore",
}
BULK_CELLS = tuple(cell for cell in ASSET_CELLS if cell.startswith("bulk "))
# The cells that find the asset in a page of results: one that may not be read is "absent".
LISTING_CELLS = ("list", "search", "resource list")
# The vault matrix: each project, folder and save tool and the key scope it needs.
VAULT_NEEDS: dict[str, str] = {
    "image_project_list": "read",
    "image_folder_list": "read",
    "image_project_create": "write",
    "image_folder_create": "write",
    "image_asset_save": "write",
    "image_project_archive": "write",
    "image_folder_delete": "destructive",
    "image_project_update": "write",
    "image_folder_update": "write",
}
ROWS: dict[str, frozenset[str]] = {
    "test_every_tool_caller_and_target": frozenset(ASSET_CELLS.values()),
    "test_every_vault_tool_caller_and_target": frozenset(VAULT_NEEDS),
    "test_vault_list_and_waiting_for_every_caller": frozenset(
        {"image_vault_list", "image_asset_get"}
    ),
    "test_every_caller_saving_a_scraper_artifact": frozenset({"image_asset_save"}),
    # test_duplicates_isolation.py: listing and dismissing clusters, and get's nearDuplicates.
    "test_duplicates_for_every_caller": frozenset({"image_asset_duplicates", "image_asset_get"}),
    # test_project_scope_isolation.py: a projectId (and folderId) without its vault.
    "test_a_project_without_its_vault_for_every_caller": frozenset(
        {"image_asset_list", "image_asset_search"}
    ),
}


def rowless(registry: ToolRegistry) -> list[str]:
    """The registered tools no matrix test has a row for, in declaration order."""
    covered = set[str]().union(*ROWS.values())
    return [spec.name for spec in registry.specs if spec.name not in covered]


def test_every_registered_tool_has_a_row() -> None:
    missing = rowless(memory_registry)
    assert not missing, (
        f"no row in the isolation matrix for {', '.join(missing)}: add its cells to "
        "ASSET_CELLS or VAULT_NEEDS (or a matrix test of its own, named in ROWS)"
    )
    # And no row outlives its tool: every row names a registered tool.
    registered = {spec.name for spec in memory_registry.specs}
    stale = {name for names in ROWS.values() for name in names} - registered
    assert not stale, f"rows for tools that are not registered: {sorted(stale)}"


def test_a_tool_without_a_row_is_named() -> None:
    registry = ToolRegistry()

    async def image_asset_get() -> None:
        """Has its rows."""

    async def image_asset_frobnicate() -> None:
        """A new tool nobody gave a row."""

    registry.tool("Get", read_only=True, idempotent=True)(image_asset_get)
    registry.tool("Frobnicate", read_only=False, idempotent=False)(image_asset_frobnicate)
    assert rowless(registry) == ["image_asset_frobnicate"]


@dataclass
class Caller:
    name: str
    key: str
    identity: str
    scopes: frozenset[str]
    grant: str | None = None  # permission on alice's Library
    revoked: bool = False


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def _outcome(client: Client[Any], tool: str, arguments: dict[str, Any]) -> tuple[str, Any]:
    result = await client.call_tool(tool, arguments, raise_on_error=False)
    if result.is_error:
        message = result.content[0].text  # type: ignore[union-attr]
        return message.split(":", 1)[0], message
    return "ok", result.structured_content


# resources/subscribe: deprecated by the SDK for 2026-07-28 only (the subscribe cell).
@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
async def test_every_tool_caller_and_target(
    saving: MemoryServices, make_person: Callable[..., Awaitable[Any]]
) -> None:
    database = saving.database
    full = ("read", "write", "destructive")
    alice = await make_person("alice@example.com", full)
    alice_safe = await make_person("alice@example.com", ("read", "write"))
    alice_old = await make_person("alice@example.com", full)
    bob = await make_person("bob@example.com", full)
    grantees = {
        permission: await make_person(f"{permission}er@example.com", full)
        for permission in ("read", "write", "admin")
    }
    names = {"read": "reader", "write": "writer", "admin": "admin"}
    for permission in grantees:
        await admin.grant(
            database, "alice@example.com", "Library", f"{permission}er@example.com", permission
        )

    # OCR on, so image_asset_enrich is offered (its jobs are queued, never run here).
    reading = replace(saving, settings=saving.settings.model_copy(update={"asset_ocr": "all"}))

    def client(key: str, cell: str | None = None) -> Client[Any]:
        server = build_memory_server(replace(reading, default_api_key=key))
        # resources/subscribe exists only in the session revisions.
        return Client(server, mode="legacy") if cell == "subscribe" else Client(server)

    async def save(key: str, seed: int, title: str) -> str:
        async with client(key) as c:
            kind, result = await _outcome(
                c, "image_asset_save", {"imageBase64": b64(picture(seed)), "title": title}
            )
        assert kind == "ok", result
        return result["assetId"]

    alice_asset = await save(alice.key, 1, "Lighthouse at dusk")
    bob_asset = await save(bob.key, 2, "Lighthouse at dawn")
    # The grantees' own assets (alice's and bob's own are the "alice" and "bob" targets).
    own = {
        f"shared {names[p]}": await save(person.key, 10 + i, f"Own {p} lighthouse")
        for i, (p, person) in enumerate(grantees.items())
    }
    await job_worker(saving, handlers={}).drain()
    await admin.revoke_key(database, alice_old.key_id)

    callers = [
        Caller("owner", alice.key, "alice", frozenset(full)),
        Caller("other owner", bob.key, "bob", frozenset(full)),
        *[
            Caller(f"shared {names[p]}", person.key, f"{p}er", frozenset(full), grant=p)
            for p, person in grantees.items()
        ],
        Caller("no destructive", alice_safe.key, "alice", frozenset(("read", "write"))),
        Caller("revoked", alice_old.key, "alice", frozenset(full), revoked=True),
    ]

    def readable(caller: Caller, target: str) -> bool:
        if target == "alice":
            return caller.identity == "alice" or caller.grant is not None
        if target == "bob":
            return caller.identity == "bob"
        return True  # own

    def writable(caller: Caller, target: str) -> bool:
        if target == "alice" and caller.grant is not None:
            return caller.grant in ("write", "admin")
        return readable(caller, target)

    read_only = {spec.name for spec in memory_registry.specs if spec.read_only}

    def expect(cell: str, caller: Caller, target: str) -> str:
        if caller.revoked:
            return "unauthenticated"
        if not readable(caller, target):
            return "absent" if cell in LISTING_CELLS else "not_found"
        if ASSET_CELLS[cell] in read_only:
            return "ok"
        if not writable(caller, target):
            return "forbidden"
        destructive = ("delete", "restore", "bulk delete", "bulk restore")
        if cell in destructive and "destructive" not in caller.scopes:
            return "forbidden"
        return "ok"

    def asset_of(caller: Caller, target: str) -> str | None:
        if target == "alice":
            return alice_asset
        if target == "bob":
            return bob_asset
        return own.get(caller.name)

    mismatches: list[str] = []
    checked = 0

    async def check(c: Client[Any], cell: str, caller: Caller) -> None:
        nonlocal checked
        for target in ("alice", "bob", "own"):
            asset = asset_of(caller, target)
            if asset is None:
                continue
            wanted = expect(cell, caller, target)
            got = await _run(c, cell, asset)
            checked += 1
            if got != wanted:
                mismatches.append(f"{cell} / {caller.name} / {target}: {got} != {wanted}")
            if wanted == "not_found":
                # Indistinguishable from an id that never existed.
                missing = await _run(c, cell, MISSING)
                if missing != "not_found":
                    mismatches.append(f"{cell} / {caller.name} / missing: {missing}")

    # One session per caller for the whole matrix: a server and its session per cell cost
    # most of this test's time, and no cell depends on a fresh session (every call is
    # authenticated on its own; the revoked key is revoked before any session opens). The
    # subscribe cell keeps sessions of its own, in the session revision, so the subscriptions
    # it leaves end with them. The cells still run in ASSET_CELLS order.
    async with AsyncExitStack() as sessions:
        opened = {
            caller.name: await sessions.enter_async_context(client(caller.key))
            for caller in callers
        }
        for cell in ASSET_CELLS:
            for caller in callers:
                if cell == "subscribe":
                    async with client(caller.key, cell) as legacy:
                        await check(legacy, cell, caller)
                else:
                    await check(opened[caller.name], cell, caller)
    assert mismatches == []
    # Every cell x (7 callers x 2 targets + 3 grantees x their own asset)
    assert checked == len(ASSET_CELLS) * (7 * 2 + 3), checked
    async with client(alice.key) as c:
        kind, restored = await _outcome(c, "image_asset_get", {"assetId": alice_asset})
    assert kind == "ok" and restored["status"] == "processing", restored


async def _run(client: Client[Any], cell: str, asset: str) -> str:
    """Run one cell of ``ASSET_CELLS``; ``ok``/``absent`` for list and search, else the
    outcome code."""
    tool = ASSET_CELLS[cell]
    if cell == "original":
        # A download link and a thumbnail: only for an image the caller may read.
        arguments = {"assetId": asset, "includeOriginal": True, "includeThumbnails": True}
        answer = await client.call_tool(tool, arguments, raise_on_error=False)
        if answer.is_error:
            return answer.content[0].text.split(":", 1)[0]  # type: ignore[union-attr]
        original = (answer.structured_content or {})["original"]
        images = [block for block in answer.content if block.type == "image"]
        if original["url"] is None or len(images) != 1:
            return "no download or thumbnail"
        return "ok"
    if cell in RESOURCE_CELLS:
        return await _resource_cell(client, cell, asset)
    if cell in BULK_CELLS:
        return await _bulk_cell(client, cell, asset)
    if cell in LISTING_CELLS:
        if cell == "list":
            kind, result = await _outcome(client, tool, {"limit": 100})
            items = result["items"] if kind == "ok" else []
        else:
            # "Lighthouse" is in every title (search returns only results with evidence) and
            # the pictures are alike: only the vaults the caller may read decide.
            kind, result = await _outcome(client, tool, {"query": "lighthouse", "limit": 30})
            items = result["results"] if kind == "ok" else []
        if kind != "ok":
            return kind
        return "ok" if asset in {item["assetId"] for item in items} else "absent"
    arguments: dict[str, Any] = {"assetId": asset}
    if cell == "update":
        arguments["tags"] = ["edited"]  # tags only: the titles the search cells look for stay
    kind, result = await _outcome(client, tool, arguments)
    if cell == "similar" and kind == "ok" and result["results"][0]["assetId"] != asset:
        return "wrong first result"
    return kind


RESOURCE_CELLS = ("resource", "resource list", "listen", "subscribe")
NEVER_EXISTED = {"code": "not_found", "message": "asset not found"}


async def _bulk_cell(client: Client[Any], cell: str, asset: str) -> str:
    """Run one bulk cell: ``assetIds`` [target, an id that never existed]; the target's code.

    The missing id's item must be the plain ``not_found`` whatever the target, and a target
    refused as ``not_found`` must be answered with exactly the same error: a foreign id among
    others tells nothing a single call would not.
    """
    tool = ASSET_CELLS[cell]
    ids = [asset] if asset == MISSING else [asset, MISSING]
    arguments: dict[str, Any] = {"assetIds": ids}
    if cell == "bulk update":
        arguments["addTags"] = ["edited"]
    kind, result = await _outcome(client, tool, arguments)
    if kind != "ok":
        return kind
    items = result["items"]
    if [item["assetId"] for item in items] != ids:
        return f"items out of order: {items}"
    if len(ids) == 2 and items[1] != {"assetId": MISSING, "ok": False, "error": NEVER_EXISTED}:
        return f"missing id answered {items[1]}"
    first = items[0]
    if first["ok"]:
        return "ok"
    if first["error"]["code"] == "not_found" and first["error"] != NEVER_EXISTED:
        return f"not_found that says more: {first['error']}"
    return first["error"]["code"]


async def _resource_cell(client: Client[Any], cell: str, asset: str) -> str:
    """Run one resource cell: ``ok``/``absent`` for the listing, else the outcome code."""
    uri = f"image-memory://assets/{asset}"
    try:
        if cell == "resource":
            read = await client.read_resource_mcp(uri)
            kinds = [type(content).__name__ for content in read.contents]
            if kinds != ["BlobResourceContents", "TextResourceContents"]:
                return f"no preview and metadata: {kinds}"
        elif cell == "resource list":
            listed = await client.list_resources_mcp()
            return "ok" if uri in {r.uri for r in listed.resources} else "absent"
        elif cell == "listen":
            async with listen(client.session, resource_subscriptions=[uri]):
                pass
        else:
            await client.session.subscribe_resource(uri)  # pyright: ignore[reportDeprecated]
    except MCPError as error:
        return error.error.message.split(":", 1)[0]
    return "ok"


async def test_every_vault_tool_caller_and_target(
    saving: MemoryServices, make_person: Callable[..., Awaitable[Any]]
) -> None:
    """The project, folder and save tools over the same callers, on alice's shared vault and
    bob's unshared one: another owner's vault is not found, a weak grant is forbidden."""
    database = saving.database
    full = ("read", "write", "destructive")
    alice = await make_person("alice@example.com", full)
    alice_safe = await make_person("alice@example.com", ("read", "write"))
    alice_old = await make_person("alice@example.com", full)
    bob = await make_person("bob@example.com", full)
    names = {"read": "reader", "write": "writer", "admin": "admin"}
    grantees = {p: await make_person(f"{names[p]}@example.com", full) for p in names}
    for permission in grantees:
        await admin.grant(
            database, "alice@example.com", "Library", f"{names[permission]}@example.com", permission
        )
    await admin.revoke_key(database, alice_old.key_id)

    # OCR on, so image_asset_enrich is offered (its jobs are queued, never run here).
    reading = replace(saving, settings=saving.settings.model_copy(update={"asset_ocr": "all"}))

    def client(key: str) -> Client[Any]:
        return Client(build_memory_server(replace(reading, default_api_key=key)))

    projects: dict[str, str] = {}
    for owner, person in (("alice", alice), ("bob", bob)):
        async with client(person.key) as c:
            kind, made = await _outcome(c, "image_project_create", {"name": "Base"})
            assert kind == "ok", made
            projects[owner] = made["projectId"]

    callers = [
        Caller("owner", alice.key, "alice", frozenset(full)),
        Caller("other owner", bob.key, "bob", frozenset(full)),
        *[
            Caller(f"shared {names[p]}", person.key, names[p], frozenset(full), grant=p)
            for p, person in grantees.items()
        ],
        Caller("no destructive", alice_safe.key, "alice", frozenset(("read", "write"))),
        Caller("revoked", alice_old.key, "alice", frozenset(full), revoked=True),
    ]
    needs = VAULT_NEEDS

    def handle(caller: Caller, owner: str) -> str:
        return "Library" if caller.identity == owner else f"{owner}@example.com/Library"

    def expect(tool: str, caller: Caller, owner: str) -> str:
        if caller.revoked:
            return "unauthenticated"
        if needs[tool] not in caller.scopes:
            # The key's scopes are checked before any vault is looked up: the same answer for
            # every vault, so it tells nothing about the target.
            return "forbidden"
        readable = caller.identity == owner or (owner == "alice" and caller.grant is not None)
        if not readable:
            return "not_found"
        need = needs[tool]
        if need == "read":
            return "ok"
        if need == "destructive" and "destructive" not in caller.scopes:
            return "forbidden"
        if caller.identity != owner and caller.grant == "read":
            return "forbidden"
        return "ok"

    mismatches: list[str] = []
    cells = 0
    serial = 0

    async def made_by(owner: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """A fresh project or folder per cell, made by its owner, so cells stay independent."""
        kind, made = await _outcome(owners[owner], tool, arguments)
        assert kind == "ok", made
        return made

    # One session per caller, and one per owner for the per-cell set-up, for the whole matrix
    # (as in test_every_tool_caller_and_target): every call is authenticated on its own.
    async with AsyncExitStack() as sessions:
        opened = {
            caller.name: await sessions.enter_async_context(client(caller.key))
            for caller in callers
        }
        owners = {
            owner: await sessions.enter_async_context(client(person.key))
            for owner, person in (("alice", alice), ("bob", bob))
        }
        for tool in needs:
            for caller in callers:
                for owner in ("alice", "bob"):
                    serial += 1
                    vault = handle(caller, owner)
                    project = projects[owner]
                    arguments: dict[str, Any] = {"vault": vault}
                    if tool == "image_project_create":
                        arguments["name"] = f"P{serial}"
                    elif tool == "image_folder_create":
                        arguments.update(projectId=project, name=f"F{serial}")
                    elif tool == "image_folder_list":
                        arguments["projectId"] = project
                    elif tool == "image_asset_save":
                        arguments["imageBase64"] = b64(picture(100 + serial))
                    elif tool == "image_project_archive":
                        made = await made_by(owner, "image_project_create", {"name": f"A{serial}"})
                        arguments["projectId"] = made["projectId"]
                    elif tool == "image_folder_delete":
                        made = await made_by(
                            owner,
                            "image_folder_create",
                            {"projectId": project, "name": f"D{serial}"},
                        )
                        arguments.update(projectId=project, folderId=made["folderId"])
                    elif tool == "image_project_update":
                        made = await made_by(owner, "image_project_create", {"name": f"U{serial}"})
                        arguments.update(projectId=made["projectId"], name=f"Renamed {serial}")
                    elif tool == "image_folder_update":
                        made = await made_by(
                            owner,
                            "image_folder_create",
                            {"projectId": project, "name": f"E{serial}"},
                        )
                        arguments.update(
                            projectId=project, folderId=made["folderId"], name=f"Renamed {serial}"
                        )
                    kind, result = await _outcome(opened[caller.name], tool, arguments)
                    cells += 1
                    wanted = expect(tool, caller, owner)
                    if kind != wanted:
                        mismatches.append(f"{tool} / {caller.name} / {owner}: {result} != {wanted}")
    assert mismatches == []
    assert cells == len(needs) * len(callers) * 2


async def test_vault_list_and_waiting_for_every_caller(
    saving: MemoryServices, make_person: Callable[..., Awaitable[Any]]
) -> None:
    """``image_vault_list`` shows each caller exactly the vaults it may read, with its
    permission, and a quota only on its own vaults; ``image_asset_get`` with ``waitSeconds``
    waits only on assets the caller may read (anything else is ``not_found`` at once)."""
    database = saving.database
    full = ("read", "write", "destructive")
    alice = await make_person("alice@example.com", full)
    alice_safe = await make_person("alice@example.com", ("read", "write"))
    alice_old = await make_person("alice@example.com", full)
    bob = await make_person("bob@example.com", full)
    names = {"read": "reader", "write": "writer", "admin": "admin"}
    grantees = {p: await make_person(f"{names[p]}@example.com", full) for p in names}
    for permission in grantees:
        await admin.grant(
            database, "alice@example.com", "Library", f"{names[permission]}@example.com", permission
        )
    await admin.create_vault(database, "bob@example.com", "Secret")
    await admin.revoke_key(database, alice_old.key_id)

    # OCR on, so image_asset_enrich is offered (its jobs are queued, never run here).
    reading = replace(saving, settings=saving.settings.model_copy(update={"asset_ocr": "all"}))

    def client(key: str) -> Client[Any]:
        return Client(build_memory_server(replace(reading, default_api_key=key)))

    assets: dict[str, str] = {}
    for owner, person, seed in (("alice", alice, 40), ("bob", bob, 41)):
        async with client(person.key) as c:
            kind, saved = await _outcome(c, "image_asset_save", {"imageBase64": b64(picture(seed))})
            assert kind == "ok", saved
            assets[owner] = saved["assetId"]
    await job_worker(saving).drain()

    callers = [
        Caller("owner", alice.key, "alice", frozenset(full)),
        Caller("other owner", bob.key, "bob", frozenset(full)),
        *[
            Caller(f"shared {names[p]}", person.key, names[p], frozenset(full), grant=p)
            for p, person in grantees.items()
        ],
        Caller("no destructive", alice_safe.key, "alice", frozenset(("read", "write"))),
        Caller("revoked", alice_old.key, "alice", frozenset(full), revoked=True),
    ]

    def expected_vaults(caller: Caller) -> list[tuple[str, str, bool]]:
        """(handle, permission, has quota) of every vault the caller should see."""
        if caller.identity == "alice":
            return [("Library", "owner", True)]
        if caller.identity == "bob":
            return [("Library", "owner", True), ("Secret", "owner", True)]
        assert caller.grant is not None
        own = [("Library", "owner", True)]
        return [*own, ("alice@example.com/Library", caller.grant, False)]

    mismatches: list[str] = []
    cells = 0
    for caller in callers:
        async with client(caller.key) as c:
            kind, listed = await _outcome(c, "image_vault_list", {})
            cells += 1
            if caller.revoked:
                if kind != "unauthenticated":
                    mismatches.append(f"vault_list / {caller.name}: {kind}")
            else:
                got = [
                    (v["vault"], v["permission"], v["quota"] is not None) for v in listed["vaults"]
                ]
                if got != expected_vaults(caller):
                    mismatches.append(f"vault_list / {caller.name}: {got}")
                for vault in listed["vaults"]:
                    quota = vault["quota"]
                    # Each owner's own counters: their one saved image, their quota.
                    if (
                        caller.identity in ("alice", "bob")
                        and quota is not None
                        and (quota["quotaBytes"] != 10**9 or quota["usedBytes"] <= 0)
                    ):
                        mismatches.append(f"vault_list / {caller.name}: {quota}")
                    # Only the caller's own numbers, never another owner's.
                    if quota is not None and vault["permission"] != "owner":
                        mismatches.append(f"vault_list / {caller.name}: quota of {vault}")
            for target in ("alice", "bob"):
                kind, got = await _outcome(
                    c, "image_asset_get", {"assetId": assets[target], "waitSeconds": 20}
                )
                cells += 1
                readable = (caller.identity == target) or (
                    target == "alice" and caller.grant is not None
                )
                wanted = "unauthenticated" if caller.revoked else "ok" if readable else "not_found"
                if kind != wanted:
                    mismatches.append(f"wait / {caller.name} / {target}: {kind} != {wanted}")
                elif kind == "ok" and got["embeddingStatus"] != "ready":
                    mismatches.append(f"wait / {caller.name} / {target}: {got}")
    assert mismatches == []
    assert cells == 7 * 3
    assert database.asset_states.waiters == 0 and not database.asset_states.listening


async def test_every_caller_saving_a_scraper_artifact(
    saving: MemoryServices, make_person: Callable[..., Awaitable[Any]]
) -> None:
    """``image_asset_save`` with ``artifactId``: an artifact is its owner's alone, whatever
    vault the save goes to. Another identity's artifact (a grantee of the owner's vault
    included) is ``not_found`` exactly like an id that never existed; the owner's artifact
    saved into a shared vault follows that vault's grant."""
    from memory_tools.access import Caller as Identity
    from memory_tools.workflows.artifacts import store_artifact

    database = saving.database
    full = ("read", "write", "destructive")
    alice = await make_person("alice@example.com", full)
    alice_safe = await make_person("alice@example.com", ("read", "write"))
    alice_old = await make_person("alice@example.com", full)
    bob = await make_person("bob@example.com", full)
    names = {"read": "reader", "write": "writer", "admin": "admin"}
    grantees = {p: await make_person(f"{names[p]}@example.com", full) for p in names}
    for permission in grantees:
        await admin.grant(
            database, "alice@example.com", "Library", f"{names[permission]}@example.com", permission
        )
    await admin.revoke_key(database, alice_old.key_id)
    callers = [
        Caller("owner", alice.key, "alice", frozenset(full)),
        Caller("other owner", bob.key, "bob", frozenset(full)),
        *[
            Caller(f"shared {names[p]}", person.key, names[p], frozenset(full), grant=p)
            for p, person in grantees.items()
        ],
        Caller("no destructive", alice_safe.key, "alice", frozenset(("read", "write"))),
        Caller("revoked", alice_old.key, "alice", frozenset(full), revoked=True),
    ]
    seed = 200

    async def artifact_of(identity: str) -> str:
        nonlocal seed
        seed += 1
        owner = Identity(f"{identity}@example.com", "akey_test", frozenset(full))
        stored = await store_artifact(
            saving, owner, picture(seed), source_kind="scrape", source_ref={}
        )
        return stored.artifact_id

    # OCR on, so image_asset_enrich is offered (its jobs are queued, never run here).
    reading = replace(saving, settings=saving.settings.model_copy(update={"asset_ocr": "all"}))

    def client(key: str) -> Client[Any]:
        return Client(build_memory_server(replace(reading, default_api_key=key)))

    def expect(caller: Caller, artifact_owner: str, vault_owner: str) -> str:
        if caller.revoked:
            return "unauthenticated"
        if artifact_owner != caller.identity:
            return "not_found"  # checked first, before any byte or vault
        if vault_owner == caller.identity:
            return "ok"
        if vault_owner == "alice" and caller.grant in ("write", "admin"):
            return "ok"
        return "forbidden" if vault_owner == "alice" and caller.grant == "read" else "not_found"

    mismatches: list[str] = []
    cells = 0
    for caller in callers:
        async with client(caller.key) as c:
            for artifact_owner in ("alice", caller.identity):
                for vault_owner in ("alice", "bob", caller.identity):
                    artifact_id = await artifact_of(artifact_owner)
                    vault = (
                        "Library"
                        if vault_owner == caller.identity
                        else f"{vault_owner}@example.com/Library"
                    )
                    kind, result = await _outcome(
                        c, "image_asset_save", {"artifactId": artifact_id, "vault": vault}
                    )
                    cells += 1
                    wanted = expect(caller, artifact_owner, vault_owner)
                    if kind != wanted:
                        mismatches.append(
                            f"save artifact of {artifact_owner} into {vault_owner} / "
                            f"{caller.name}: {result} != {wanted}"
                        )
            if not caller.revoked:
                kind, result = await _outcome(
                    c, "image_asset_save", {"artifactId": "art_" + "z" * 26}
                )
                if kind != "not_found":
                    mismatches.append(f"save missing artifact / {caller.name}: {result}")
    assert mismatches == []
    assert cells == 7 * 2 * 3


async def test_trash_sharing_and_usage_for_every_caller(
    saving: MemoryServices, make_person: Callable[..., Awaitable[Any]]
) -> None:
    """The web app's own workflows: the trash (list, purge), sharing (list, grant, revoke) and
    usage, for every caller against alice's deleted image and Library and bob's. What a caller
    may not see answers ``not_found`` like what does not exist; a read grantee sees nothing in
    the trash; only the owner manages grants; usage is always the caller's own."""
    database = saving.database
    full = ("read", "write", "destructive")
    alice = await make_person("alice@example.com", full)
    alice_safe = await make_person("alice@example.com", ("read", "write"))
    alice_old = await make_person("alice@example.com", full)
    bob = await make_person("bob@example.com", full)
    names = {"read": "reader", "write": "writer", "admin": "admin"}
    grantees = {p: await make_person(f"{names[p]}@example.com", full) for p in names}
    for permission in grantees:
        await admin.grant(
            database, "alice@example.com", "Library", f"{names[permission]}@example.com", permission
        )
    await admin.revoke_key(database, alice_old.key_id)
    deleted: dict[str, str] = {}
    for owner, person, seed in (("alice", alice, 50), ("bob", bob, 51)):
        async with Client(build_memory_server(replace(saving, default_api_key=person.key))) as c:
            kind, saved = await _outcome(c, "image_asset_save", {"imageBase64": b64(picture(seed))})
            assert kind == "ok", saved
            kind, _ = await _outcome(c, "image_asset_delete", {"assetId": saved["assetId"]})
            assert kind == "ok"
            deleted[owner] = saved["assetId"]
    callers = [
        Caller("owner", alice.key, "alice", frozenset(full)),
        Caller("other owner", bob.key, "bob", frozenset(full)),
        *[
            Caller(f"shared {names[p]}", person.key, names[p], frozenset(full), grant=p)
            for p, person in grantees.items()
        ],
        Caller("no destructive", alice_safe.key, "alice", frozenset(("read", "write"))),
        Caller("revoked", alice_old.key, "alice", frozenset(full), revoked=True),
    ]

    async def outcome(call: Awaitable[Any]) -> tuple[str, Any]:
        try:
            return "ok", await call
        except ToolFailure as failure:
            return failure.code, failure.message

    mismatches: list[str] = []
    for caller in callers:
        own = caller.identity == "alice"
        # Trash: alice's deleted image is listed to whoever could restore it.
        kind, page = await outcome(run(saving, caller.key, trash.list_trash))
        listed = {item.asset_id for item in page.items} if kind == "ok" else set()
        sees = own or caller.grant in ("write", "admin")
        wanted = "unauthenticated" if caller.revoked else "ok"
        if kind != wanted or (deleted["alice"] in listed) != (sees and not caller.revoked):
            mismatches.append(f"trash / {caller.name}: {kind} {listed}")
        if (caller.identity != "bob") and deleted["bob"] in listed:
            mismatches.append(f"trash / {caller.name}: lists bob's image")
        # Sharing alice's Library: only alice; others see forbidden (shared) or not_found.
        handle = "alice@example.com/Library"
        grant = sharing.grant_access
        kind, _ = await outcome(
            run(
                saving,
                caller.key,
                grant,
                vault=handle,
                grantee="bob@example.com",
                permission="read",
            )
        )
        if caller.revoked:
            wanted = "unauthenticated"
        elif own:
            wanted = "ok"
        elif caller.grant is not None:
            wanted = "forbidden"
        else:
            wanted = "not_found"
        if kind != wanted:
            mismatches.append(f"grant / {caller.name}: {kind} != {wanted}")
        kind, _ = await outcome(
            run(saving, caller.key, sharing.revoke_access, vault=handle, grantee="bob@example.com")
        )
        if kind != wanted:
            mismatches.append(f"revoke / {caller.name}: {kind} != {wanted}")
        # Usage: always the caller's own numbers.
        kind, mine = await outcome(run(saving, caller.key, usage.my_usage))
        if caller.revoked:
            if kind != "unauthenticated":
                mismatches.append(f"usage / {caller.name}: {kind}")
        elif kind != "ok" or (mine.used_bytes > 0) != (caller.identity in ("alice", "bob")):
            mismatches.append(f"usage / {caller.name}: {kind} {mine}")
    # Purge, last (it changes the trash): bob's image is never anyone else's to purge.
    for caller in callers:
        kind, _ = await outcome(
            run_outside(saving, caller.key, trash.purge_asset, asset_id=deleted["bob"])
        )
        if caller.identity != "bob":
            wanted = "unauthenticated" if caller.revoked else "not_found"
            if kind != wanted:
                mismatches.append(f"purge bob's / {caller.name}: {kind} != {wanted}")
    # Alice's: refused to all but the owner and an admin grantee (who purges it first).
    purge_wanted = {
        "other owner": "not_found",
        "shared reader": "forbidden",
        "shared writer": "forbidden",
        "no destructive": "forbidden",
        "revoked": "unauthenticated",
        "shared admin": "ok",
        "owner": "not_found",  # no longer in the trash
    }
    by_name = {caller.name: caller for caller in callers}
    for name, wanted in purge_wanted.items():
        kind, _ = await outcome(
            run_outside(saving, by_name[name].key, trash.purge_asset, asset_id=deleted["alice"])
        )
        if kind != wanted:
            mismatches.append(f"purge alice's / {name}: {kind} != {wanted}")
    assert mismatches == []
