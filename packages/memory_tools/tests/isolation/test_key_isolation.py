"""The isolation matrix for keys (docs/design.md#tenancy): every key action x caller x target.

Callers: the owner, another owner, a shared reader, writer and admin of the owner's Library,
the owner's key without ``destructive``, the owner's read-only key, a paused key and a revoked
key. Targets: an agent key of the owner (which saved an asset into the shared Library) and the
other owner's key. Only the owner's keys with ``write`` switch the owner's keys; everyone
else gets ``not_found`` (exactly like a key id that does not exist) and nothing changes. The
``savedBy`` filter narrows only what a caller may read anyway: the other owner, filtering by the
owner's key id, learns nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from fastmcp import Client

from memory_tools import MemoryServices, ToolFailure, build_memory_server
from memory_tools.operations import admin
from memory_tools.workflows import keys

from ..pictures import b64, picture
from ..workflow_calls import run

MISSING_KEY = "akey_" + "z" * 26


@dataclass
class Caller:
    name: str
    key: str
    identity: str
    reads_library: bool  # may read alice's Library (her own key or a grant)
    manages: bool  # may switch alice's keys (her own key with write)
    refused: bool = False  # paused or revoked: unauthenticated for everything


async def _outcome(call: Awaitable[Any]) -> tuple[str, Any]:
    try:
        return "ok", await call
    except ToolFailure as failure:
        return failure.code, failure.message


async def test_every_key_action_caller_and_target(
    saving: MemoryServices, make_person: Callable[..., Awaitable[Any]]
) -> None:
    database = saving.database
    full = ("read", "write", "destructive")
    alice = await make_person("alice@example.com", full)
    agent = await make_person("alice@example.com", ("read", "write"))
    alice_safe = await make_person("alice@example.com", ("read", "write"))
    alice_reader = await make_person("alice@example.com", ("read",))
    alice_paused = await make_person("alice@example.com", full)
    alice_old = await make_person("alice@example.com", full)
    bob = await make_person("bob@example.com", full)
    grantees = {
        p: await make_person(f"{p}-grantee@example.com", full) for p in ("read", "write", "admin")
    }
    for permission, person in grantees.items():
        await admin.grant(database, "alice@example.com", "Library", person.email, permission)
    await admin.set_key_paused(database, alice_paused.key_id, True)
    await admin.revoke_key(database, alice_old.key_id)
    async with Client(build_memory_server(replace(saving, default_api_key=agent.key))) as client:
        saved = (
            await client.call_tool("image_asset_save", {"imageBase64": b64(picture(70))})
        ).structured_content
    assert saved is not None
    callers = [
        Caller("owner", alice.key, "alice", True, True),
        Caller("no destructive", alice_safe.key, "alice", True, True),
        Caller("read-only key", alice_reader.key, "alice", True, False),
        Caller("other owner", bob.key, "bob", False, False),
        *[
            Caller(f"shared {p}", person.key, f"{p}-grantee", True, False)
            for p, person in grantees.items()
        ],
        Caller("paused", alice_paused.key, "alice", False, False, refused=True),
        Caller("revoked", alice_old.key, "alice", False, False, refused=True),
    ]

    mismatches: list[str] = []
    for caller in callers:
        # Listing: a caller sees its own identity's keys only.
        kind, listed = await _outcome(run(saving, caller.key, keys.list_keys))
        if caller.refused:
            if kind != "unauthenticated":
                mismatches.append(f"list / {caller.name}: {kind}")
        else:
            seen = {k.key_id for k in listed.keys} if kind == "ok" else set()
            if kind != "ok" or (agent.key_id in seen) != (caller.identity == "alice"):
                mismatches.append(f"list / {caller.name}: {kind} {sorted(seen)}")
            if caller.identity != "bob" and bob.key_id in seen:
                mismatches.append(f"list / {caller.name}: sees bob's key")
        # Pause then resume alice's agent key; bob's key and a missing id are never found.
        for target, change in (
            (agent.key_id, "pause"),
            (agent.key_id, "resume"),
            (bob.key_id, "pause"),
            (MISSING_KEY, "revoke"),
        ):
            kind, _ = await _outcome(
                run(saving, caller.key, keys.change_own_key, key_id=target, change=change)
            )
            if caller.refused:
                wanted = "unauthenticated"
            elif caller.name == "read-only key":
                wanted = "forbidden"  # lacks write, whatever the target
            elif target == agent.key_id and caller.manages:
                wanted = "ok"
            elif target == bob.key_id and caller.identity == "bob":
                wanted = "forbidden"  # the very key bob calls with: never switched off by itself
            else:
                wanted = "not_found"
            if kind != wanted:
                mismatches.append(f"{change} {target[:9]} / {caller.name}: {kind} != {wanted}")
        # savedBy narrows only what the caller may read: bob learns nothing of alice's saves.
        async with Client(
            build_memory_server(replace(saving, default_api_key=caller.key))
        ) as client:
            result = await client.call_tool(
                "image_asset_list", {"savedBy": agent.key_id}, raise_on_error=False
            )
        if caller.refused:
            if not result.is_error:
                mismatches.append(f"savedBy / {caller.name}: answered")
            continue
        items = [i["assetId"] for i in (result.structured_content or {}).get("items", [])]
        if items != ([saved["assetId"]] if caller.reads_library else []):
            mismatches.append(f"savedBy / {caller.name}: {items}")
    assert mismatches == []
    (agent_now,) = [
        k for k in await admin.list_keys(database, "alice@example.com") if k.id == agent.key_id
    ]
    assert agent_now.state == "active"
