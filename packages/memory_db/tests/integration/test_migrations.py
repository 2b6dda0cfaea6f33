"""Migrations: upgrade → downgrade → upgrade, and the migrated schema matches the models."""

from __future__ import annotations

import hashlib
import re
from typing import Any

import anyio
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import text
from sqlalchemy.engine import Connection

from memory_db import Database, VaultScope, new_id
from memory_db.database import create_engine
from memory_db.migrate import current_revision, downgrade, head_revision, include_name, upgrade
from memory_db.schema import PROVENANCE_OPERATIONS, PROVENANCE_OUTCOMES, Base
from memory_db.testing import PostgresForTests


def _diff(connection: Connection) -> list[Any]:
    context = MigrationContext.configure(
        connection, opts={"compare_type": True, "include_name": include_name}
    )
    return list(compare_metadata(context, Base.metadata))


async def _table_names(engine: Any) -> set[str]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        )
        return {row[0] for row in rows}


async def test_upgrade_downgrade_upgrade_leaves_no_drift(postgres: PostgresForTests) -> None:
    name = await postgres.create_empty()
    engine = create_engine(postgres.url(name), pool_size=1)
    try:
        await upgrade(engine)
        assert await current_revision(engine) == head_revision()
        assert {t.name for t in Base.metadata.sorted_tables} <= await _table_names(engine)

        await downgrade(engine, "base")
        assert await current_revision(engine) is None
        assert await _table_names(engine) <= {"alembic_version"}

        await upgrade(engine)
        async with engine.connect() as conn:
            differences = await conn.run_sync(_diff)
        assert differences == []
    finally:
        await engine.dispose()
        await postgres.drop(name)


async def test_check_constraints_and_indexes_match_models(database_url: str) -> None:
    # Autogenerate does not compare CHECK constraints or expression indexes: compare names.
    expected_checks: set[str] = set()
    expected_indexes: set[str] = set()
    for table in Base.metadata.sorted_tables:
        for constraint in table.constraints:
            if constraint.__class__.__name__ == "CheckConstraint":
                expected_checks.add(str(constraint.name))
        expected_indexes.update(str(index.name) for index in table.indexes)
    engine = create_engine(database_url, pool_size=1)
    try:
        async with engine.connect() as conn:
            checks = {
                row[0]
                for row in await conn.execute(
                    text(
                        "SELECT conname FROM pg_constraint c JOIN pg_namespace n "
                        "ON n.oid = c.connamespace WHERE n.nspname = 'public' AND contype = 'c'"
                    )
                )
            }
            indexes = {
                row[0]
                for row in await conn.execute(
                    text("SELECT indexname FROM pg_indexes WHERE schemaname = 'public'")
                )
            }
            triggers = {
                row[0]
                for row in await conn.execute(
                    text("SELECT tgname FROM pg_trigger WHERE NOT tgisinternal")
                )
            }
            vector = await conn.scalar(
                text("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
            )
    finally:
        await engine.dispose()
    assert checks == expected_checks
    assert expected_indexes <= indexes
    assert "trg_mem_asset_folders_check_tree" in triggers
    assert vector is not None and tuple(int(p) for p in vector.split(".")[:2]) >= (0, 8)


async def test_the_migrated_lists_of_known_values_match_the_models(database_url: str) -> None:
    """The CHECK constraints that list allowed values (provenance operations, statuses) hold
    exactly the models' lists: a value added in code needs its migration."""
    expected = {
        "ck_mem_provenance_operation_known": set(PROVENANCE_OPERATIONS),
        "ck_mem_provenance_outcome_known": set(PROVENANCE_OUTCOMES),
    }
    engine = create_engine(database_url, pool_size=1)
    try:
        async with engine.connect() as conn:
            found = {
                row[0]: set(re.findall(r"'([a-z_]+)'", row[1]))
                for row in await conn.execute(
                    text(
                        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
                        "WHERE conname = ANY(:names)"
                    ),
                    {"names": list(expected)},
                )
            }
    finally:
        await engine.dispose()
    assert found == expected


async def test_processes_migrating_one_database_at_once_do_not_collide(
    postgres: PostgresForTests,
) -> None:
    # `serve --processes N` or servers behind a proxy, started together on a new database.
    name = await postgres.create_empty()
    engines = [create_engine(postgres.url(name), pool_size=1) for _ in range(3)]
    try:
        async with anyio.create_task_group() as group:
            for engine in engines:
                group.start_soon(upgrade, engine)
        for engine in engines:
            assert await current_revision(engine) == head_revision()
        async with engines[0].connect() as conn:
            assert await conn.run_sync(_diff) == []
    finally:
        for engine in engines:
            await engine.dispose()
        await postgres.drop(name)


def _alembic_revision(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


async def test_the_revision_checks_agree_with_alembic(postgres: PostgresForTests) -> None:
    # head_revision reads the scripts as text and current_revision the version row, so that
    # a command against a database at head loads neither alembic nor the scripts.
    from alembic.script import ScriptDirectory

    from memory_db.migrate import alembic_config

    assert head_revision() == ScriptDirectory.from_config(alembic_config()).get_current_head()
    name = await postgres.create_empty()
    engine = create_engine(postgres.url(name), pool_size=1)
    try:
        for step in (None, "0009", "head"):
            if step is not None:
                await upgrade(engine, step)
            async with engine.connect() as conn:
                theirs = await conn.run_sync(_alembic_revision)
            assert await current_revision(engine) == theirs
        assert theirs == head_revision()
    finally:
        await engine.dispose()
        await postgres.drop(name)


async def test_revision_0023_fills_in_savedBy_only_where_it_is_certain(
    postgres: PostgresForTests,
) -> None:
    """An asset whose creator had exactly one key was saved with it; any other keeps NULL."""
    name = await postgres.create_empty()
    engine = create_engine(postgres.url(name), pool_size=1)
    database = Database(engine)
    try:
        await upgrade(engine)
        saved: dict[str, str] = {}
        async with database.unit_of_work() as uow:
            for owner, keys in (("one@example.com", 1), ("two@example.com", 2)):
                namespace = (await uow.identities.create(owner, 10**9)).namespace_id
                made = [(await uow.api_keys.create(owner, ["read"]))[0] for _ in range(keys)]
                object_id = new_id("aob")
                await uow.objects.create(
                    object_id=object_id, owner=owner, namespace_id=namespace,
                    sha256=hashlib.sha256(object_id.encode()).hexdigest(),
                    storage_key=f"k/{object_id}", preview_storage_key=f"k/{object_id}.p",
                    preview_sha256="0" * 64, mime_type="image/png", extension="png", nbytes=1,
                    preview_bytes=1, width=1, height=1, etag=None, version_id=None,
                )  # fmt: skip
                await uow.assets.create(
                    VaultScope(owner, f"{owner}/Library"), object_id=object_id,
                    project_id=None, folder_id=None, title="t", description=None,
                    alt_text=None, source_url=None, source_url_hash=None,
                    source_kind="upload", source_ref={}, tags=[], metadata={},
                    created_by=owner, saved_by_key_id=made[0].id,
                )  # fmt: skip
                saved[owner] = made[0].id
        await downgrade(engine, "0022")
        await upgrade(engine)
        async with engine.connect() as conn:
            rows = await conn.execute(text("SELECT created_by, saved_by_key_id FROM mem_assets"))
            found = {owner: key_id for owner, key_id in rows.all()}
        assert found == {"one@example.com": saved["one@example.com"], "two@example.com": None}
    finally:
        await database.close()
        await postgres.drop(name)
