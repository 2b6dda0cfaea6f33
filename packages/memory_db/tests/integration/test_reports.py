"""Operator reports (``uow.reports``), key labels and grant listings on a real PostgreSQL."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import text

from memory_db import Database
from memory_db.unit_of_work import session_of

A, B, C = "alice@example.com", "bob@example.com", "carol@example.com"


async def test_identities_vaults_and_grants(database: Database) -> None:
    async with database.unit_of_work() as uow:
        for owner in (B, A, C):
            await uow.identities.create(owner, 1000)
        await uow.vaults.create(A, "Work")
        await uow.vaults.grant(A, "Work", B, "read")
        await uow.vaults.grant(A, "Work", C, "write")
        await uow.api_keys.create(A, ["read"], "laptop")
        revoked, _ = await uow.api_keys.create(A, ["read"], "laptop")
        await uow.api_keys.create(A, ["read"], "phone")
        await uow.api_keys.revoke(revoked.id)
        paused, _ = await uow.api_keys.create(A, ["read"], "tablet")
        await uow.api_keys.set_paused(paused.id, True)
        paused_then_revoked, _ = await uow.api_keys.create(A, ["read"], "old")
        await uow.api_keys.set_paused(paused_then_revoked.id, True)
        await uow.api_keys.revoke(paused_then_revoked.id)
    async with database.unit_of_work() as uow:
        people = await uow.reports.identities()
        vaults = await uow.reports.vaults(A)
        grants = await uow.vaults.grants(A, "work")
        laptops = await uow.api_keys.list_for(A, label="laptop")
        removed = await uow.vaults.revoke_grant(A, "Work", B)
        again = await uow.vaults.revoke_grant(A, "Work", B)
    # A paused key is not active; a revoked one is revoked, paused first or not.
    summary = [
        (p.owner_identity, p.active_keys, p.paused_keys, p.revoked_keys, p.vaults) for p in people
    ]
    assert summary == [(A, 2, 1, 2, 2), (B, 0, 0, 0, 1), (C, 0, 0, 0, 1)]
    assert [(v.handle, v.grants, v.assets) for v in vaults] == [("Library", 0, 0), ("Work", 2, 0)]
    assert [(g.grantee_identity, g.permission) for g in grants] == [(B, "read"), (C, "write")]
    assert sorted(k.label or "" for k in laptops) == ["laptop", "laptop"]
    assert removed is not None and (removed.grantee_identity, removed.permission) == (B, "read")
    assert again is None


async def test_tokens_by_month_sum_the_ledger_per_utc_month_source_and_model(
    database: Database,
) -> None:
    async with database.unit_of_work() as uow:
        await uow.identities.create(A, 1000)
        await uow.identities.create(B, 1000)
        entries = [
            ("2026-01-31 23:30:00+00", "embed_image_document", 10, 8, 2),
            ("2026-02-01 00:30:00+01", "embed_image_document", 5, 5, 0),  # 23:30 UTC, January
            ("2026-02-01 00:30:00+00", "embed_image_document", 7, 6, 1),
            ("2026-02-03 12:00:00+00", "embed_image_query", 3, 3, 0),
        ]
        for when, source, total, prompt, image in entries:
            entry = await uow.usage.record(
                owner_identity=A,
                source=source,
                model="m1",
                total_tokens=total,
                prompt_tokens=prompt,
                image_tokens=image,
            )
            await session_of(uow).execute(
                text("UPDATE mem_usage_ledger SET created_at = :w WHERE id = :i"),
                {"w": datetime.fromisoformat(when), "i": entry},
            )
        await uow.usage.record(
            owner_identity=B, source="embed_image_query", model="m1", total_tokens=99
        )
    async with database.unit_of_work() as uow:
        months = await uow.reports.tokens_by_month(A)
    assert [
        (m.month, m.source, m.calls, m.total_tokens, m.prompt_tokens, m.image_tokens)
        for m in months
    ] == [
        ("2026-02", "embed_image_document", 1, 7, 6, 1),
        ("2026-02", "embed_image_query", 1, 3, 3, 0),
        ("2026-01", "embed_image_document", 2, 15, 13, 2),
    ]
