"""Reconciliation over a store that mixes every case (docs/runbooks/reconcile.md).

One library holds live, trashed and deleted images, orphaned bytes (old and fresh), an object
whose bytes are missing and one whose bytes changed, vectors of a deleted image, a ready image
without its visual vector, an expired reservation, an abandoned lease and drifted counters. A
dry run reports all and changes nothing; two real passes at once repair each exactly once and
delete nothing live; the next pass finds nothing; restoring the missing bytes lifts the
quarantine. The same checks run against the S3 peer (moto), and the command as a subprocess.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic import SecretStr
from sqlalchemy import text

from memory_db import Database, MemorySettings, open_runtime
from memory_db.database import create_engine
from memory_db.ids import new_id
from memory_db.repositories import namespace_lock
from memory_db.storage import build_object_key, build_staging_key, content_type_for_key
from memory_db.testing.s3_peers import S3Peer
from memory_tools import MemoryServices, metrics
from memory_tools.access import Caller
from memory_tools.errors import ConflictFailure
from memory_tools.ingest.save import AssetSaver, SaveRequest
from memory_tools.jobs.worker import ORPHAN_SAFETY_WINDOW, WorkerConfig
from memory_tools.operations import admin
from memory_tools.operations.reconcile import Reconciliation, reconcile_store
from memory_tools.serving.bootstrap import worker_config
from memory_tools.serving.job_worker import job_worker
from memory_tools.workflows.changes import delete_asset

from ..pictures import picture

ALICE = "alice@example.com"
BOB = "bob@example.com"
FAST = WorkerConfig(batch_size=16, lease_seconds=30, heartbeat_seconds=10, poll_seconds=0.2)


def caller(owner: str) -> Caller:
    return Caller(owner, "akey_" + owner[0], frozenset({"read", "write", "destructive"}))


async def save(services: MemoryServices, owner: str, seed: int, **fields: Any) -> str:
    request = SaveRequest(image_base64=base64.b64encode(picture(seed)).decode(), **fields)
    return (await AssetSaver(services).save(caller(owner), request)).asset_id


async def rows(services: MemoryServices, sql: str, **values: Any) -> list[Any]:
    async with services.database.engine.connect() as conn:
        return list((await conn.execute(text(sql), values)).all())


async def execute(services: MemoryServices, sql: str, **values: Any) -> None:
    async with services.database.engine.begin() as conn:
        await conn.execute(text(sql), values)


async def object_of(services: MemoryServices, asset_id: str) -> Any:
    async with services.database.unit_of_work() as uow:
        asset = await uow.assets.get_for_owner(ALICE, asset_id)
        assert asset is not None
        return await uow.objects.get(ALICE, asset.object_id)


async def snapshot(services: MemoryServices) -> dict[str, Any]:
    """Everything a pass may change: rows, counters, vectors, the ledger and the store's keys."""
    index = (await rows(services, "SELECT index_name FROM mem_vector_index_aliases"))[0][0]
    state: dict[str, Any] = {
        "objects": await rows(
            services, "SELECT id, status, verified_at FROM mem_asset_objects ORDER BY id"
        ),
        "assets": await rows(
            services,
            "SELECT id, status, failure_code, embedding_status FROM mem_assets ORDER BY id",
        ),
        "jobs": await rows(
            services, "SELECT id, status, lease_until FROM mem_asset_embedding_jobs ORDER BY id"
        ),
        "reservations": await rows(
            services, "SELECT id, status FROM mem_asset_upload_reservations ORDER BY id"
        ),
        "counters": await rows(
            services,
            "SELECT owner_identity, used_bytes, reserved_bytes FROM mem_asset_namespaces "
            "ORDER BY owner_identity",
        ),
        "vectors": await rows(services, f"SELECT id FROM {index} ORDER BY id"),
        "provenance": await rows(services, "SELECT count(*) FROM mem_provenance"),
        "runs": await rows(services, "SELECT count(*) FROM mem_reconcile_runs"),
    }
    root: Path = services.store.root  # type: ignore[attr-defined]
    state["files"] = await anyio.to_thread.run_sync(_files, root)
    return state


