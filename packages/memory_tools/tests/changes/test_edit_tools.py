"""Editing: image_asset_update, image_project_update, image_folder_update."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import anyio
import pytest
from fastmcp import Client
from sqlalchemy import text

from memory_db import Database, FolderTreeError, NotFound
from memory_db.embedding import EmbedResult, EmbedValue, Task
from memory_db.embedding.types import Embedder
from memory_tools import MemoryServices
from memory_tools.access import authenticate
from memory_tools.operations import admin
from memory_tools.serving.job_worker import job_worker
from memory_tools.workflows import changes

from ..pictures import b64, picture
from ..tool_calls import call as _call
from ..tool_calls import error as _error


async def _rows(services: MemoryServices, sql: str, **params: Any) -> list[Any]:
    async with services.database.engine.connect() as conn:
        return list((await conn.execute(text(sql), params)).all())


async def _fused_vectors(services: MemoryServices, asset_id: str) -> int:
    return (await _vectors(services, asset_id)).get("fused", 0)


async def _vectors(services: MemoryServices, asset_id: str) -> dict[str, int]:
    """The asset's vectors per representation."""
    index = (await _rows(services, "SELECT index_name FROM mem_vector_index_aliases LIMIT 1"))[0][0]
    rows = await _rows(
        services,
        f"SELECT representation, count(*) FROM {index} WHERE asset_id = :a GROUP BY 1",
        a=asset_id,
    )
    return {r[0]: int(r[1]) for r in rows}


async def _jobs(services: MemoryServices, asset_id: str) -> list[tuple[str, str]]:
    rows = await _rows(
        services,
        "SELECT representation, status FROM mem_asset_embedding_jobs WHERE asset_id = :a "
        "ORDER BY created_at, representation",
        a=asset_id,
    )
    return [(r[0], r[1]) for r in rows]


async def _provenance(services: MemoryServices, operation: str) -> list[dict[str, Any]]:
    rows = await _rows(
        services,
        "SELECT detail FROM mem_provenance WHERE operation = :o AND outcome = 'succeeded' "
        "ORDER BY created_at",
        o=operation,
    )
    return [r[0] for r in rows]


def _found(answer: dict[str, Any]) -> list[str]:
    return [r["assetId"] for r in answer["results"]]


# --- image_asset_update ----------------------------------------------------------------------


async def test_edit_sets_words_requeues_only_fused_and_full_text_follows(
    client_as: Callable[[str], Client[Any]], alice: Any, saving: MemoryServices
) -> None:
    async with client_as(alice.key) as client:
        saved = await _call(
            client,
            "image_asset_save",
            {"imageBase64": b64(picture(1)), "title": "Harbour dawn", "tags": ["sea"]},
        )
        asset = saved["assetId"]
        await job_worker(saving).drain()
        before = await _call(client, "image_asset_search", {"query": "harbour"})
        edited = await _call(
            client,
            "image_asset_update",
            {
                "assetId": asset,
                "title": "  Zeppelin   over meadow ",
                "description": "A silver airship",
                "tags": ["Sky", "sky", " Air  Ship "],
            },
        )
        jobs_after_edit = await _jobs(saving, asset)
        vectors_after_edit = await _vectors(saving, asset)
        by_new = await _call(client, "image_asset_search", {"query": "zeppelin"})
        by_old = await _call(client, "image_asset_search", {"query": "harbour"})
        await job_worker(saving).drain()
        got = await _call(client, "image_asset_get", {"assetId": asset})
    assert _found(before) == [asset]
    assert edited["changed"] == ["title", "description", "tags"]
    assert edited["title"] == "Zeppelin   over meadow"
    assert edited["description"] == "A silver airship"
    assert edited["tags"] == ["sky", "air ship"]
    assert edited["embeddingStatus"] == "pending"
    states = {r["representation"]: r["status"] for r in edited["representations"]}
    assert states == {"visual": "done", "fused": "queued"}
    # The visual job is the save's, untouched; the fused one of the old text is superseded.
    assert jobs_after_edit == [
        ("fused", "cancelled"),
        ("visual", "done"),
        ("fused", "queued"),
    ]
    # The vector of the old words is gone with them; the visual one stays.
    assert vectors_after_edit == {"visual": 1}
    assert _found(by_new) == [asset]
    assert asset not in _found(by_old)
    assert got["embeddingStatus"] == "ready"
    assert await _fused_vectors(saving, asset) == 1
    assert await _provenance(saving, "asset_update") == [
        {"changed": ["title", "description", "tags"], "fusedRequeued": True}
    ]


