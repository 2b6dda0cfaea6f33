"""A save's hold and commit as single statements (issue 31): what each writes, and when not."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from structlog.testing import capture_logs

from memory_db import Database, QuotaExceededError
from memory_db.ids import new_id
from memory_db.repositories import NewImage, Opening, ReservationAttempt, commit_new_image
from memory_db.testing.round_trips import RoundTrip, RoundTrips
from memory_db.unit_of_work import session_of

A = "alice@example.com"
SHA = "ab" * 32
GRACE = timedelta(hours=1)


@asynccontextmanager
async def _counted(database: Database) -> AsyncIterator[list[RoundTrip]]:
    """The round trips of the block (BEGIN and COMMIT included), checkout pings left out."""
    trips = RoundTrips(database.engine)
    await trips.start()
    try:
        with trips.counting() as sent:
            yield sent
    finally:
        trips.stop()


async def _state(database: Database) -> tuple[int, int]:
    async with database.engine.connect() as conn:
        row = (
            await conn.execute(
                text(
                    "SELECT used_bytes, reserved_bytes FROM mem_asset_namespaces "
                    "WHERE owner_identity = :o"
                ),
                {"o": A},
            )
        ).one()
    return int(row[0]), int(row[1])


async def _reservation(database: Database) -> str:
    async with database.unit_of_work() as uow:
        reservation, _created = await uow.quota.open_reservation(
            A,
            operation="asset_save",
            idempotency_key=None,
            expected_bytes=1000,
            expires_at=datetime.now(UTC) + timedelta(minutes=5),
        )
    return reservation.id


async def _namespace(database: Database) -> str:
    async with database.unit_of_work() as uow:
        return (await uow.quota.usage(A)).namespace_id


async def _holding(database: Database, nbytes: int) -> tuple[str, str]:
    """A new owner's namespace and a reservation holding ``nbytes`` of it."""
    async with database.unit_of_work() as uow:
        await uow.identities.create(A, 10_000)
    namespace = await _namespace(database)
    reservation = await _reservation(database)
    async with database.single_statements() as uow:
        await uow.quota.reserve(A, reservation, nbytes)
    return namespace, reservation


async def _object(database: Database, object_id: str) -> None:
    async with database.unit_of_work() as uow:
        await uow.objects.create(
            object_id=object_id,
            owner=A,
            namespace_id=(await uow.quota.usage(A)).namespace_id,
            sha256=SHA,
            storage_key=f"k/{object_id}",
            preview_storage_key=f"k/{object_id}.webp",
            preview_sha256="cd" * 32,
            mime_type="image/png",
            extension="png",
            nbytes=300,
            preview_bytes=100,
            width=4,
            height=4,
            etag=None,
            version_id=None,
        )


async def test_a_hold_reads_the_copies_and_holds_what_the_rule_charges_in_one_statement(
    database: Database,
) -> None:
    async with database.unit_of_work() as uow:
        await uow.identities.create(A, 10_000)
    first = await _reservation(database)
    async with _counted(database) as sent, database.single_statements() as uow:
        found = await uow.quota.reserve_for_copies(
            A, first, sha256=SHA, within=GRACE, new_bytes=4_000, shared_bytes=1_000
        )
    assert len([t for t in sent if not t.is_ping and t.call != "prepare"]) == 1  # one statement
    assert found == (False, False, None)
    assert await _state(database) == (0, 4_000)  # no copy: the bytes and the vectors
    # Held again on the same reservation: replaced, not added.
    async with database.single_statements() as uow:
        await uow.quota.reserve_for_copies(
            A, first, sha256=SHA, within=GRACE, new_bytes=3_000, shared_bytes=1_000
        )
    assert await _state(database) == (0, 3_000)

    await _object(database, new_id("aob"))
    second = await _reservation(database)
    async with database.single_statements() as uow:
        found = await uow.quota.reserve_for_copies(
            A, second, sha256=SHA, within=GRACE, new_bytes=4_000, shared_bytes=1_000
        )
    assert found == (True, False, None)
    assert await _state(database) == (0, 4_000)  # a live copy: the vectors only

    # More than the quota allows: refused with the numbers, and nothing moved.
    third = await _reservation(database)
    with pytest.raises(QuotaExceededError):
        async with database.single_statements() as uow:
            await uow.quota.reserve_for_copies(
                A, third, sha256="ef" * 32, within=GRACE, new_bytes=7_000, shared_bytes=1_000
            )
    assert await _state(database) == (0, 4_000)