def _files(root: Path) -> list[tuple[str, str]]:
    return sorted(
        (str(p.relative_to(root)), hashlib.sha256(p.read_bytes()).hexdigest())
        for p in root.rglob("*")
        if p.is_file()
    )


def by_check(report: Reconciliation, action: str) -> dict[str, int]:
    return {check: n for (check, a), n in report.findings.items() if a == action}


async def test_a_mixed_store_is_reported_then_repaired_once_and_nothing_live_is_lost(
    saving: MemoryServices, database_url: str
) -> None:
    services = saving
    await admin.create_identity(services.database, ALICE, 10**9)
    await admin.create_identity(services.database, BOB, 10**9)
    live = await save(services, ALICE, 1, description="a live picture")
    missing = await save(services, ALICE, 2)
    corrupt = await save(services, ALICE, 3)
    trashed = await save(services, ALICE, 4)
    crashed = await save(services, ALICE, 5)  # deleted, but its vectors stayed behind
    unembedded = await save(services, ALICE, 6)  # ready, but its visual vector is gone
    bobs = await save(services, BOB, 7)
    await job_worker(services, FAST).drain()
    abandoned = await save(services, ALICE, 8)  # its worker died on the last attempt
    async with services.database.unit_of_work() as uow:
        await delete_asset(uow, caller(ALICE), services, asset_id=trashed)
        claimed = await uow.jobs.claim("gone-worker", limit=1, lease_seconds=30)
        reservation, _ = await uow.quota.open_reservation(
            ALICE,
            operation="asset_upload",
            idempotency_key=None,
            expected_bytes=100,
            expires_at=datetime.now(UTC) + timedelta(hours=1),
        )
        await uow.quota.reserve(ALICE, reservation.id, 100)
    assert [job.asset_id for job in claimed] == [abandoned]
    index = (await rows(services, "SELECT index_name FROM mem_vector_index_aliases"))[0][0]
    await execute(
        services,
        "UPDATE mem_asset_embedding_jobs SET lease_until = now() - interval '1 minute', "
        "attempts = max_attempts WHERE id = :j",
        j=claimed[0].id,
    )
    await execute(
        services,
        "UPDATE mem_asset_upload_reservations SET expires_at = now() - interval '1 minute' "
        "WHERE id = :r",
        r=reservation.id,
    )
    await execute(
        services,
        "UPDATE mem_assets SET status = 'deleted', deleted_at = now() WHERE id = :a",
        a=crashed,
    )
    await execute(
        services,
        f"DELETE FROM {index} WHERE asset_id = :a AND representation = 'visual'",
        a=unembedded,
    )
    await execute(
        services,
        "UPDATE mem_asset_namespaces SET used_bytes = used_bytes + 12345 WHERE owner_identity = :o",
        o=BOB,
    )
    lost, changed = await object_of(services, missing), await object_of(services, corrupt)
    root: Path = services.store.root  # type: ignore[attr-defined]
    original = (root / lost.storage_key).read_bytes()
    (root / lost.storage_key).unlink()
    (root / changed.storage_key).write_bytes(picture(99))  # rot: same key, other bytes
    env, namespace = services.settings.asset_storage_env_prefix, lost.namespace_id
    old_orphan = build_object_key(env, namespace, new_id("aob"), "original", "png")
    fresh_orphan = build_object_key(env, namespace, new_id("aob"), "preview")
    for key in (old_orphan, fresh_orphan):
        await services.store.put(key, b"orphaned", content_type=content_type_for_key(key))
    two_hours_ago = (datetime.now(UTC) - timedelta(hours=2)).timestamp()
    os.utime(root / old_orphan, (two_hours_ago, two_hours_ago))
    live_objects = [await object_of(services, a) for a in (live, trashed, unembedded, abandoned)]

    # A dry run reports every finding and changes nothing.
    before = await snapshot(services)
    dry = await reconcile_store(
        services, safety_window=ORPHAN_SAFETY_WINDOW, dry_run=True, verify_limit=None
    )
    assert await snapshot(services) == before
    expected = {
        "orphan_bytes": 1,
        "object_missing": 1,
        "object_corrupt": 1,
        "missing_vector": 1,
        "stray_vector": 1,  # the crashed image's visual vector
        "expired_reservation": 1,
        "stale_lease": 1,
        "counter_drift": 2,  # Alice's (the crashed image's vectors) and Bob's
    }
    assert by_check(dry, "reported") == expected
    assert dry.waiting == 1  # the fresh orphan: inside the safety window
    report = {(f.check, f.object_id): f.asset_ids for f in dry.integrity}
    assert report == {
        ("object_missing", lost.id): (missing,),
        ("object_corrupt", changed.id): (corrupt,),
    }
    assert {d.owner: d.used_before - d.used_after for d in dry.drift}[BOB] == 12345

    # Two reconcilers at once (each with its own connections) repair each finding once.
    findings_before = metrics.REGISTRY.get_sample_value(
        "memory_reconcile_findings_total", {"check": "counter_drift", "action": "repaired"}
    )
    second = Database(create_engine(database_url, pool_size=3))
    passes: list[Reconciliation] = []
    try:

        async def one(db: Database) -> None:
            passes.append(
                await reconcile_store(
                    replace(services, database=db),
                    safety_window=ORPHAN_SAFETY_WINDOW,
                    verify_limit=None,
                )
            )

        async with anyio.create_task_group() as group:
            group.start_soon(one, services.database)
            group.start_soon(one, second)
    finally:
        await second.close()
    combined: dict[str, int] = {}
    for done in passes:
        for check, n in by_check(done, "repaired").items():
            combined[check] = combined.get(check, 0) + n
    assert combined == expected
    assert not any(by_check(done, "reported") for done in passes)
    findings_after = metrics.REGISTRY.get_sample_value(
        "memory_reconcile_findings_total", {"check": "counter_drift", "action": "repaired"}
    )
    assert (findings_after or 0) - (findings_before or 0) == 2

    # Nothing live was deleted: every live object's rows and bytes remain.
    for stored in live_objects:
        assert (
            await rows(services, "SELECT status FROM mem_asset_objects WHERE id = :i", i=stored.id)
        ) == [(stored.status,)]  # available, or deleting for the trashed image
        for key in (stored.storage_key, stored.preview_storage_key):
            assert (await services.store.head(key)).exists, key
    assert (await services.store.head(fresh_orphan)).exists
    assert not (await services.store.head(old_orphan)).exists
    assert (root / changed.storage_key).exists()  # kept for an operator to look at
    states = dict(
        (a, (s, c))
        for a, s, c in await rows(services, "SELECT id, status, failure_code FROM mem_assets")
    )
    assert states[missing] == ("failed", "object_missing")
    assert states[corrupt] == ("failed", "object_corrupt")
    assert states[live] == states[unembedded] == states[bobs] == ("ready", None)
    assert states[abandoned] == ("failed", "lease_expired")
    quarantined = await rows(
        services, "SELECT id FROM mem_asset_objects WHERE status = 'quarantined' ORDER BY id"
    )
    assert quarantined == sorted([(lost.id,), (changed.id,)])
    vectors = await rows(services, f"SELECT asset_id, representation FROM {index}")
    assert not [v for v in vectors if v[0] == crashed]
    queued = await rows(
        services,
        "SELECT status FROM mem_asset_embedding_jobs WHERE asset_id = :a "
        "AND representation = 'visual' ORDER BY created_at",
        a=unembedded,
    )
    assert queued[-1] == ("queued",)
    reasons = await rows(
        services,
        "SELECT target_kind, detail->>'reason' FROM mem_provenance "
        "WHERE operation = 'asset_reconcile' ORDER BY 1, 2",
    )
    assert sorted(reasons) == sorted(
        [
            ("asset", "missing_vector"),
            ("asset", "stray_vector"),
            ("namespace", "counter_drift"),
            ("namespace", "counter_drift"),
            ("object", "no object row"),
            ("object", "object_corrupt"),
            ("object", "object_missing"),
        ]
    )

    # The next pass finds nothing (the re-queued embedding is waiting, not missing).
    again = await reconcile_store(services, safety_window=ORPHAN_SAFETY_WINDOW, verify_limit=None)
    assert again.findings == {}

    # Re-saving the damaged image's exact bytes names the damaged copy, not the caller's bytes.
    with pytest.raises(ConflictFailure, match="missing or damaged") as refused:
        await save(services, ALICE, 3)
    assert "could not read" not in str(refused.value)
    # A job that was under way when reconciliation failed the image ends afterwards: its
    # outcome does not overwrite the integrity failure (or lifting could never find it).
    await execute(
        services,
        "UPDATE mem_asset_embedding_jobs SET status = 'failed', "
        "last_error_code = 'embedding_failed', last_error = 'late' WHERE asset_id = :a",
        a=missing,
    )
    async with services.database.unit_of_work() as uow:
        assert await uow.assets.reconcile_many(ALICE, [missing]) == []
    assert await rows(
        services, "SELECT status, failure_code FROM mem_assets WHERE id = :a", a=missing
    ) == [("failed", "object_missing")]
    await execute(
        services,
        "UPDATE mem_asset_embedding_jobs SET status = 'done', last_error_code = NULL, "
        "last_error = NULL WHERE asset_id = :a",
        a=missing,
    )

    # The operator restores the missing bytes from a backup: the quarantine is lifted.
    (root / lost.storage_key).write_bytes(original)
    restored = await reconcile_store(services, safety_window=ORPHAN_SAFETY_WINDOW)
    assert by_check(restored, "repaired") == {"object_restored": 1}
    states = dict(
        (a, (s, c))
        for a, s, c in await rows(services, "SELECT id, status, failure_code FROM mem_assets")
    )
    assert states[missing] == ("ready", None)
    assert states[corrupt] == ("failed", "object_corrupt")