async def test_an_edit_that_changes_nothing_writes_nothing(
    client_as: Callable[[str], Client[Any]], alice: Any, saving: MemoryServices
) -> None:
    async with client_as(alice.key) as client:
        saved = await _call(
            client,
            "image_asset_save",
            {"imageBase64": b64(picture(2)), "title": "Harbour", "tags": ["sea"]},
        )
        asset = saved["assetId"]
        await job_worker(saving).drain()
        first = await _call(client, "image_asset_get", {"assetId": asset})
        same = await _call(
            client, "image_asset_update", {"assetId": asset, "title": "Harbour", "tags": ["SEA"]}
        )
        nothing = await _call(client, "image_asset_update", {"assetId": asset})
        tags_only = await _call(client, "image_asset_update", {"assetId": asset, "tags": []})
    assert same["changed"] == [] and nothing["changed"] == []
    assert same["updatedAt"] == first["updatedAt"]
    # Tags are not part of the fused text: clearing them queues nothing.
    assert tags_only["changed"] == ["tags"] and tags_only["tags"] == []
    assert tags_only["embeddingStatus"] == "ready"
    assert await _jobs(saving, asset) == [("fused", "done"), ("visual", "done")]
    assert await _provenance(saving, "asset_update") == [
        {"changed": ["tags"], "fusedRequeued": False}
    ]


async def test_clearing_the_fused_words_drops_the_fused_vector_and_adding_them_charges_one(
    client_as: Callable[[str], Client[Any]], alice: Any, saving: MemoryServices
) -> None:
    async with client_as(alice.key) as client:
        untitled = await _call(client, "image_asset_save", {"imageBase64": b64(picture(3))})
        described = await _call(
            client, "image_asset_save", {"imageBase64": b64(picture(4)), "description": "Dunes"}
        )
        await job_worker(saving).drain()
        used = await _used(saving)
        # Words for an image that had none: its first fused vector, charged like a save's.
        added = await _call(
            client, "image_asset_update", {"assetId": untitled["assetId"], "altText": "A fox"}
        )
        used_after_add = await _used(saving)
        cleared = await _call(
            client, "image_asset_update", {"assetId": described["assetId"], "description": ""}
        )
        await job_worker(saving).drain()
        got = await _call(client, "image_asset_get", {"assetId": untitled["assetId"]})
    assert len(untitled["jobIds"]) == 1  # visual only: no words, no fused vector
    assert added["changed"] == ["altText"] and added["fusedNote"] is None
    assert used_after_add > used
    assert cleared["description"] is None
    assert cleared["embeddingStatus"] == "ready"
    assert cleared["fusedNote"] is not None and cleared["fusedNote"].startswith("skipped")
    assert await _fused_vectors(saving, described["assetId"]) == 0
    assert await _used(saving) == used_after_add  # a cleared vector is refunded on delete
    assert got["embeddingStatus"] == "ready"
    assert await _fused_vectors(saving, untitled["assetId"]) == 1


async def _used(services: MemoryServices) -> int:
    rows = await _rows(
        services,
        "SELECT used_bytes FROM mem_asset_namespaces WHERE owner_identity = 'alice@example.com'",
    )
    return int(rows[0][0])