async def test_a_quarantined_copy_holds_nothing(database: Database) -> None:
    async with database.unit_of_work() as uow:
        await uow.identities.create(A, 10_000)
    object_id = new_id("aob")
    await _object(database, object_id)
    async with database.unit_of_work() as uow:
        await uow.objects.quarantine(A, object_id)
    reservation = await _reservation(database)
    async with database.single_statements() as uow:
        found = await uow.quota.reserve_for_copies(
            A, reservation, sha256=SHA, within=GRACE, new_bytes=4_000, shared_bytes=1_000
        )
    assert found == (False, False, "unreadable")
    assert await _state(database) == (0, 0)


def _image(
    namespace_id: str, reservation_id: str, object_id: str, asset_id: str
) -> Callable[..., NewImage]:
    def make(**changes: Any) -> NewImage:
        values: dict[str, Any] = {
            "owner": A,
            "reservation_id": reservation_id,
            "object_values": {
                "id": object_id,
                "owner_identity": A,
                "namespace_id": namespace_id,
                "sha256": SHA,
                "storage_key": f"k/{object_id}",
                "preview_storage_key": f"k/{object_id}.webp",
                "preview_sha256": "cd" * 32,
                "mime_type": "image/png",
                "extension": "png",
                "bytes": 300,
                "preview_bytes": 100,
                "width": 4,
                "height": 4,
                "etag": None,
                "version_id": None,
                "status": "available",
            },
            "asset_values": {
                "id": asset_id,
                "owner_identity": A,
                "vault": f"{A}/Library",
                "project_id": None,
                "folder_id": None,
                "object_id": object_id,
                "title": "a chart",
                "description": None,
                "alt_text": None,
                "source_url": None,
                "source_url_hash": None,
                "source_kind": "upload",
                "source_ref": {},
                "tags": ["chart"],
                "metadata": {"image": {"format": "png"}},
                "status": "processing",
                "embedding_status": "pending",
                "created_by": A,
                "updated_by": A,
                "original_file_name": None,
            },
            "jobs": [
                ("embed", "visual", "m", 8),
                ("embed", "fused", "m", 8),
                ("ocr", None, "t", None),
            ],
            "used_bytes": 2_400,
            "provenance_operation": "asset_save",
            "provenance_actor": A,
            "provenance_detail": {"bytes": 300},
        }
        return NewImage(**{**values, **changes})

    return make


async def test_a_commit_of_new_bytes_is_one_statement_and_writes_nothing_after_a_lost_race(
    database: Database,
) -> None:
    namespace, reservation = await _holding(database, 3_000)
    object_id, asset_id = new_id("aob"), new_id("ast")
    image = _image(namespace, reservation, object_id, asset_id)
    async with _counted(database) as sent, database.single_statements() as uow:
        jobs = await commit_new_image(session_of(uow), image())
    assert len([t for t in sent if not t.is_ping and t.call != "prepare"]) == 1  # one statement
    assert jobs is not None and len(jobs) == 3
    assert await _state(database) == (2_400, 0)  # the hold became used bytes
    async with database.engine.connect() as conn:
        row = (
            await conn.execute(
                text(
                    "SELECT (SELECT status FROM mem_asset_upload_reservations WHERE id = :r), "
                    "(SELECT asset_id FROM mem_asset_upload_reservations WHERE id = :r), "
                    "(SELECT count(*) FROM mem_asset_embedding_jobs WHERE asset_id = :a), "
                    "(SELECT count(*) FROM mem_provenance WHERE target_id = :a "
                    "AND operation = 'asset_save'), "
                    "(SELECT status FROM mem_assets WHERE id = :a)"
                ),
                {"r": reservation, "a": asset_id},
            )
        ).one()
    assert tuple(row) == ("finalized", asset_id, 3, 1, "processing")

    # Another save of the same bytes, committed second: nothing is written, nothing moved.
    again = await _reservation(database)
    async with database.single_statements() as uow:
        await uow.quota.reserve(A, again, 3_000)
    other = _image(namespace, again, new_id("aob"), new_id("ast"))
    async with database.single_statements() as uow:
        assert await commit_new_image(session_of(uow), other()) is None
    assert await _state(database) == (2_400, 3_000)
    async with database.engine.connect() as conn:
        counts = (
            await conn.execute(
                text(
                    "SELECT (SELECT count(*) FROM mem_assets), "
                    "(SELECT count(*) FROM mem_asset_objects), "
                    "(SELECT count(*) FROM mem_provenance WHERE operation = 'asset_save'), "
                    "(SELECT status FROM mem_asset_upload_reservations WHERE id = :r)"
                ),
                {"r": again},
            )
        ).one()
    assert tuple(counts) == (1, 1, 1, "active")


