"""What the workflows need, built once by an app's bootstrap and shared by every tool call."""

from __future__ import annotations

from dataclasses import dataclass

from memory_db import Database, MemorySettings
from memory_db.storage import AssetObjectStore


@dataclass(frozen=True)
class MemoryServices:
    """Database, object store and settings of one running server."""

    database: Database
    store: AssetObjectStore
    settings: MemorySettings
    # The key a stdio server acts as (MEMORY_API_KEY); HTTP callers present their own.
    default_api_key: str | None = None