async def test_bad_edits_are_refused_and_change_nothing(
    client_as: Callable[[str], Client[Any]],
    alice: Any,
    bob: Any,
    make_person: Any,
    saving: MemoryServices,
) -> None:
    reader = await make_person("reader@example.com", scopes=("read", "write"))
    await admin.grant(saving.database, "alice@example.com", "Library", "reader@example.com", "read")
    readonly_key = await make_person("alice@example.com", scopes=("read",))
    async with client_as(alice.key) as client:
        saved = await _call(
            client,
            "image_asset_save",
            {"imageBase64": b64(picture(5)), "title": "Harbour", "tags": ["sea"]},
        )
        gone = await _call(client, "image_asset_save", {"imageBase64": b64(picture(6))})
        await _call(client, "image_asset_delete", {"assetId": gone["assetId"]})
        asset = saved["assetId"]
        before = await _call(client, "image_asset_get", {"assetId": asset})
        cases: dict[str, tuple[dict[str, Any], str]] = {
            "empty title": ({"title": "   "}, "invalid_input: title: cannot be empty"),
            "NUL title": ({"title": "a\x00b"}, "invalid_input: title: must not contain a NUL"),
            "surrogate description": (
                {"description": "x\ud800"},
                "invalid_input: description: must be valid Unicode",
            ),
            "NUL alt text": ({"altText": "\x00"}, "invalid_input: altText: must not contain"),
            "long title": ({"title": "t" * 241}, "invalid_input:"),
            "long description": ({"description": "d" * 4001}, "invalid_input:"),
            "long alt text": ({"altText": "a" * 2001}, "invalid_input:"),
            "too many tags": ({"tags": [f"t{i}" for i in range(33)]}, "invalid_input:"),
            "long tag": ({"tags": ["x" * 65]}, "invalid_input:"),
            "empty tag": ({"tags": ["ok", "  "]}, "invalid_input: tags: a tag is empty"),
            "NUL tag": ({"tags": ["a\x00"]}, "invalid_input: tags: must not contain a NUL"),
            "wrong type": ({"tags": "sea"}, "invalid_input"),
            "unknown field": ({"projectId": "apr_x"}, ""),
        }
        for name, (arguments, expected) in cases.items():
            refused = await _error(client, "image_asset_update", {"assetId": asset, **arguments})
            assert refused.startswith(expected), (name, refused)
        missing = await _error(client, "image_asset_update", {"assetId": "ast_" + "a" * 26})
        deleted = await _error(
            client, "image_asset_update", {"assetId": gone["assetId"], "title": "Back"}
        )
        bad_id = await _error(client, "image_asset_update", {"assetId": "nonsense"})
    async with client_as(bob.key) as client:
        theirs = await _error(client, "image_asset_update", {"assetId": asset, "title": "Mine"})
    async with client_as(reader.key) as client:
        read_only = await _error(client, "image_asset_update", {"assetId": asset, "title": "R"})
    async with client_as(readonly_key.key) as client:
        no_scope = await _error(client, "image_asset_update", {"assetId": asset, "title": "S"})
    async with client_as(alice.key) as client:
        after = await _call(client, "image_asset_get", {"assetId": asset})
    assert missing == deleted == bad_id == theirs == "not_found: asset not found"
    assert read_only == "forbidden: you have read access to this vault; write access is needed"
    assert no_scope == "forbidden: this API key lacks the 'write' scope"
    assert after == before
    assert await _provenance(saving, "asset_update") == []


@dataclass
class GatedEmbedder:
    """Delegates to ``inner``, but holds every call until ``release`` is set."""

    inner: Embedder
    entered: anyio.Event = field(default_factory=anyio.Event)
    release: anyio.Event = field(default_factory=anyio.Event)

    @property
    def model(self) -> str:
        return self.inner.model

    @property
    def dimensions(self) -> int:
        return self.inner.dimensions

    async def embed(self, values: Sequence[EmbedValue], task: Task) -> EmbedResult:
        self.entered.set()
        await self.release.wait()
        return await self.inner.embed(values, task)

    async def close(self) -> None:
        await self.inner.close()


