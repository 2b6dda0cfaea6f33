"""Vectors go to and from PostgreSQL in pgvector's binary formats (memory_db.vector_wire)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg  # type: ignore[import-untyped]
import numpy as np
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from memory_db.database import create_engine, to_plain_url
from memory_db.vectors.index import _components  # pyright: ignore[reportPrivateUsage]


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(database_url, pool_size=1)
    try:
        yield engine
    finally:
        await engine.dispose()


def _hard_values(rng: np.random.Generator) -> list[np.ndarray]:
    """Vectors whose rounding to half precision is easy to get wrong."""
    unit = rng.normal(size=(40, 1024))
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    # Halfway between two half-precision neighbours (ties round to even), subnormals, the
    # largest finite half, negative zero, and values that round differently from float32 first.
    edges = np.array([1 + 2**-11, 1 + 3 * 2**-11, 2**-24, 2**-25, 6.1e-5, 65504.0, -0.0, -65504.0])
    tiled = np.resize(edges, 1024) * rng.choice([-1.0, 1.0], size=1024)
    off_by_float32 = (1 + 2**-11 + 2**-40) * np.ones(1024)
    return [*unit, tiled, off_by_float32]


@pytest.mark.parametrize("element", ["halfvec", "vector"])
async def test_a_vector_sent_binary_is_stored_as_the_real_array_cast_stored_it(
    engine: AsyncEngine, element: str
) -> None:
    rng = np.random.default_rng(11)
    async with engine.connect() as connection:
        for values in _hard_values(rng):
            sent = _components(values.tolist(), 1024, element)  # type: ignore[arg-type]
            binary, cast = (
                await connection.execute(
                    text(
                        f"SELECT CAST(CAST(:v AS {element}(1024)) AS text), "
                        f"CAST(CAST(CAST(:a AS real[]) AS {element}(1024)) AS text)"
                    ),
                    {"v": sent, "a": values.tolist()},
                )
            ).one()
            assert binary == cast


@pytest.mark.parametrize(("element", "dtype"), [("halfvec", np.float16), ("vector", np.float32)])
async def test_a_vector_column_reads_as_a_list_of_floats(
    engine: AsyncEngine, element: str, dtype: type
) -> None:
    values = np.array([0.5, -0.25, 1 / 3, 0.0], dtype=np.float32)
    async with engine.connect() as connection:
        read = (
            await connection.execute(text(f"SELECT CAST(:v AS {element}(4))"), {"v": values})
        ).scalar_one()
    assert isinstance(read, list)
    assert all(type(x) is float for x in read)
    assert read == values.astype(dtype).astype(np.float64).tolist()


async def test_every_connection_of_the_pool_knows_the_binary_form(
    engine: AsyncEngine, database_url: str
) -> None:
    """A plain asyncpg connection sends an extension type as text and refuses an array."""
    values = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    plain = await asyncpg.connect(to_plain_url(database_url))
    try:
        with pytest.raises(asyncpg.DataError, match="expected str"):
            await plain.fetchval("SELECT CAST($1 AS halfvec(3))", values)
    finally:
        await plain.close()
    async with engine.connect() as connection:
        raw = await connection.get_raw_connection()
        driver = raw.driver_connection
        assert driver is not None
        assert await driver.fetchval("SELECT CAST($1 AS halfvec(3))", values) == [1.0, 2.0, 3.0]
