"""Whether search understands meaning, and what callers are told while it does not.

The default embedder (``local-hash-v1``) matches words, colours and layout, never meaning
("lunar" does not find "moon"); a learned model (``make model`` installs one) does. The one
test is :func:`memory_db.embedding.understands_meaning` on the model of the index the alias
points at. While it fails:

- a search whose results are weak says why in ``noGoodMatchReason`` (:data:`SEARCH_REASON`,
  set by :mod:`memory_tools.workflows.search`), so an agent knows rephrasing will not help;
- the web app shows its operator (a session whose key has ``admin``) one line naming
  ``make model`` (:func:`operator_notice`); nobody else sees it, since nobody else can act on it.
"""

from __future__ import annotations

from memory_db import MemoryDbError
from memory_db.embedding import understands_meaning
from memory_db.errors import NotFound
from memory_tools.access import Caller
from memory_tools.errors import translate
from memory_tools.services import MemoryServices

_WORDS_ONLY = "search here understands words, colours and layout only, not meaning"
SEARCH_REASON = f"{_WORDS_ONLY}; an operator can run `make model` to search by meaning"
"""``noGoodMatchReason`` of a weak search while the active model understands words only."""
OPERATOR_NOTICE = (
    "Search understands words, colours and layout only, not meaning. To search by meaning, "
    "run: make model (memory-server models install)."
)
"""The line the web app shows its operator while the active model understands words only."""


def search_reason(model: str, *, good_match: bool) -> str | None:
    """``noGoodMatchReason`` of a search embedded by ``model`` (``None``: nothing to say)."""
    if good_match or understands_meaning(model):
        return None
    return SEARCH_REASON


async def active_model(services: MemoryServices) -> str:
    """The model of the vector index the alias points at (what every search embeds with)."""
    identity = None
    try:
        async with services.database.single_statements() as uow:
            identity = await uow.vector_indexes.identity(
                await uow.vector_indexes.resolve_alias(services.vector_alias)
            )
    except NotFound:
        pass  # no index yet: the first save or search makes it with the configured embedder
    except MemoryDbError as exc:
        raise translate(exc) from None
    if identity is not None:
        return identity.model
    # No index yet, or one made before identities were recorded: the configured embedder.
    return services.embedder.model if services.embedder is not None else ""


async def operator_notice(services: MemoryServices, caller: Caller) -> str | None:
    """:data:`OPERATOR_NOTICE` for an operator while search understands words only."""
    if not caller.has_scope("admin"):
        return None
    if understands_meaning(await active_model(services)):
        return None
    return OPERATOR_NOTICE


__all__ = [
    "OPERATOR_NOTICE",
    "SEARCH_REASON",
    "active_model",
    "operator_notice",
    "search_reason",
]