async def test_an_edit_racing_the_worker_never_leaves_the_old_vector_as_the_new_texts(
    client_as: Callable[[str], Client[Any]], alice: Any, saving: MemoryServices
) -> None:
    """The worker has loaded the OLD words and is embedding them when the edit commits."""
    assert saving.embedder is not None
    async with client_as(alice.key) as client:
        saved = await _call(
            client, "image_asset_save", {"imageBase64": b64(picture(7)), "title": "Harbour"}
        )
        asset = saved["assetId"]
        gated = GatedEmbedder(saving.embedder)
        worker = job_worker(replace(saving, embedder=gated))
        edited: dict[str, Any] = {}
        async with anyio.create_task_group() as group:
            group.start_soon(worker.run_once)
            with anyio.fail_after(10):
                await gated.entered.wait()  # both jobs claimed, the old title loaded
            edited = await _call(
                client, "image_asset_update", {"assetId": asset, "title": "Zeppelin"}
            )
            gated.release.set()
        after_race = await _jobs(saving, asset)
        fused_after_race = await _fused_vectors(saving, asset)
        got = await _call(client, "image_asset_get", {"assetId": asset})
        await job_worker(saving).drain()
        final = await _call(client, "image_asset_get", {"assetId": asset})
    assert edited["changed"] == ["title"]
    # The racing worker finished the visual job; its fused job lost its lease to the edit and
    # wrote nothing; the new text's job waits.
    assert after_race == [("fused", "cancelled"), ("visual", "done"), ("fused", "queued")]
    assert fused_after_race == 0
    assert got["embeddingStatus"] == "pending"
    assert final["embeddingStatus"] == "ready"
    assert await _fused_vectors(saving, asset) == 1
    assert {r["representation"]: r["status"] for r in final["representations"]} == {
        "visual": "done",
        "fused": "done",
    }


# --- image_project_update ----------------------------------------------------------------------


async def test_project_rename_describe_archive_and_unarchive(
    client_as: Callable[[str], Client[Any]], alice: Any, saving: MemoryServices
) -> None:
    async with client_as(alice.key) as client:
        project = await _call(
            client, "image_project_create", {"name": "Trips", "description": "old"}
        )
        pid = project["projectId"]
        renamed = await _call(
            client,
            "image_project_update",
            {"projectId": pid, "name": " Journeys ", "description": ""},
        )
        again = await _call(client, "image_project_update", {"projectId": pid, "name": "Journeys"})
        archived = await _call(client, "image_project_update", {"projectId": pid, "archived": True})
        refused_save = await _error(
            client, "image_asset_save", {"imageBase64": b64(picture(8)), "projectId": pid}
        )
        unarchived = await _call(
            client, "image_project_update", {"projectId": pid, "archived": False}
        )
        saved = await _call(
            client, "image_asset_save", {"imageBase64": b64(picture(8)), "projectId": pid}
        )
        placed = await _call(client, "image_asset_get", {"assetId": saved["assetId"]})
        listed = await _call(client, "image_project_list", {})
    assert renamed["name"] == "Journeys" and renamed["description"] is None
    assert renamed["changed"] == ["name", "description"]
    assert again["changed"] == []
    assert archived["status"] == "archived" and archived["changed"] == ["archived"]
    assert refused_save.startswith("conflict:")
    assert unarchived["status"] == "active" and unarchived["changed"] == ["archived"]
    assert placed["projectId"] == pid
    assert [p["name"] for p in listed["projects"]] == ["Journeys"]
    assert await _provenance(saving, "asset_project_update") == [
        {"changed": ["name", "description"], "archived": False},
        {"changed": ["archived"], "archived": True},
        {"changed": ["archived"], "archived": False},
    ]


