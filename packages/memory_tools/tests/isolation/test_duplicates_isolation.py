"""The isolation matrix's rows for near-duplicates: ``image_asset_duplicates`` (list and dismiss)
and ``nearDuplicates`` in ``image_asset_get``, for every caller and both owners' vaults.

Alice and bob each keep the same photo twice (a PNG and a JPEG re-encode) in their Library, so
each vault has one cluster and every asset a near-duplicate: a caller sees a cluster or a
near-duplicate only of a vault it may read, never one across owners.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from fastmcp import Client
from sqlalchemy import text

from memory_db.unit_of_work import session_of
from memory_tools import MemoryServices, build_memory_server
from memory_tools.operations import admin
from memory_tools.serving.job_worker import job_worker

from ..duplicates.photos import b64, photo
from .test_isolation_matrix import Caller, _outcome


async def test_duplicates_for_every_caller(
    saving: MemoryServices, make_person: Callable[..., Awaitable[Any]]
) -> None:
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

    def client(key: str) -> Client[Any]:
        return Client(build_memory_server(replace(saving, default_api_key=key)))

    assets: dict[str, tuple[str, str]] = {}
    for owner, person in (("alice", alice), ("bob", bob)):
        async with client(person.key) as c:
            pair: list[str] = []
            for data in (photo("chelsea"), photo("chelsea", ".jpg", Q=60)):
                kind, saved = await _outcome(
                    c, "image_asset_save", {"imageBase64": b64(data), "title": f"{owner} cat"}
                )
                assert kind == "ok", saved
                pair.append(saved["assetId"])
            assets[owner] = (pair[0], pair[1])
    await job_worker(saving, handlers={}).drain()
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

    def handle(caller: Caller, owner: str) -> str:
        return "Library" if caller.identity == owner else f"{owner}@example.com/Library"

    def expect(cell: str, caller: Caller, owner: str) -> str:
        if caller.revoked:
            return "unauthenticated"
        readable = caller.identity == owner or (owner == "alice" and caller.grant is not None)
        if not readable:
            return "not_found"
        if cell == "dismiss" and caller.identity != owner and caller.grant == "read":
            return "forbidden"
        return "ok"

    mismatches: list[str] = []
    cells = 0
    for cell in ("get", "list", "dismiss"):
        for caller in callers:
            async with client(caller.key) as c:
                for owner in ("alice", "bob"):
                    first, second = assets[owner]
                    wanted = expect(cell, caller, owner)
                    if cell == "get":
                        kind, got = await _outcome(c, "image_asset_get", {"assetId": first})
                        if kind == "ok":
                            near = [n["assetId"] for n in got["nearDuplicates"]]
                            if near != [second]:
                                kind = f"nearDuplicates {near}"
                    else:
                        arguments: dict[str, Any] = {"vault": handle(caller, owner)}
                        if cell == "dismiss":
                            # Another vault's ids, then this vault's own, in one cluster: only
                            # this vault's pair can change, and only for a writer.
                            other = assets["bob" if owner == "alice" else "alice"]
                            arguments["dismiss"] = [*other, first, second]
                        kind, got = await _outcome(c, "image_asset_duplicates", arguments)
                        if kind == "ok":
                            listed = [
                                [a["assetId"] for a in cluster["assets"]]
                                for cluster in got["clusters"]
                            ]
                            wanted_list = [] if cell == "dismiss" else [[second, first]]
                            if listed != wanted_list:
                                kind = f"clusters {listed}"
                            elif cell == "dismiss" and got["dismissed"] != 1:
                                kind = f"dismissed {got['dismissed']}"
                            if cell == "dismiss":
                                await _reopen(saving)
                    cells += 1
                    if kind != wanted:
                        mismatches.append(f"{cell} / {caller.name} / {owner}: {kind} != {wanted}")
    assert mismatches == []
    assert cells == 3 * 7 * 2


async def _reopen(services: MemoryServices) -> None:
    """Undo a dismissal between cells, so each cell meets the same open pairs."""
    async with services.database.unit_of_work() as uow:
        await session_of(uow).execute(
            text(
                "UPDATE mem_asset_near_duplicates SET decision = 'open', decided_by = NULL, "
                "decided_at = NULL"
            )
        )