async def test_on_the_s3_peer_orphans_and_missing_bytes_are_found_and_a_held_namespace_skipped(
    saving: MemoryServices, moto_peer: S3Peer
) -> None:
    store, bucket = moto_peer.new_store("reconcile")
    services = replace(saving, store=store)
    try:
        await admin.create_identity(services.database, ALICE, 10**9)
        asset_id = await save(services, ALICE, 11)
        kept_id = await save(services, ALICE, 12)
        stored, kept = await object_of(services, asset_id), await object_of(services, kept_id)
        env = services.settings.asset_storage_env_prefix
        orphan = build_object_key(env, stored.namespace_id, new_id("aob"), "preview")
        await store.put(orphan, b"orphaned bytes", content_type="image/webp")
        moto_peer.client().delete_object(Bucket=bucket, Key=stored.preview_storage_key)

        # Another reconciler holds Alice's namespace: this pass skips it and changes nothing.
        async with namespace_lock(services.database.engine, stored.namespace_id) as taken:
            assert taken
            skipped = await reconcile_store(services, safety_window=timedelta(0))
        assert skipped.skipped == (stored.namespace_id,) and skipped.findings == {}
        assert (await store.head(orphan)).exists

        report = await reconcile_store(services, safety_window=timedelta(0))
        assert by_check(report, "repaired") == {"orphan_bytes": 1, "object_missing": 1}
        assert [(f.object_id, f.key) for f in report.integrity] == [
            (stored.id, stored.preview_storage_key)
        ]
        assert not (await store.head(orphan)).exists
        for key in (stored.storage_key, kept.storage_key, kept.preview_storage_key):
            assert (await store.head(key)).exists, key
        assert (await reconcile_store(services, safety_window=timedelta(0))).findings == {}
    finally:
        await store.close()


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memory_server", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def test_the_command_reports_repairs_and_refuses_an_unknown_owner(
    database: Database, database_url: str, tmp_path: Path
) -> None:
    await admin.create_identity(database, ALICE, 10**9)
    settings = MemorySettings(
        asset_ocr="off",
        memory_data_dir=tmp_path / "data",
        memory_database_url=SecretStr(database_url),
    )
    runtime = await open_runtime(settings, public_base_url="http://127.0.0.1")
    try:
        async with runtime.database.unit_of_work() as uow:
            namespace = (await uow.identities.get(ALICE)).namespace_id
        stray = build_staging_key(
            settings.asset_storage_env_prefix, namespace, new_id("aur"), "png"
        )
        await runtime.store.put(stray, b"replayed", content_type=content_type_for_key(stray))
        async with runtime.database.engine.begin() as conn:
            await conn.execute(
                text("UPDATE mem_asset_namespaces SET used_bytes = 77, reserved_bytes = 5")
            )
    finally:
        await runtime.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASSET_", "MEMORY_", "JINA_"))}
    env.update(
        MEMORY_DATA_DIR=str(tmp_path / "data"),
        MEMORY_DATABASE_URL=database_url,
        MEMORY_LOG_FORMAT="json",
    )

    refused = _cli(env, "reconcile", "--owner", "carol@example.com")
    assert refused.returncode == 1
    # A refusal is for the operator, not a log line: plain text naming the address they typed,
    # even with MEMORY_LOG_FORMAT=json and stderr piped.
    assert refused.stderr == (
        "error: not_found: no identity carol@example.com; create it with "
        "`memory-server admin create-identity --owner carol@example.com`\n"
    )
    assert refused.stdout == ""

    dry = _cli(env, "reconcile", "--dry-run", "--owner", ALICE, "--json")
    assert dry.returncode == 0, dry.stderr
    document = json.loads(dry.stdout)
    assert document["dryRun"] is True and document["namespaces"] == 1
    assert document["findings"] == [
        {"check": "counter_drift", "action": "reported", "count": 1},
        {"check": "orphan_bytes", "action": "reported", "count": 1},
    ]
    assert document["counters"] == [
        {
            "action": "reported",
            "owner": ALICE,
            "namespaceId": namespace,
            "usedBefore": 77,
            "usedAfter": 0,
            "reservedBefore": 5,
            "reservedAfter": 0,
        }
    ]
    assert "reconciling namespaces: 1/1" in dry.stderr

    repaired = _cli(env, "reconcile", "--verify-checksums")
    assert repaired.returncode == 0, repaired.stderr
    assert "counter_drift" in repaired.stdout and "repaired" in repaired.stdout
    assert "namespace counters" in repaired.stdout and "77" in repaired.stdout

    clean = _cli(env, "admin", "reconcile", "--json")  # the older name: the same command
    assert clean.returncode == 0, clean.stderr
    assert json.loads(clean.stdout)["findings"] == []