async def test_bad_project_edits_are_refused_and_change_nothing(
    client_as: Callable[[str], Client[Any]],
    alice: Any,
    bob: Any,
    make_person: Any,
    saving: MemoryServices,
) -> None:
    reader = await make_person("reader@example.com", scopes=("read", "write"))
    await admin.grant(saving.database, "alice@example.com", "Library", "reader@example.com", "read")
    async with client_as(alice.key) as client:
        project = await _call(client, "image_project_create", {"name": "Trips"})
        await _call(client, "image_project_create", {"name": "Work"})
        pid = project["projectId"]
        before = await _call(client, "image_project_list", {"includeArchived": True})
        cases: dict[str, tuple[dict[str, Any], str]] = {
            "taken name": (
                {"name": "work"},
                "conflict: a project named 'work' already exists in this vault",
            ),
            "blank name": ({"name": "   "}, "invalid_input: project name must be 1-120"),
            "invisible name": ({"name": "a\u202eb"}, "invalid_input: project name"),
            "NUL name": ({"name": "a\x00"}, "invalid_input: name: must not contain a NUL"),
            "long name": ({"name": "n" * 121}, "invalid_input"),
            "long description": ({"description": "d" * 2001}, "invalid_input"),
            "missing project": ({"projectId": "apr_" + "a" * 26}, "not_found: project not found"),
            "bad id": ({"projectId": "x"}, "not_found: project not found"),
            "unknown vault": ({"vault": "Nope"}, "not_found: vault 'Nope' not found"),
            "archived as text": ({"archived": "yes"}, "invalid_input"),
        }
        for name, (arguments, expected) in cases.items():
            refused = await _error(
                client, "image_project_update", {"projectId": pid, "name": "Trips", **arguments}
            )
            assert refused.startswith(expected), (name, refused)
    async with client_as(bob.key) as client:
        theirs = await _error(
            client,
            "image_project_update",
            {"projectId": pid, "vault": "alice@example.com/Library", "name": "X"},
        )
    async with client_as(reader.key) as client:
        read_only = await _error(
            client,
            "image_project_update",
            {"projectId": pid, "vault": "alice@example.com/Library", "name": "X"},
        )
    async with client_as(alice.key) as client:
        listed = await _call(client, "image_project_list", {"includeArchived": True})
    assert theirs == "not_found: vault 'alice@example.com/Library' not found"
    assert read_only == "forbidden: you have read access to this vault; write access is needed"
    assert listed == before
    assert await _provenance(saving, "asset_project_update") == []


# --- image_folder_update -----------------------------------------------------------------------


async def _tree(client: Client[Any], pid: str) -> dict[str, str]:
    listed = await _call(client, "image_folder_list", {"projectId": pid})
    return {f["name"]: f["path"] for f in listed["folders"]}


async def test_folder_rename_and_move_paths_follow(
    client_as: Callable[[str], Client[Any]], alice: Any, saving: MemoryServices
) -> None:
    async with client_as(alice.key) as client:
        pid = (await _call(client, "image_project_create", {"name": "P"}))["projectId"]

        async def folder(name: str, parent: str | None = None) -> str:
            arguments = {"projectId": pid, "name": name, "parentId": parent}
            return (await _call(client, "image_folder_create", arguments))["folderId"]

        trips = await folder("Trips")
        may = await folder("May", trips)
        beach = await folder("Beach", may)
        work = await folder("Work")
        renamed = await _call(
            client,
            "image_folder_update",
            {"projectId": pid, "folderId": may, "name": "June"},
        )
        moved = await _call(
            client,
            "image_folder_update",
            {"projectId": pid, "folderId": may, "parentId": work},
        )
        tree = await _tree(client, pid)
        same = await _call(
            client,
            "image_folder_update",
            {"projectId": pid, "folderId": may, "parentId": work, "name": "June"},
        )
        rooted = await _call(
            client, "image_folder_update", {"projectId": pid, "folderId": beach, "toRoot": True}
        )
        tree_after = await _tree(client, pid)
    assert renamed["path"] == "/Trips/June" and renamed["changed"] == ["name"]
    assert moved["path"] == "/Work/June" and moved["depth"] == 2
    assert moved["parentId"] == work and moved["changed"] == ["parentId"]
    assert tree == {
        "Trips": "/Trips",
        "Work": "/Work",
        "June": "/Work/June",
        "Beach": "/Work/June/Beach",
    }
    assert same["changed"] == []
    assert rooted["path"] == "/Beach" and rooted["parentId"] is None and rooted["depth"] == 1
    assert tree_after["Beach"] == "/Beach"
    assert await _provenance(saving, "asset_folder_update") == [
        {
            "projectId": pid,
            "changed": ["name"],
            "from": {"parentId": trips},
            "to": {"parentId": trips},
        },
        {
            "projectId": pid,
            "changed": ["parentId"],
            "from": {"parentId": trips},
            "to": {"parentId": work},
        },
        {
            "projectId": pid,
            "changed": ["parentId"],
            "from": {"parentId": may},
            "to": {"parentId": None},
        },
    ]