async def _reservations(database: Database) -> int:
    async with database.engine.connect() as conn:
        return int(
            (
                await conn.execute(text("SELECT count(*) FROM mem_asset_upload_reservations"))
            ).scalar_one()
        )


async def test_an_opening_resolves_the_vault_and_reserves_in_one_statement(
    database: Database,
) -> None:
    """Vault, namespace and reservation in one round trip; a refused opening writes nothing."""
    b, c = "bob@example.com", "carol@example.com"
    async with database.unit_of_work() as uow:
        for identity in (A, b, c):
            await uow.identities.create(identity, 10_000)
        await uow.vaults.grant(A, "Library", b, "read")
    attempt = ReservationAttempt(
        operation="asset_save",
        idempotency_key="key-1",
        expected_bytes=1000,
        expires_at=datetime.now(UTC) + timedelta(minutes=5),
        request={"fingerprint": "f1"},
    )
    writable = {"owner", "admin", "write"}
    async with _counted(database) as sent, database.single_statements() as uow:
        opened = await uow.openings.open_in_vault(
            A, A, "library", permissions=writable, attempt=attempt
        )
    assert len([t for t in sent if not t.is_ping and t.call != "prepare"]) == 1
    assert opened.vault is not None and opened.reservation is not None and opened.created
    assert (opened.vault.handle, opened.vault.permission) == ("Library", "owner")
    assert opened.namespace_id == await _namespace(database)
    assert opened.reservation.request == {"fingerprint": "f1"}
    assert (opened.reservation.vault, opened.reservation.status) == (
        opened.vault.physical_vault,
        "active",
    )
    # The same key again: the first reservation, not a new one.
    async with database.single_statements() as uow:
        again = await uow.openings.open_in_vault(
            A, A, "Library", permissions=writable, attempt=attempt
        )
    assert again.reservation is not None and not again.created
    assert again.reservation.id == opened.reservation.id
    assert await _reservations(database) == 1

    async with database.single_statements() as uow:
        # A grantee who may only read: the vault as they see it, and nothing reserved.
        read_only = await uow.openings.open_in_vault(
            b, A, "Library", permissions=writable, attempt=attempt
        )
        # No grant, and no such vault: nothing seen, nothing reserved.
        unshared = await uow.openings.open_in_vault(
            c, A, "Library", permissions=writable, attempt=attempt
        )
        missing = await uow.openings.open_in_vault(
            A, A, "Elsewhere", permissions=writable, attempt=attempt
        )
    assert read_only.vault is not None and read_only.vault.permission == "read"
    assert read_only.reservation is None and not read_only.created
    assert unshared == missing == Opening(None, None, None, created=False)
    assert await _reservations(database) == 1