async def test_the_worker_sweep_reconciles_and_verifies_a_bounded_window_per_pass(
    saving: MemoryServices,
) -> None:
    services = saving
    await admin.create_identity(services.database, ALICE, 10**9)
    first, second = await save(services, ALICE, 21), await save(services, ALICE, 22)
    root: Path = services.store.root  # type: ignore[attr-defined]
    for asset_id in (first, second):
        stored = await object_of(services, asset_id)
        (root / stored.storage_key).write_bytes(picture(98))
    await execute(services, "UPDATE mem_asset_namespaces SET used_bytes = used_bytes + 1")
    config = replace(FAST, reconcile_seconds=0, verify_objects_per_pass=1)
    worker = job_worker(services, config)

    await worker.sweep()
    corrupt = await rows(
        services, "SELECT count(*) FROM mem_assets WHERE failure_code = 'object_corrupt'"
    )
    assert corrupt == [(1,)]  # one object read per namespace and pass, not the whole store
    drift = await rows(
        services,
        "SELECT count(*) FROM mem_provenance WHERE operation = 'asset_reconcile' "
        "AND detail->>'reason' = 'counter_drift' AND actor_identity = 'system:worker'",
    )
    assert drift == [(1,)]

    await worker.sweep()  # the window moves on to the next object
    corrupt = await rows(
        services, "SELECT count(*) FROM mem_assets WHERE failure_code = 'object_corrupt'"
    )
    assert corrupt == [(2,)]

    # ASSET_WORKER_RECONCILE_SECONDS=0: the sweep goes on without the scheduled pass.
    await execute(services, "UPDATE mem_asset_namespaces SET used_bytes = used_bytes + 1")
    off = worker_config(services.settings.model_copy(update={"asset_worker_reconcile_seconds": 0}))
    assert off.reconcile_seconds is None
    assert worker_config(services.settings).reconcile_seconds == 600
    await job_worker(services, replace(off, verify_objects_per_pass=1)).sweep()
    assert await rows(
        services,
        "SELECT count(*) FROM mem_provenance WHERE operation = 'asset_reconcile' "
        "AND detail->>'reason' = 'counter_drift'",
    ) == [(1,)]