async def test_bad_folder_edits_are_refused_and_change_nothing(
    client_as: Callable[[str], Client[Any]],
    alice: Any,
    bob: Any,
    make_person: Any,
    saving: MemoryServices,
) -> None:
    reader = await make_person("reader@example.com", scopes=("read", "write"))
    await admin.grant(saving.database, "alice@example.com", "Library", "reader@example.com", "read")
    async with client_as(alice.key) as client:
        pid = (await _call(client, "image_project_create", {"name": "P"}))["projectId"]
        other = (await _call(client, "image_project_create", {"name": "Q"}))["projectId"]
        foreign = (await _call(client, "image_folder_create", {"projectId": other, "name": "F"}))[
            "folderId"
        ]
        await _call(client, "image_project_archive", {"projectId": other})
        chain: list[str] = []
        for depth in range(6):  # /L0/L1/.../L5: depth 6
            created = await _call(
                client,
                "image_folder_create",
                {"projectId": pid, "name": f"L{depth}", "parentId": chain[-1] if chain else None},
            )
            chain.append(created["folderId"])
        tall = (await _call(client, "image_folder_create", {"projectId": pid, "name": "T"}))[
            "folderId"
        ]
        mid = (
            await _call(
                client, "image_folder_create", {"projectId": pid, "name": "U", "parentId": tall}
            )
        )["folderId"]
        await _call(client, "image_folder_create", {"projectId": pid, "name": "V", "parentId": mid})
        sibling = (await _call(client, "image_folder_create", {"projectId": pid, "name": "S"}))[
            "folderId"
        ]
        before = await _call(client, "image_folder_list", {"projectId": pid})
        top = chain[0]
        cases: dict[str, tuple[dict[str, Any], str]] = {
            "under itself": (
                {"folderId": top, "parentId": top},
                "invalid_input: parentId: a folder",
            ),
            "under its descendant": (
                {"folderId": top, "parentId": chain[3]},
                "invalid_input: a folder cannot be moved under itself or one of its subfolders",
            ),
            # T has two levels below it: under L5 (depth 6) it would reach depth 9.
            "too deep": (
                {"folderId": tall, "parentId": chain[5]},
                "invalid_input: folders can be nested at most 8 deep",
            ),
            "sibling name taken": (
                {"folderId": sibling, "name": "t"},
                "conflict: a folder named 't' already exists here",
            ),
            "taken at the destination": (
                {"folderId": mid, "toRoot": True, "name": "S"},
                "conflict: a folder named 'S' already exists here",
            ),
            "slash in name": ({"folderId": sibling, "name": "a/b"}, "invalid_input: folder name"),
            "dot-dot name": ({"folderId": sibling, "name": ".."}, "invalid_input: folder name"),
            "blank name": ({"folderId": sibling, "name": "  "}, "invalid_input: folder name"),
            "NUL name": ({"folderId": sibling, "name": "a\x00"}, "invalid_input: name: must"),
            "parent and root": (
                {"folderId": sibling, "parentId": tall, "toRoot": True},
                "invalid_input: toRoot: give either parentId or toRoot=true, not both",
            ),
            "parent in another project": (
                {"folderId": sibling, "parentId": foreign},
                "not_found: parent folder not found",
            ),
            "missing parent": (
                {"folderId": sibling, "parentId": "afl_" + "a" * 26},
                "not_found: parent folder not found",
            ),
            "folder of another project": (
                {"folderId": foreign, "name": "G"},
                "not_found: folder not found",
            ),
            "archived project": (
                {"projectId": other, "folderId": foreign, "name": "G"},
                "conflict: the project is archived; its folders cannot change",
            ),
            "missing folder": ({"folderId": "afl_" + "b" * 26, "name": "G"}, "not_found: folder"),
        }
        for name, (arguments, expected) in cases.items():
            refused = await _error(client, "image_folder_update", {"projectId": pid, **arguments})
            assert refused.startswith(expected), (name, refused)
        assert await _call(client, "image_folder_list", {"projectId": pid}) == before
        fits = await _call(
            client,
            "image_folder_update",
            {"projectId": pid, "folderId": tall, "parentId": chain[4]},
        )
        after_fit = await _call(client, "image_folder_list", {"projectId": pid})
    async with client_as(bob.key) as client:
        theirs = await _error(
            client,
            "image_folder_update",
            {
                "projectId": pid,
                "folderId": sibling,
                "vault": "alice@example.com/Library",
                "name": "X",
            },
        )
    async with client_as(reader.key) as client:
        read_only = await _error(
            client,
            "image_folder_update",
            {
                "projectId": pid,
                "folderId": sibling,
                "vault": "alice@example.com/Library",
                "name": "X",
            },
        )
    assert theirs == "not_found: vault 'alice@example.com/Library' not found"
    assert read_only == "forbidden: you have read access to this vault; write access is needed"
    # T's subtree of three levels fits exactly under L4 (depth 5): V ends at depth 8.
    assert fits["depth"] == 6
    assert max(f["depth"] for f in after_fit["folders"]) == 8
    assert len(after_fit["folders"]) == len(before["folders"])
    provenance = await _provenance(saving, "asset_folder_update")
    assert [p["changed"] for p in provenance] == [["parentId"]]  # only the move that fit