async def _waiting_on_a_lock(database: Database, holder: int) -> None:
    """Until a backend other than ``holder``'s waits for a lock (the commit, for the holder).

    Polled outside any transaction: inside one, PostgreSQL answers every read of
    ``pg_stat_activity`` from a snapshot taken at the first, so a poll begun before the
    commit waited never saw it wait (a flaky run). Bounded generously for a busy machine.
    """
    async with database.engine.connect() as conn:
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        for _ in range(3000):
            waiting = (
                await conn.execute(
                    text(
                        "SELECT count(*) FROM pg_locks WHERE NOT granted "
                        "AND pid NOT IN (pg_backend_pid(), :h)"
                    ),
                    {"h": holder},
                )
            ).scalar_one()
            if waiting:
                return
            await anyio.sleep(0.01)
        seen = (
            await conn.execute(
                text(
                    "SELECT pid, state, wait_event_type, wait_event, left(query, 60) "
                    "FROM pg_stat_activity WHERE datname = current_database()"
                )
            )
        ).all()
    raise AssertionError(f"the commit never waited for a lock: {seen}")


async def _deadlocked_commit(
    database: Database, unit: Callable[[], Any]
) -> tuple[list[str] | BaseException | None, list[int], str, str]:
    """A save's commit in ``unit`` made to deadlock once; its outcome and the runs logged.

    The commit locks the owner's counters, then its reservation. Another transaction holds
    the reservation and then asks for the counters: a cycle. It waits 30 s before looking
    for deadlocks, so the commit (waiting first, for 1 s) is the one PostgreSQL aborts.
    """
    namespace, reservation = await _holding(database, 3_000)
    asset_id = new_id("ast")
    image = _image(namespace, reservation, new_id("aob"), asset_id)()
    outcome: list[list[str] | BaseException | None] = []

    async def commit() -> None:
        try:
            async with unit() as uow:
                outcome.append(await commit_new_image(session_of(uow), image))
        except DBAPIError as exc:
            outcome.append(exc)

    with capture_logs() as logs:
        async with database.engine.connect() as other, anyio.create_task_group() as tasks:
            await other.execute(text("SET deadlock_timeout = '30s'"))
            holder = (await other.execute(text("SELECT pg_backend_pid()"))).scalar_one()
            await other.execute(
                text("SELECT 1 FROM mem_asset_upload_reservations WHERE id = :r FOR UPDATE"),
                {"r": reservation},
            )
            tasks.start_soon(commit)
            await _waiting_on_a_lock(database, holder)
            # Blocks until PostgreSQL aborts the commit; then this transaction has both rows.
            await other.execute(
                text(
                    "SELECT 1 FROM mem_asset_namespaces WHERE owner_identity = :o FOR NO KEY UPDATE"
                ),
                {"o": A},
            )
            await other.commit()  # a second run of the commit then takes both rows
    runs = [e["attempt"] for e in logs if e["event"] == "statement_deadlocked_run_again"]
    return outcome[0], runs, asset_id, reservation


async def test_a_commit_aborted_to_break_a_deadlock_runs_again_and_commits_once(
    database: Database,
) -> None:
    committed, runs, asset_id, reservation = await _deadlocked_commit(
        database, database.single_statements
    )
    assert runs == [1]
    assert isinstance(committed, list) and len(committed) == 3
    assert await _state(database) == (2_400, 0)  # charged once
    async with database.engine.connect() as conn:
        counts = (
            await conn.execute(
                text(
                    "SELECT (SELECT count(*) FROM mem_assets WHERE id = :a), "
                    "(SELECT count(*) FROM mem_provenance WHERE target_id = :a), "
                    "(SELECT status FROM mem_asset_upload_reservations WHERE id = :r)"
                ),
                {"a": asset_id, "r": reservation},
            )
        ).one()
    assert tuple(counts) == (1, 1, "finalized")


async def test_a_deadlocked_statement_inside_a_transaction_is_not_run_again(
    database: Database,
) -> None:
    """The transaction is aborted: only its caller can start it again."""
    failed, runs, _asset_id, _reservation_id = await _deadlocked_commit(
        database, database.unit_of_work
    )
    assert isinstance(failed, DBAPIError) and "deadlock detected" in str(failed)
    assert runs == []
    assert await _state(database) == (0, 3_000)  # nothing moved
