"""Alembic environment: migrations run on a connection handed over by ``memory_db.migrate``."""

from __future__ import annotations

from alembic import context

from memory_db.migrate import include_name
from memory_db.schema import Base

config = context.config
connection = config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations through `memory-server migrate` (memory_db.migrate)")

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    compare_type=True,
    include_name=include_name,
    transaction_per_migration=False,
)
with context.begin_transaction():
    context.run_migrations()