async def test_concurrent_moves_cannot_form_a_cycle(
    database: Database, alice: Any, client_as: Callable[[str], Client[Any]]
) -> None:
    """A under B and B under A at once: the second waits for the first, then sees the cycle."""
    async with client_as(alice.key) as client:
        pid = (await _call(client, "image_project_create", {"name": "P"}))["projectId"]
        a = (await _call(client, "image_folder_create", {"projectId": pid, "name": "A"}))[
            "folderId"
        ]
        b = (await _call(client, "image_folder_create", {"projectId": pid, "name": "B"}))[
            "folderId"
        ]
    async with database.unit_of_work() as probe:
        vault = await probe.vaults.resolve("alice@example.com", "Library")
    scope = vault.scope
    second_error: list[BaseException] = []

    async def second() -> None:
        try:
            async with database.unit_of_work() as uow:
                await uow.folders.update(scope, b, name="B", parent_id=a)
        except FolderTreeError as exc:
            second_error.append(exc)

    moved = anyio.Event()
    commit = anyio.Event()

    async def first() -> None:
        async with database.unit_of_work() as uow:
            await uow.folders.update(scope, a, name="A", parent_id=b)
            moved.set()
            await commit.wait()  # commits when the block ends

    async with anyio.create_task_group() as group:
        group.start_soon(first)
        with anyio.fail_after(10):
            await moved.wait()
            group.start_soon(second)
            while not await _waiting_on_a_lock(database):
                await anyio.sleep(0.05)
        # Commit the first move while the second waits for the project's lock.
        commit.set()
    assert len(second_error) == 1
    assert "under itself or one of its subfolders" in str(second_error[0])
    async with client_as(alice.key) as client:
        tree = await _tree(client, pid)
    assert tree == {"B": "/B", "A": "/B/A"}


