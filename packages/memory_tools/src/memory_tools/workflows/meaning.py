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
from memory_tools.access import Caller
from memory_tools.errors import translate
from memory_tools.services import MemoryServices

_WORDS_ONLY = "search here understands words, colours and layout only, not meaning"
SEARCH_REASON = f"{_WORDS_ONLY}; an operator can run `make model` to search by meaning"
"""``noGoodMatchReason`` of a weak search while the active model understands words only."""
OPERATOR_NOTICE = (
    "Search understands words, colours and layout only, not meaning: run `make model` "
    "(memory-server models install) to search by meaning."
)
"""The line the web app shows its operator while the active model understands words only."""


def search_reason(model: str, *, good_match: bool) -> str | None:
    """``noGoodMatchReason`` of a search embedded by ``model`` (``None``: nothing to say)."""
    if good_match or understands_meaning(model):
        return None
    return SEARCH_REASON


async def active_model(services: MemoryServices) -> str:
    """The model of the vector index the alias points at (what every search embeds with)."""
    try:
        async with services.database.single_statements() as uow:
            index = await uow.vector_indexes.open_alias(services.vector_alias, hold=False)
    except MemoryDbError as exc:
        raise translate(exc) from None
    if index.identity is not None:
        return index.identity.model
    # An index made before identities were recorded: the process's configured embedder.
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
