"""The isolation matrix's rows for a project named without its vault: ``image_asset_list`` and
``image_asset_search`` with ``projectId`` (and ``folderId``) but no ``vault``, for every caller
and both owners' projects.

A project id is unique, so it names its vault: a caller who may read that vault gets the
project's images (and only those); any other caller gets ``not_found`` in exactly the words an
id that never existed gets, so another owner's project id tells nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from fastmcp import Client

from memory_tools import MemoryServices, build_memory_server
from memory_tools.operations import admin
from memory_tools.serving.job_worker import job_worker

from ..pictures import picture
from .test_isolation_matrix import Caller, _outcome, b64

MISSING_PROJECT = "apr_" + "z" * 26
MISSING_FOLDER = "afl_" + "z" * 26
CELLS = ("list project", "list folder", "search project", "search folder")


def _arguments(cell: str, project: str, folder: str) -> tuple[str, dict[str, Any]]:
    tool = "image_asset_list" if cell.startswith("list") else "image_asset_search"
    arguments: dict[str, Any] = {"projectId": project}
    if cell.endswith("folder"):
        arguments["folderId"] = folder
    if tool == "image_asset_search":
        # Every title says "lighthouse": only the project decides what is found.
        arguments.update(query="lighthouse", limit=30)
    return tool, arguments


async def _found(client: Client[Any], cell: str, project: str, folder: str) -> tuple[str, Any]:
    """The cell's code and, when ok, the ids it answered (else the refusal's words)."""
    tool, arguments = _arguments(cell, project, folder)
    kind, result = await _outcome(client, tool, arguments)
    if kind != "ok":
        return kind, result
    items = result["items"] if tool == "image_asset_list" else result["results"]
    return "ok", sorted(item["assetId"] for item in items)


async def test_a_project_without_its_vault_for_every_caller(
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

    # Each owner: a project with a folder, an image in the folder, one in the project beside
    # it, and one unfiled (never in the answers).
    places: dict[str, tuple[str, str]] = {}
    inside: dict[str, dict[str, list[str]]] = {}
    seed = 0
    for owner, person in (("alice", alice), ("bob", bob)):
        async with client(person.key) as c:
            kind, project = await _outcome(c, "image_project_create", {"name": "Coast"})
            assert kind == "ok", project
            project_id = project["projectId"]
            kind, folder = await _outcome(
                c, "image_folder_create", {"projectId": project_id, "name": "North"}
            )
            assert kind == "ok", folder
            places[owner] = (project_id, folder["folderId"])
            saved: dict[str, str] = {}
            for where, placement in (
                ("folder", {"projectId": project_id, "folderId": folder["folderId"]}),
                ("project", {"projectId": project_id}),
                ("unfiled", {}),
            ):
                seed += 1
                kind, asset = await _outcome(
                    c,
                    "image_asset_save",
                    {
                        "imageBase64": b64(picture(seed)),
                        "title": f"{owner} lighthouse {where}",
                        "vault": "Library",
                        **placement,
                    },
                )
                assert kind == "ok", asset
                saved[where] = asset["assetId"]
            inside[owner] = {
                "project": sorted((saved["folder"], saved["project"])),
                "folder": [saved["folder"]],
            }
    await job_worker(saving, handlers={}).drain()  # searchable
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

    def readable(caller: Caller, owner: str) -> bool:
        return caller.identity == owner or (owner == "alice" and caller.grant is not None)

    mismatches: list[str] = []
    cells = 0
    for caller in callers:
        async with client(caller.key) as c:
            for cell in CELLS:
                for owner in ("alice", "bob"):
                    project, folder = places[owner]
                    got = await _found(c, cell, project, folder)
                    cells += 1
                    if caller.revoked:
                        wanted: tuple[str, Any] = ("unauthenticated", got[1])
                    elif readable(caller, owner):
                        wanted = ("ok", inside[owner][cell.split()[1]])
                    else:
                        # Exactly what a project id that never existed gets, word for word.
                        wanted = await _found(c, cell, MISSING_PROJECT, MISSING_FOLDER)
                        if wanted[0] != "not_found":
                            mismatches.append(f"{cell} / {caller.name} / missing: {wanted}")
                    if got != wanted:
                        mismatches.append(f"{cell} / {caller.name} / {owner}: {got} != {wanted}")
    assert mismatches == []
    assert cells == len(callers) * len(CELLS) * 2