async def _waiting_on_a_lock(database: Database) -> bool:
    async with database.engine.connect() as conn:
        waiting = await conn.scalar(
            text(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
        )
    return bool(waiting)


async def test_a_first_fused_vector_that_does_not_fit_the_quota_is_refused(
    client_as: Callable[[str], Client[Any]], alice: Any, saving: MemoryServices
) -> None:
    async with client_as(alice.key) as client:
        saved = await _call(client, "image_asset_save", {"imageBase64": b64(picture(9))})
        asset = saved["assetId"]
        await job_worker(saving).drain()
        async with saving.database.engine.begin() as conn:
            await conn.execute(
                text(
                    "UPDATE mem_identities SET quota_bytes = ("
                    "SELECT used_bytes FROM mem_asset_namespaces WHERE owner_identity = :o) "
                    "WHERE owner_identity = :o"
                ),
                {"o": "alice@example.com"},
            )
        before = await _call(client, "image_asset_get", {"assetId": asset})
        refused = await _error(client, "image_asset_update", {"assetId": asset, "altText": "Fox"})
        # Words that need no new vector still fit.
        tagged = await _call(client, "image_asset_update", {"assetId": asset, "tags": ["fox"]})
        after = await _call(client, "image_asset_get", {"assetId": asset})
    assert refused.startswith("quota_exceeded: a fused vector for the new text needs ")
    assert tagged["changed"] == ["tags"]
    assert {**after, "tags": [], "updatedAt": None} == {**before, "updatedAt": None}
    assert await _jobs(saving, asset) == [("visual", "done")]


async def test_giving_the_derived_title_as_ones_own_makes_it_fused_text(
    client_as: Callable[[str], Client[Any]], alice: Any, saving: MemoryServices
) -> None:
    """A derived title never feeds the fused vector; the same words given by the caller do."""
    async with client_as(alice.key) as client:
        saved = await _call(client, "image_asset_save", {"imageBase64": b64(picture(11))})
        asset = saved["assetId"]
        await job_worker(saving).drain()
        derived = await _call(client, "image_asset_get", {"assetId": asset})
        owned = await _call(
            client, "image_asset_update", {"assetId": asset, "title": derived["title"]}
        )
        repeated = await _call(
            client, "image_asset_update", {"assetId": asset, "title": derived["title"]}
        )
    assert derived["fusedNote"] is not None
    assert owned["title"] == derived["title"] and owned["changed"] == ["title"]
    assert owned["fusedNote"] is None and owned["embeddingStatus"] == "pending"
    assert repeated["changed"] == []
    assert await _jobs(saving, asset) == [("visual", "done"), ("fused", "queued")]


@pytest.mark.parametrize("change", ["move", "create"])
async def test_a_folder_being_deleted_gets_no_live_child(
    database: Database,
    alice: Any,
    saving: MemoryServices,
    client_as: Callable[[str], Client[Any]],
    change: str,
) -> None:
    """Deleting empty Y while X is moved (or a folder created) under it: never a hidden child.

    The deletion holds the project's lock, so the other change waits, then finds Y gone
    (``NotFound``) instead of placing a live folder under a deleted one, where no listing
    would show it.
    """
    async with client_as(alice.key) as client:
        pid = (await _call(client, "image_project_create", {"name": "P"}))["projectId"]
        x = await _call(client, "image_folder_create", {"projectId": pid, "name": "X"})
        y = await _call(client, "image_folder_create", {"projectId": pid, "name": "Y"})
    async with database.unit_of_work() as probe:
        vault = await probe.vaults.resolve("alice@example.com", "Library")
    scope = vault.scope
    refused: list[BaseException] = []

    async def second() -> None:
        try:
            async with database.unit_of_work() as uow:
                if change == "move":
                    await uow.folders.update(
                        scope, x["folderId"], name="X", parent_id=y["folderId"]
                    )
                else:
                    await uow.folders.create(
                        scope, project_id=pid, parent_id=y["folderId"], name="child"
                    )
        except NotFound as exc:
            refused.append(exc)

    deleted = anyio.Event()
    commit = anyio.Event()

    async def first() -> None:
        async with database.unit_of_work() as uow:
            caller = await authenticate(uow, alice.key)
            answer = await changes.delete_folder(
                uow,
                caller,
                saving,
                vault="Library",
                project_id=pid,
                folder_id=y["folderId"],
                recursive=False,
                confirm=None,
            )
            assert answer.deleted
            deleted.set()
            await commit.wait()  # commits when the block ends

    async with anyio.create_task_group() as group:
        group.start_soon(first)
        with anyio.fail_after(10):
            await deleted.wait()
            group.start_soon(second)
            while not await _waiting_on_a_lock(database):
                await anyio.sleep(0.05)
        commit.set()
    assert len(refused) == 1 and "not found" in str(refused[0])
    async with database.engine.connect() as conn:
        hidden = (
            await conn.execute(
                text(
                    "SELECT count(*) FROM mem_asset_folders child JOIN mem_asset_folders parent"
                    " ON parent.id = child.parent_id"
                    " WHERE child.deleted_at IS NULL AND parent.deleted_at IS NOT NULL"
                )
            )
        ).scalar_one()
    assert hidden == 0
    async with client_as(alice.key) as client:
        assert await _tree(client, pid) == {"X": "/X"}
