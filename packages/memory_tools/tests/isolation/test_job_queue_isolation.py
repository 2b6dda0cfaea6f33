"""The isolation matrix of the job queue workflows (memory_tools.jobs.queue): caller x target.

An owner's retry reaches only images the caller may change: another owner's unshared image is
``not_found`` exactly like an id that never existed, a read grantee is ``forbidden``. The
operator workflows answer only to the ``admin`` key scope, and that scope opens no image.
"""

from __future__ import annotations

import base64
from dataclasses import replace
from typing import Any

from memory_db.embedding import ScriptedEmbedder
from memory_db.errors import ProviderRejected
from memory_tools import MemoryServices
from memory_tools.access import Caller
from memory_tools.errors import ToolFailure
from memory_tools.ingest.save import AssetSaver, SaveRequest
from memory_tools.jobs.queue import (
    cancel_job,
    job_details,
    list_jobs,
    retry_asset_embedding,
    retry_job,
)
from memory_tools.operations import admin
from memory_tools.serving.job_worker import job_worker

from ..pictures import picture

MISSING = "ast_" + "z" * 26
FULL = frozenset({"read", "write", "destructive"})
GRANTEES = {
    "read": "reader@example.com",
    "write": "writer@example.com",
    "admin": "adminer@example.com",
}


async def _code(services: MemoryServices, workflow: Any, caller: Caller, **kwargs: Any) -> str:
    try:
        async with services.database.unit_of_work() as uow:
            await workflow(uow, caller, services, **kwargs)
    except ToolFailure as exc:
        return exc.code
    return "ok"


async def _failed(services: MemoryServices, caller: Caller, seed: int) -> str:
    embedder = ScriptedEmbedder(
        model_name="local-hash-v1", script=[ProviderRejected("wrong_dimensions", "no")]
    )
    failing = replace(services, embedder=embedder)
    request = SaveRequest(image_base64=base64.b64encode(picture(seed)).decode())
    asset_id = (await AssetSaver(failing).save(caller, request)).asset_id
    await job_worker(failing).drain()
    return asset_id


async def test_retry_and_operator_workflows_by_caller(saving: MemoryServices) -> None:
    database = saving.database
    people = ["alice", "bob", "reader", "writer", "adminer"]
    for name in people:
        await admin.create_identity(database, f"{name}@example.com", 10**9)
    for permission in ("read", "write", "admin"):
        await admin.grant(
            database, "alice@example.com", "Library", GRANTEES[permission], permission
        )
    callers = {
        "owner": Caller("alice@example.com", "k1", FULL),
        "other owner": Caller("bob@example.com", "k2", FULL),
        "shared reader": Caller("reader@example.com", "k3", FULL),
        "shared writer": Caller("writer@example.com", "k4", FULL),
        "shared admin": Caller("adminer@example.com", "k5", FULL),
        "operator": Caller("bob@example.com", "k6", frozenset({"read", "write", "admin"})),
    }
    expected = {
        "owner": "ok",
        "other owner": "not_found",
        "shared reader": "forbidden",
        "shared writer": "ok",
        "shared admin": "ok",
        "operator": "not_found",  # the admin scope is no access to an owner's images
    }
    mismatches: list[str] = []
    for seed, (name, caller) in enumerate(callers.items(), start=1):
        # A failed image of alice's per caller: a successful retry queues it.
        asset_id = await _failed(saving, callers["owner"], seed)
        got = await _code(
            saving, retry_asset_embedding, caller, asset_id=asset_id, representation="visual"
        )
        if got != expected[name]:
            mismatches.append(f"retry / {name}: {got} != {expected[name]}")
        await job_worker(saving).drain()  # the next image fails alone
        if expected[name] == "not_found":
            missing = await _code(
                saving, retry_asset_embedding, caller, asset_id=MISSING, representation="visual"
            )
            if missing != "not_found":
                mismatches.append(f"retry / {name} / missing: {missing}")
    async with database.unit_of_work() as uow:
        job = (await uow.work.list(kinds=("embedding",), limit=1))[0]
    for name, caller in callers.items():
        wanted = "ok" if name == "operator" else "forbidden"
        for workflow, kwargs in [
            (list_jobs, {}),
            (job_details, {"type": "embedding", "job_id": job.id}),
        ]:
            got = await _code(saving, workflow, caller, **kwargs)
            if got != wanted:
                mismatches.append(f"{workflow.__name__} / {name}: {got} != {wanted}")
        # The changes: refused before anything is looked at, for everyone but the operator.
        for workflow, kwargs in [
            (retry_job, {"job_id": "aej_missing"}),
            (cancel_job, {"job_id": "aej_missing", "reason": "r"}),
        ]:
            got = await _code(saving, workflow, caller, **kwargs)
            want = "not_found" if name == "operator" else "forbidden"
            if got != want:
                mismatches.append(f"{workflow.__name__} / {name}: {got} != {want}")
    assert mismatches == []
