"""A large library of asset rows written with one statement per vault, for plans and timings.

Listing's plans are a fact of the data's size and shape, so a test that checks them (and the
script that times them) needs a library of thousands of assets with every kind of row a
listing meets: several vaults and owners, projects and folders, tags (and none), every
source kind and MIME type, scraped pages on a few hosts, every status, and a trash holding
both restorable and purged assets. :func:`fill_library` writes such a library with
``INSERT ... SELECT generate_series`` (no images, no vectors: listing reads neither), then
``ANALYZE``, so the planner sees the real distribution.

Asset ``i`` of a vault (0 = newest) is created ``i // 2`` seconds before ``now``: two assets
share every creation time, so the id tie-break of the keyset order is exercised.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncSession

from memory_db.ids import new_id
from memory_db.repositories.assets import AnySelect, AssetRepository
from memory_db.repositories.filters import AssetFilter
from memory_db.repositories.records import VaultScope
from memory_db.unit_of_work import Database, session_of

TAGS = tuple(f"tag{n:02d}" for n in range(40))
# Tagged on one asset in a thousand: a filter the ordered walk meets rarely.
RARE_TAG = "rare"
# Tagged on no asset at all: the worst case of a filter checked while walking.
ABSENT_TAG = "absent"
# The unique indexes on the id: a lookup reads as many rows as ids are given.
_BY_ID = {"pk_mem_assets", "uq_mem_assets_id_owner_identity"}
# The tags' GIN index: a bitmap of it (alone or ANDed with another) holds the assets holding
# the tags, no more.
_TAGS = "ix_mem_assets_tags"


def _bounded(read_with: set[str]) -> bool:
    return bool(read_with) and (read_with <= _BY_ID or _TAGS in read_with)


# The page a listing reads: image_asset_list's default limit and the web trash's page, each
# with the one more row that tells whether another page follows.
LIST_PAGE = 25 + 1
# The trash window the shapes use: the default delete grace (ASSET_DELETE_GRACE_HOURS).
TRASH_WINDOW = timedelta(hours=168)
TRASH_PAGE = 24 + 1
HOSTS = tuple(f"host{n}.example" for n in range(10))
# The keys that saved a vault's assets (``savedBy``): a quarter each of six assets in seven;
# the seventh was saved before keys were recorded (NULL).
SAVERS = tuple(f"akey_saver{n}" for n in range(4))


@dataclass(frozen=True)
class FilledVault:
    """A filled vault: its scope, its assets, and its projects' and folders' ids."""

    scope: VaultScope
    assets: int
    # When its newest asset was created; asset i was created i // 2 seconds before.
    newest: datetime
    projects: tuple[str, ...]
    # (project, folder, its child folder) per project
    folders: tuple[tuple[str, str, str], ...]


async def fill_library(
    database: Database,
    owner: str,
    vaults: dict[str, int],
    *,
    projects_per_vault: int = 10,
    now: datetime | None = None,
) -> list[FilledVault]:
    """Create ``owner`` with ``vaults`` (handle → asset count) and write their assets.

    ``Library`` is the owner's default vault; other handles are created. Per hundred assets of
    a vault: 1 ``processing``, 1 ``failed``, 1 ``deleting``, 3 ``deleted`` (one of them purged,
    the others deleted within the last days), the rest ``ready``; 30 in a project (ten in
    turn: of each project's, a third in its folder and a third in that folder's child); a
    third untagged, the others with two of :data:`TAGS` (and one in a thousand with
    :data:`RARE_TAG`); upload, scrape, screenshot, instagram, external_url and import in a
    fixed cycle; four MIME types in turn.
    """
    moment = now or datetime.now(UTC)
    filled: list[FilledVault] = []
    async with database.unit_of_work() as uow:
        identity = await uow.identities.create(owner, 10**15)
        for handle, count in vaults.items():
            if handle != "Library":
                await uow.vaults.create(owner, handle)
            scope = VaultScope(identity.owner_identity, f"{identity.owner_identity}/{handle}")
            projects: list[str] = []
            folders: list[tuple[str, str, str]] = []
            for p in range(projects_per_vault):
                project = await uow.projects.create(
                    scope, name=f"Project {p}", description=None, created_by=owner
                )
                folder = await uow.folders.create(
                    scope, project_id=project.id, parent_id=None, name="Folder"
                )
                child = await uow.folders.create(
                    scope, project_id=project.id, parent_id=folder.id, name="Child"
                )
                projects.append(project.id)
                folders.append((project.id, folder.id, child.id))
            filled.append(FilledVault(scope, count, moment, tuple(projects), tuple(folders)))
        for vault in filled:
            await _insert_rows(session_of(uow), identity.namespace_id, vault, moment)
    async with database.unit_of_work() as uow:
        await session_of(uow).execute(text("ANALYZE mem_assets"))
        await session_of(uow).execute(text("ANALYZE mem_asset_objects"))
    return filled


async def _insert_rows(
    session: AsyncSession, namespace: str, vault: FilledVault, now: datetime
) -> None:
    owner, physical = vault.scope.owner_identity, vault.scope.physical_vault
    # Valid ids: six letters of a fresh id, then the row number spelt in letters (a-j).
    prefix = new_id("ast")[4:10]
    params = {
        "owner": owner,
        "vault": physical,
        "namespace": namespace,
        "n": vault.assets,
        "now": now,
        "prefix": prefix,
        "projects": list(vault.projects),
        "folders": [f for _, f, _ in vault.folders],
        "children": [c for _, _, c in vault.folders],
        "tags": list(TAGS),
        "rare": RARE_TAG,
        "hosts": list(HOSTS),
    }
    # One row per asset: its number, its id body, and the lists its columns pick from.
    numbered = """
        WITH given AS (
            SELECT CAST(:prefix AS text) AS prefix, CAST(:namespace AS text) AS namespace,
                   CAST(:now AS timestamptz) AS now, CAST(:projects AS text[]) AS projects,
                   CAST(:folders AS text[]) AS folders, CAST(:children AS text[]) AS children,
                   CAST(:tags AS text[]) AS tags, CAST(:hosts AS text[]) AS hosts,
                   CAST(:rare AS text) AS rare
        ), rows AS (
            SELECT i, given.*,
                   prefix || translate(lpad(i::text, 20, '0'), '0123456789', 'abcdefghij')
                       AS body
            FROM given, generate_series(0, CAST(:n AS integer) - 1) AS i
        )
    """
    await session.execute(
        text(
            numbered  # noqa: S608 (constant text only; every value is a bound parameter)
            + """
            INSERT INTO mem_asset_objects (id, owner_identity, namespace_id, sha256, storage_key,
                preview_storage_key, mime_type, extension, bytes, preview_bytes, width, height,
                status)
            SELECT 'aob_' || body, :owner, namespace,
                   encode(sha256(convert_to(body, 'UTF8')), 'hex'),
                   'fill/' || namespace || '/' || body || '/original',
                   'fill/' || namespace || '/' || body || '/preview.webp',
                   (ARRAY['image/png', 'image/jpeg', 'image/webp', 'image/gif'])[i % 4 + 1],
                   (ARRAY['png', 'jpg', 'webp', 'gif'])[i % 4 + 1],
                   50000, 8000, 800, 600,
                   CASE WHEN i % 100 IN (2, 3, 4, 5) THEN 'deleting' ELSE 'available' END
            FROM rows
            """
        ),
        params,
    )
    await session.execute(
        text(
            numbered  # noqa: S608 (constant text only; every value is a bound parameter)
            + """
            INSERT INTO mem_assets (id, owner_identity, vault, project_id, folder_id, object_id,
                title, source_url, source_kind, tags, status, embedding_status, created_by,
                updated_by, created_at, updated_at, deleted_at, purged_at, saved_by_key_id,
                taken_at)
            SELECT 'ast_' || body, :owner, :vault,
                   CASE WHEN i % 10 < 3 THEN projects[i / 10 % cardinality(projects) + 1] END,
                   CASE WHEN i % 10 = 1 THEN folders[i / 10 % cardinality(folders) + 1]
                        WHEN i % 10 = 2 THEN children[i / 10 % cardinality(children) + 1] END,
                   'aob_' || body,
                   'Image ' || i,
                   CASE WHEN i % 6 IN (1, 4)
                        THEN 'https://' || hosts[i % cardinality(hosts) + 1] || '/p/' || i END,
                   (ARRAY['upload', 'scrape', 'screenshot', 'instagram', 'external_url',
                          'import'])[i % 6 + 1],
                   CASE WHEN i % 3 = 0 THEN '[]'::jsonb
                        WHEN i % 1000 = 1
                        THEN jsonb_build_array(rare, tags[i % cardinality(tags) + 1])
                        ELSE jsonb_build_array(tags[i % cardinality(tags) + 1],
                                               tags[(i * 7) % cardinality(tags) + 1]) END,
                   CASE i % 100 WHEN 0 THEN 'processing' WHEN 1 THEN 'failed'
                        WHEN 2 THEN 'deleting' WHEN 3 THEN 'deleted' WHEN 4 THEN 'deleted'
                        WHEN 5 THEN 'deleted' ELSE 'ready' END,
                   'ready', :owner, :owner,
                   now - make_interval(secs => i / 2),
                   now - make_interval(secs => i / 2),
                   CASE WHEN i % 100 IN (2, 3, 4, 5) THEN now - make_interval(secs => i / 4) END,
                   CASE WHEN i % 100 = 5 THEN now - make_interval(secs => i / 4) END,
                   CASE WHEN i % 7 <> 0 THEN 'akey_saver' || (i % 4) END,
                   CASE WHEN i % 5 <> 4
                        THEN now - make_interval(days => 30, secs => (i * 7919) % 100000) END
            FROM rows
            """
        ),
        params,
    )


@dataclass(frozen=True)
class ListingShape:
    """One statement a listing can send: what it asks, and the repository's statement for it.

    ``kind`` is ``list`` (``AssetRepository.list_statement``) or ``trash``
    (``AssetRepository.trash_statement``).
    """

    name: str
    kind: str
    scopes: tuple[VaultScope, ...]
    filters: AssetFilter
    newest_first: bool
    limit: int
    after: tuple[datetime, str] | None = None
    asset_id: str | None = None
    by_taken: bool = False

    @property
    def statement(self) -> AnySelect:
        """The statement the repository sends for this listing."""
        if self.kind == "trash":
            return AssetRepository.trash_statement(
                self.scopes,
                window=TRASH_WINDOW,
                limit=self.limit,
                after=self.after,
                asset_id=self.asset_id,
            )
        return AssetRepository.list_statement(
            self.scopes,
            self.filters,
            newest_first=self.newest_first,
            limit=self.limit,
            after=self.after,
            by_taken=self.by_taken,
        )


def listing_shapes(mine: list[FilledVault], shared: FilledVault) -> list[ListingShape]:
    """Every shape of listing query the tools and the web app send, built by the repository.

    ``image_asset_list`` (and the web library, which calls it): both orders, first page and a
    page after a cursor, in one vault or in every readable vault (``mine`` and a vault another
    owner shared), with no filter and each filter a caller can set, alone: project, folder,
    folder with subfolders, tags (common, rare, absent, two), untagged, source kinds, source
    host, MIME types, created after / before / between, the key that saved (one of a quarter
    of the assets, and one that saved none). The trash (``image_asset_trash_list``
    and the web trash): first page, after a cursor, one asset's preview, one vault and all.
    """
    library = mine[0]
    project, folder, child = library.folders[0]
    one = (library.scope,)
    every = tuple(vault.scope for vault in [*mine, shared])
    # The creation time of the library's middle asset, and of its asset three quarters down.
    middle = library.newest - timedelta(seconds=library.assets // 4)
    older = library.newest - timedelta(seconds=library.assets * 3 // 8)
    # Capture times are spread over 100,000 seconds from 30 days back (four assets in five).
    taken_middle = library.newest - timedelta(days=30, seconds=50_000)
    taken_older = library.newest - timedelta(days=30, seconds=75_000)
    filters: dict[str, AssetFilter] = {
        "no filter": AssetFilter(),
        "tag": AssetFilter(tags=(TAGS[5],)),
        "two tags": AssetFilter(tags=(TAGS[1], TAGS[7])),
        "rare tag": AssetFilter(tags=(RARE_TAG,)),
        "absent tag": AssetFilter(tags=(ABSENT_TAG,)),
        "untagged": AssetFilter(untagged=True),
        "one source kind": AssetFilter(source_kinds=("scrape",)),
        "two source kinds": AssetFilter(source_kinds=("upload", "instagram")),
        "source host": AssetFilter(source_host=HOSTS[3]),
        "mime type": AssetFilter(mime_types=("image/png",)),
        "created after": AssetFilter(created_after=middle),
        "created before": AssetFilter(created_before=middle),
        "created between": AssetFilter(created_after=older, created_before=middle),
        "saved by": AssetFilter(saved_by=SAVERS[1]),
        "saved by no asset's key": AssetFilter(saved_by="akey_nobody"),
        "taken after": AssetFilter(taken_after=taken_middle),
        "taken before": AssetFilter(taken_before=taken_middle),
        "taken between": AssetFilter(taken_after=taken_older, taken_before=taken_middle),
    }
    places: dict[str, AssetFilter] = {
        "project": AssetFilter(project_id=project),
        "folder": AssetFilter(project_id=project, folder_ids=(folder,)),
        "folder and subfolders": AssetFilter(project_id=project, folder_ids=(folder, child)),
    }
    # A cursor in the middle of the library: newest first continues below it, oldest above.
    cursor = (middle, "ast_" + "m" * 26)
    shapes: list[ListingShape] = []
    for newest_first in (True, False):
        for after in (None, cursor):
            label = ("newest" if newest_first else "oldest") + (" after" if after else "")
            cases = [(f"{name}, one vault", one, f) for name, f in filters.items()]
            cases += [(f"{name}, every vault", every, f) for name, f in filters.items()]
            cases += [(name, one, f) for name, f in places.items()]
            shapes += [
                ListingShape(
                    f"list {label}: {name}", "list", scopes, chosen, newest_first, LIST_PAGE, after
                )
                for name, scopes, chosen in cases
            ]
    # By capture time (the ``taken`` order, and backwards): each filter, one vault and all.
    taken_cursor = (taken_middle, cursor[1])
    for newest_first in (True, False):
        for after in (None, taken_cursor):
            label = ("taken" if newest_first else "taken reversed") + (" after" if after else "")
            # Not a creation range: no index holds both orders; it reads the range and sorts
            # it (docs/scaling.md#listing-at-scale).
            by_taken = {k: f for k, f in filters.items() if not k.startswith("created")}
            cases = [(f"{name}, one vault", one, f) for name, f in by_taken.items()]
            cases += [(f"{name}, every vault", every, f) for name, f in by_taken.items()]
            cases += [(name, one, f) for name, f in places.items()]
            shapes += [
                ListingShape(
                    f"list {label}: {name}",
                    "list",
                    scopes,
                    chosen,
                    newest_first,
                    LIST_PAGE,
                    after,
                    by_taken=True,
                )
                for name, scopes, chosen in cases
            ]
    # Assets are deleted (i // 4) seconds ago: a cursor in the middle of the trash.
    deleted = (library.newest - timedelta(seconds=library.assets // 8), cursor[1])
    for name, scopes in (("one vault", one), ("every vault", every)):
        for after in (None, deleted):
            shapes.append(
                ListingShape(
                    f"trash{' after' if after else ''}: {name}",
                    "trash",
                    scopes,
                    AssetFilter(),
                    True,
                    TRASH_PAGE,
                    after,
                )
            )
        shapes.append(
            ListingShape(
                f"trash preview: {name}",
                "trash",
                scopes,
                AssetFilter(),
                True,
                1,
                asset_id="ast_" + "m" * 26,
            )
        )
    return shapes


async def explain(driver: Any, statement: AnySelect, *, generic: bool) -> dict[str, Any]:
    """``EXPLAIN (FORMAT JSON)`` of ``statement`` on ``driver`` (an asyncpg connection).

    ``generic=False``: planned with its values, as the first executions of a prepared
    statement are (a custom plan). ``generic=True``: the plan PostgreSQL may cache for the
    prepared statement after five executions, made without the values (``$n`` stays
    unknown): prepared as asyncpg prepares it, explained with ``force_generic_plan``.
    """
    dialect = postgresql.asyncpg.dialect()  # type: ignore[attr-defined]
    done = statement.compile(dialect=dialect, compile_kwargs={"render_postcompile": True})
    if not generic:
        found = await driver.fetchval(f"EXPLAIN (FORMAT JSON) {done.string}", *arguments(done))
    else:
        count = len(done.positiontup or [])
        await driver.execute(f"PREPARE listing_shape AS {done.string}")
        try:
            await driver.execute("SET plan_cache_mode = force_generic_plan")
            nulls = ", ".join(["NULL"] * count)
            found = await driver.fetchval(
                f"EXPLAIN (FORMAT JSON) EXECUTE listing_shape{f'({nulls})' if count else ''}"
            )
        finally:
            await driver.execute("RESET plan_cache_mode; DEALLOCATE listing_shape")
    plans = json.loads(found) if isinstance(found, str) else found
    return plans[0]


def arguments(done: Any) -> list[Any]:
    """The values asyncpg is sent for a compiled statement, as SQLAlchemy converts them."""
    dialect = done.dialect
    values: list[Any] = []
    for name in done.positiontup or []:
        value = done.params[name]
        bind = done.binds.get(name)
        if bind is not None:
            convert = bind.type.dialect_impl(dialect).bind_processor(dialect)
            value = convert(value) if convert is not None else value
        values.append(value)
    return values


def unbounded_reads(plan: dict[str, Any], table: str = "mem_assets") -> list[str]:
    """What in an ``EXPLAIN (FORMAT JSON)`` plan reads ``table`` without a bound.

    Bounded: an index scan the page's ``LIMIT`` stops (the order walked), anything below a
    ``Limit`` node (each vault's page, before pages are merged), and a sort of the assets one
    tag names (a GIN bitmap of ``ix_mem_assets_tags``: as many rows as hold the tag, and the
    ordered walk is chosen when they are many), and assets looked up by id (the merged pages'
    rows, as many as the pages hold). Unbounded: a sequential scan, and a sort of
    rows read any other way (a whole vault, a whole project).
    """
    found: list[str] = []

    def indexes(node: dict[str, Any]) -> set[str]:
        below = {node["Index Name"]} if "Index Name" in node else set[str]()
        for child in node.get("Plans", []):
            below |= indexes(child)
        return below

    def walk(node: dict[str, Any], limited: bool, sorted_above: bool) -> None:
        kind = node["Node Type"]
        if kind == "Limit":
            limited, sorted_above = True, False
        if node.get("Relation Name") == table:
            if kind == "Seq Scan":
                found.append(f"Seq Scan on {table}")
            elif sorted_above and not limited and not _bounded(indexes(node)):
                found.append(f"Sort over {kind} on {table} ({', '.join(sorted(indexes(node)))})")
        # An incremental sort reads in the order of its presorted key (its groups are the rows
        # sharing one creation time), so the Limit above it still bounds what it reads.
        sorts = kind == "Sort"
        for child in node.get("Plans", []):
            walk(child, limited and not sorts, sorted_above or sorts)

    walk(plan["Plan"], False, False)
    return found
