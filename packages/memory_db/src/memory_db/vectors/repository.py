"""The vector indexes on a unit of work's session (``uow.vector_indexes``).

Layers above memory_db never hold the SQLAlchemy session: they open, create, switch and
rebuild indexes through this repository, and run a search's or a worker's statements through
it. The SQL stays in the modules of this package (``ddl``, ``index``, ``rebuilds``,
``ranking``, ``completion``); each method here only binds one of their functions to the
unit's session.
"""

from __future__ import annotations

from functools import partial

from sqlalchemy.ext.asyncio import AsyncSession

from memory_db.embedding.factory import EmbedderIdentity
from memory_db.vectors import ddl, rebuilds
from memory_db.vectors.completion import complete_embeddings
from memory_db.vectors.ddl import DEFAULT_ALIAS, CacheFit, ElementType
from memory_db.vectors.index import VectorIndex
from memory_db.vectors.near_duplicates import find_near_duplicates
from memory_db.vectors.ranking import rank_and_meter, start_search
from memory_db.vectors.rebuilds import Rebuild, SampledVector


class VectorIndexRepository:
    """The versioned vector indexes, their aliases and rebuilds, on one unit's session."""

    def __init__(self, session: AsyncSession) -> None:
        self._session = session
        # The functions with many keyword arguments, documented on them, are bound here as
        # they are, so their signatures have one home: creating an index (and the default one
        # at start-up), a search's two statements and a worker's completion.
        self.create = partial(ddl.create_index, session)
        self.ensure_default = partial(ddl.ensure_default_index, session)
        self.start_search = partial(start_search, session)
        self.rank_and_meter = partial(rank_and_meter, session)
        self.complete_embeddings = partial(complete_embeddings, session)
        # The near-duplicate pairs of assets whose visual vectors are stored (after a
        # completion, or by a ``duplicates`` job).
        self.find_near_duplicates = partial(find_near_duplicates, session)

    # --- indexes and aliases ------------------------------------------------------------------

    async def open(self, name: str) -> VectorIndex:
        """The registered index ``name`` (``NotFound`` if there is none)."""
        return await VectorIndex.open(self._session, name)

    async def open_alias(self, alias: str, *, hold: bool = True) -> VectorIndex:
        """The index ``alias`` points at now, with its mirrors (see ``VectorIndex.open_alias``).

        ``hold``: read the alias ``FOR SHARE``, so a switch waits for this transaction.
        """
        return await VectorIndex.open_alias(self._session, alias, hold=hold)

    def bind(self, index: VectorIndex) -> VectorIndex:
        """``index`` read in an earlier unit, on this one's session, without reading it again."""
        return index.bound(self._session)

    async def resolve_alias(self, alias: str = DEFAULT_ALIAS) -> str:
        """The name of the index ``alias`` points at."""
        return await ddl.resolve_alias(self._session, alias)

    async def lock_alias(self, alias: str) -> str:
        """The index ``alias`` points at, its row locked ``FOR UPDATE`` until the commit."""
        return await rebuilds.lock_alias(self._session, alias)

    async def switch_alias(self, alias: str, name: str) -> None:
        """Point ``alias`` at the index ``name``."""
        await ddl.switch_alias(self._session, alias, name)

    async def drop(self, name: str) -> None:
        """Drop the index ``name`` (refused while an alias points at it)."""
        await ddl.drop_index(self._session, name)

    async def exists(self, name: str) -> bool:
        """Whether an index ``name`` is registered."""
        return await ddl.index_exists(self._session, name)

    async def identity(self, name: str) -> EmbedderIdentity | None:
        """The embedder recorded for the index ``name`` (``None``: made before they were)."""
        return await ddl.index_identity(self._session, name)

    async def describe(self, name: str) -> tuple[int, ElementType]:
        """The dimensions and element type of the index ``name``."""
        return await ddl.describe_index(self._session, name)

    async def cache_fit(self, name: str) -> CacheFit:
        """How the index ``name``'s graph and table compare with the shared buffers."""
        return await ddl.cache_fit(self._session, name)

    async def graph_m(self, name: str) -> int:
        """The neighbours per node of the index ``name``'s HNSW graph."""
        return await ddl.graph_m(self._session, name)

    # --- rebuilds -----------------------------------------------------------------------------

    async def rebuild(self, target: str, *, lock: bool = False) -> Rebuild | None:
        """The rebuild into ``target``, if any; ``lock`` holds its row until the commit."""
        return await rebuilds.get_rebuild(self._session, target, lock=lock)

    async def filling_rebuild(self, alias: str) -> Rebuild | None:
        """The rebuild filling beside the index ``alias`` points at, if any."""
        return await rebuilds.filling_rebuild(self._session, alias)

    async def start_rebuild(
        self, *, alias: str, target: str, source: str, cursor: str | None = None
    ) -> Rebuild:
        """Record a rebuild of ``alias`` from ``source`` into ``target`` (``Conflict`` if busy)."""
        return await rebuilds.start_rebuild(
            self._session, alias=alias, target=target, source=source, cursor=cursor
        )

    async def advance_rebuild(
        self, target: str, *, cursor: str | None, embedded: int, skipped: int
    ) -> None:
        """Add a batch's counts to the rebuild into ``target`` and move its cursor."""
        await rebuilds.advance_rebuild(
            self._session, target, cursor=cursor, embedded=embedded, skipped=skipped
        )

    async def mark_switched(self, target: str) -> None:
        """Record that the alias now points at the rebuild's ``target``."""
        await rebuilds.mark_switched(self._session, target)

    async def abandon_rebuild(self, target: str) -> bool:
        """Forget a rebuild into ``target`` that never switched; whether there was one."""
        return await rebuilds.abandon_rebuild(self._session, target)

    async def count_assets(self, name: str) -> int:
        """How many assets have a vector in the index ``name``."""
        return await rebuilds.count_assets(self._session, name)

    async def missing_assets(
        self, source: str, target: str, *, after: str | None, limit: int
    ) -> list[tuple[str, str]]:
        """``(owner, asset id)`` of assets with vectors in ``source`` and none in ``target``."""
        return await rebuilds.missing_assets(
            self._session, source, target, after=after, limit=limit
        )

    async def sample_vectors(self, name: str, size: int) -> list[SampledVector]:
        """About ``size`` stored vectors of the index ``name`` (from a random point), for recall."""
        return await rebuilds.sample_vectors(self._session, name, size)
