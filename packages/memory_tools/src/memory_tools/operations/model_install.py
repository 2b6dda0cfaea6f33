"""``memory-server models install [NAME]`` (``make model``): search by meaning in one command.

:func:`install_model` makes one decision per step and reuses the operations that do the work:

1. **the files.** When ``ASSET_EMBED_MODEL_DIR/<name>`` is missing, :func:`fetch_model`
   downloads the catalog's pinned files (an entry that is not fully pinned is refused before
   any request), checks each against its pins, runs the model once and only then moves the
   directory into place. Nothing else has been touched yet: a machine without the network
   fails here, in one line, with no model directory, no index and the alias where it was.
2. **already active?** Only now is the database opened. When the alias already points at an
   index of this model (``clip/<name>/<dimensions>``), there is nothing to do.
3. **the switch.** Otherwise a directory that was there before (an earlier install, or one
   installed by hand) is checked with :func:`verify_model`, and :func:`reindex` rebuilds into
   ``clip_<name>`` (dual-write, verify, then the alias moves), resuming an interrupted rebuild
   or switching back to a kept index of this model. The previous index is kept: ``reindex --to
   OLD`` switches back without re-embedding what it holds.

The caller chooses how the steps show their progress (:class:`InstallSteps`): the command line
shows bytes downloaded, then assets embedded.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Generator
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from memory_db import MemoryDbError, MemorySettings, get_logger
from memory_db.embedding import EmbedderIdentity
from memory_db.embedding.clip_catalog import (
    CATALOG,
    HUB_URL,
    RECOMMENDED_MODEL,
    CatalogModel,
    catalog_model,
)
from memory_db.vectors import check_identifier
from memory_tools.errors import InvalidInputFailure, NotFoundFailure, translate
from memory_tools.operations.model_downloads import (
    FetchReport,
    VerifyReport,
    fetch_model,
    verify_model,
)
from memory_tools.operations.reindex import ReindexReport, ReindexRequest, reindex
from memory_tools.progress import ProgressCallback, no_progress_bar
from memory_tools.services import MemoryServices

log = get_logger(__name__)

PROVIDER = "clip"
# An index name is a table name: at most 48 characters (memory_db.vectors.ddl.MAX_NAME).
_INDEX_NAME_LENGTH = 48


class InstallSteps(Protocol):
    """How the caller shows each long step: a context giving that step's progress callback."""

    def step(self, description: str) -> AbstractContextManager[ProgressCallback]:
        """Show ``description`` while the step runs; the callback hears done, total, detail."""
        ...


class SilentSteps:
    """Steps that show nothing (a caller that asked for no progress)."""

    @contextlib.contextmanager
    def step(self, description: str) -> Generator[ProgressCallback]:
        """Nothing shown: the callback drops every report."""
        del description
        yield no_progress_bar


@dataclass(frozen=True)
class InstallRequest:
    """What to install: a catalog name (the recommended one by default), from which hub."""

    name: str = RECOMMENDED_MODEL
    hub_url: str = HUB_URL
    catalog: tuple[CatalogModel, ...] = CATALOG


@dataclass(frozen=True)
class InstallReport:
    """What an install did: downloaded or not, and whether the alias moved."""

    name: str
    directory: Path
    index: str  # the index now active: the new one, or the one that already was
    identity: EmbedderIdentity
    fetched: FetchReport | None  # None: the directory was there already
    verified: VerifyReport | None  # None when nothing needed checking (already active)
    reindexed: ReindexReport | None  # None: the alias already pointed at this model

    @property
    def already_active(self) -> bool:
        """Installed and active before this run: nothing was done."""
        return self.reindexed is None


def index_name(model: str) -> str:
    """The vector index a model is installed into: ``clip_<name>`` as a table name.

    ``clip-vit-b-32-openai-int8`` → ``clip_vit_b_32_openai_int8`` (the name's own ``clip``
    prefix is not repeated).
    """
    stem = re.sub(r"[^a-z0-9_]", "_", model.lower()).removeprefix(f"{PROVIDER}_")
    return check_identifier(f"{PROVIDER}_{stem}"[:_INDEX_NAME_LENGTH])


def _entry(request: InstallRequest) -> CatalogModel:
    entry = catalog_model(request.name, request.catalog)
    if entry is None:
        known = ", ".join(m.name for m in request.catalog)
        raise NotFoundFailure(f"no model {request.name!r} in the catalog (one of {known})")
    return entry


async def _active(services: MemoryServices) -> tuple[str, EmbedderIdentity | None]:
    """The index the alias points at, and its embedder."""
    try:
        async with services.database.unit_of_work() as uow:
            current = await uow.vector_indexes.resolve_alias(services.vector_alias)
            return current, await uow.vector_indexes.identity(current)
    except MemoryDbError as exc:
        raise translate(exc) from None


async def install_model(
    settings: MemorySettings,
    request: InstallRequest,
    *,
    open_services: Callable[[], AbstractAsyncContextManager[MemoryServices]],
    steps: InstallSteps | None = None,
) -> InstallReport:
    """Fetch (when missing), verify, and switch the active index to ``request.name``.

    ``open_services`` opens the database (and the rest an operator command needs) only after
    the files are in place: see the module docstring for the steps and what each refuses.
    """
    shown = steps or SilentSteps()
    entry = _entry(request)
    directory = settings.model_dir / entry.name
    fetched: FetchReport | None = None
    if not directory.exists():
        with shown.step(f"downloading {entry.name}") as progress:
            fetched = await fetch_model(
                settings,
                entry.name,
                hub_url=request.hub_url,
                progress=progress,
                catalog=request.catalog,
            )
    identity = EmbedderIdentity(PROVIDER, entry.name, entry.dimensions)
    target = index_name(entry.name)
    async with open_services() as services:
        current, active = await _active(services)
        if active == identity:
            # Whatever that index is called (an install by hand, a `reindex --to` of its own).
            log.info("clip_model_already_active", model=entry.name, index=current)
            return InstallReport(entry.name, directory, current, identity, fetched, None, None)
        verified = (
            fetched.verified
            if fetched is not None
            else await verify_model(directory, expect_name=entry.name)
        )
        if verified.dimensions != entry.dimensions:
            raise InvalidInputFailure(
                f"{directory} makes {verified.dimensions}-d vectors, the catalog's {entry.name} "
                f"{entry.dimensions}-d: fetch it again (memory-server models fetch {entry.name} "
                "--force)"
            )
        with shown.step(f"re-embedding every image into {target}") as progress:
            reindexed = await reindex(
                services,
                ReindexRequest(
                    target=target,
                    provider=PROVIDER,
                    model=entry.name,
                    dimensions=entry.dimensions,
                ),
                progress=progress,
            )
    log.info("clip_model_installed", model=entry.name, index=target, source=reindexed.source)
    return InstallReport(entry.name, directory, target, identity, fetched, verified, reindexed)


__all__ = [
    "InstallReport",
    "InstallRequest",
    "InstallSteps",
    "SilentSteps",
    "index_name",
    "install_model",
]
