"""The asset-state watch: notifications reach the waiters of that asset only, only on commit;
an unreachable database never makes a wait raise or hang past its caller's deadline."""

from __future__ import annotations

import anyio
from sqlalchemy import text

from memory_db import Database
from memory_db.database import create_engine
from memory_db.repositories import ASSET_STATE_CHANNEL, AssetStateWatch


async def _notify(database: Database, payload: str, *, commit: bool = True) -> None:
    async with database.engine.connect() as conn:
        await conn.execute(
            text("SELECT pg_notify(:channel, :payload)"),
            {"channel": ASSET_STATE_CHANNEL, "payload": payload},
        )
        if commit:
            await conn.commit()
        else:
            await conn.rollback()


async def test_a_notification_wakes_only_that_assets_waiters_and_only_on_commit(
    database: Database,
) -> None:
    watch = database.asset_states
    async with watch.watching("ast_a") as a, watch.watching("ast_b") as b:
        await _notify(database, "ast_a", commit=False)  # rolled back: never sent
        await _notify(database, "ast_b")
        with anyio.move_on_after(0.5) as quiet:
            await a.changed()
        assert quiet.cancelled_caught
        with anyio.fail_after(5):
            await b.changed()
        await _notify(database, "ast_a")
        with anyio.fail_after(5):
            await a.changed()
        assert watch.waiters == 2 and watch.listening
    assert watch.waiters == 0 and not watch.listening


async def test_an_unreachable_database_bounds_the_wait_without_raising() -> None:
    engine = create_engine("postgresql+asyncpg://nobody@127.0.0.1:9/none")
    watch = AssetStateWatch(engine)
    try:
        started = anyio.current_time()
        async with watch.watching("ast_x") as subscription:
            assert not watch.listening
            with anyio.move_on_after(1.5):
                await subscription.changed()  # keeps trying to listen, never raises
        # The wait ends when it was told to, not earlier (it never raised). The upper bound only
        # catches a wait that ignored its deadline; it is loose, so a busy machine does not fail it.
        assert 1.5 <= anyio.current_time() - started < 30
        assert watch.waiters == 0 and not watch.listening
    finally:
        await engine.dispose()
