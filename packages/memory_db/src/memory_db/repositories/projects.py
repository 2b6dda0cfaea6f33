"""Projects and folders, always within one caller's resolved ``VaultScope``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from sqlalchemy import Select, func, literal, select, tuple_, update
from sqlalchemy.orm import aliased

from memory_db.errors import Conflict, FolderTreeError, InvalidInput, NotFound
from memory_db.ids import is_valid_id, new_id
from memory_db.repositories._base import SessionRepository, record_from_row
from memory_db.repositories._text import FORBIDDEN_CHARACTERS_RULE, has_forbidden_characters
from memory_db.repositories.records import FolderRecord, ProjectRecord, VaultScope
from memory_db.schema import MAX_FOLDER_DEPTH, MAX_NAME_LENGTH, AssetFolder, AssetProject


def validate_name(value: str, what: str) -> str:
    """Trim and check a project or folder name: 1-120 characters, nothing invisible.

    Refused anywhere: control characters (C0, DEL, C1), format characters (bidirectional
    overrides, zero-width characters, soft hyphen, BOM, tags) and line/paragraph separators.
    """
    name = value.strip()
    if not 1 <= len(name) <= MAX_NAME_LENGTH:
        raise InvalidInput(f"{what} name must be 1-{MAX_NAME_LENGTH} characters")
    if has_forbidden_characters(name):
        raise InvalidInput(f"{what} name {FORBIDDEN_CHARACTERS_RULE}")
    return name


def validate_folder_name(value: str) -> str:
    """A project name's rule, and no ``/``, ``.`` or ``..``.

    A folder is shown by its path (``/Trips/2026``): a ``/`` in a name would make two folders
    print as the same path, and ``.``/``..`` read as path steps. Input rule only: names stored
    before it stay readable (nothing looks a folder up by its path).
    """
    name = validate_name(value, "folder")
    if "/" in name:
        raise InvalidInput("folder name must not contain '/' (folder paths are shown as /A/B)")
    if name in {".", ".."}:
        raise InvalidInput(f"folder name must not be {name!r}")
    return name


def _project(row: AssetProject) -> ProjectRecord:
    return record_from_row(ProjectRecord, row)


def _folder(row: AssetFolder) -> FolderRecord:
    return record_from_row(FolderRecord, row)


def _in_scope_projects(scope: VaultScope) -> Select[AssetProject]:
    return select(AssetProject).where(
        AssetProject.owner_identity == scope.owner_identity,
        AssetProject.vault == scope.physical_vault,
        AssetProject.status != "deleted",
    )


def _project_name(name: str, description: str | None) -> str:
    """The checked name of a project being created or updated; its description is bounded."""
    checked = validate_name(name, "project")
    if description is not None and len(description) > 2000:
        raise InvalidInput("project description must be at most 2000 characters")
    return checked


class ProjectRepository(SessionRepository):
    """Projects of one vault."""

    async def create(
        self, scope: VaultScope, *, name: str, description: str | None, created_by: str
    ) -> ProjectRecord:
        """Create an active project; names are unique per vault, case-insensitively."""
        checked = _project_name(name, description)
        row = AssetProject(
            id=new_id("apr"),
            owner_identity=scope.owner_identity,
            vault=scope.physical_vault,
            name=checked,
            description=description,
            created_by=created_by,
        )
        return await self._write(row, lambda: self._session.add(row), checked)

    async def get(
        self, scope: VaultScope, project_id: str, *, key_share: bool = False
    ) -> ProjectRecord:
        """A non-deleted project of this vault, or ``NotFound``.

        ``key_share`` holds the row against a concurrent archive until the transaction ends
        (what a write placing an asset in the project needs).
        """
        if not is_valid_id(project_id, "apr"):
            raise NotFound("project")
        query = _in_scope_projects(scope).where(AssetProject.id == project_id)
        if key_share:
            query = query.with_for_update(key_share=True).execution_options(populate_existing=True)
        row = (await self._session.execute(query)).scalar_one_or_none()
        if row is None:
            raise NotFound("project")
        return _project(row)

    async def find_in(self, scopes: Sequence[VaultScope], project_id: str) -> ProjectRecord:
        """A non-deleted project of one of these vaults, or ``NotFound``.

        For a caller naming a project without its vault: a project id is unique, so it names
        its vault. A project of a vault not in ``scopes`` is ``NotFound`` exactly as a missing
        one is.
        """
        if not scopes or not is_valid_id(project_id, "apr"):
            raise NotFound("project")
        pairs = [(s.owner_identity, s.physical_vault) for s in scopes]
        row = (
            await self._session.execute(
                select(AssetProject).where(
                    AssetProject.id == project_id,
                    tuple_(AssetProject.owner_identity, AssetProject.vault).in_(pairs),
                    AssetProject.status != "deleted",
                )
            )
        ).scalar_one_or_none()
        if row is None:
            raise NotFound("project")
        return _project(row)

    async def list(
        self, scopes: Sequence[VaultScope], *, include_archived: bool = False
    ) -> list[ProjectRecord]:
        """Projects of the given vaults, by vault then name."""
        if not scopes:
            return []
        pairs = [(s.owner_identity, s.physical_vault) for s in scopes]
        statuses = ["active", "archived"] if include_archived else ["active"]
        rows = await self._session.scalars(
            select(AssetProject)
            .where(
                tuple_(AssetProject.owner_identity, AssetProject.vault).in_(pairs),
                AssetProject.status.in_(statuses),
            )
            .order_by(
                AssetProject.owner_identity, AssetProject.vault, func.lower(AssetProject.name)
            )
        )
        return [_project(row) for row in rows]

    async def archive(self, scope: VaultScope, project_id: str) -> ProjectRecord:
        """Archive a project (non-destructive, idempotent)."""
        await self.get(scope, project_id)
        row = (
            await self._session.execute(
                _in_scope_projects(scope).where(AssetProject.id == project_id).with_for_update()
            )
        ).scalar_one()
        if row.status != "archived":
            row.status = "archived"
            row.updated_at = datetime.now(UTC)
            await self._session.flush()
        return _project(row)

    async def lock(self, scope: VaultScope, project_id: str) -> ProjectRecord:
        """A non-deleted project of this vault locked ``FOR UPDATE``, or ``NotFound``.

        The folder tree trigger takes the same lock: holding it serialises this transaction's
        changes with every other change of the project's folder tree.
        """
        if not is_valid_id(project_id, "apr"):
            raise NotFound("project")
        row = (
            await self._session.execute(
                _in_scope_projects(scope)
                .where(AssetProject.id == project_id)
                .with_for_update()
                .execution_options(populate_existing=True)
            )
        ).scalar_one_or_none()
        if row is None:
            raise NotFound("project")
        return _project(row)

    async def update(
        self,
        scope: VaultScope,
        project_id: str,
        *,
        name: str,
        description: str | None,
        status: str,
    ) -> ProjectRecord:
        """Set a project's name, description and status (``active`` or ``archived``).

        Names are unique per vault, case-insensitively: another project's name is ``Conflict``.
        """
        checked = _project_name(name, description)
        if status not in ("active", "archived"):
            raise InvalidInput("project status must be active or archived")
        row = (
            await self._session.execute(
                _in_scope_projects(scope).where(AssetProject.id == project_id).with_for_update()
            )
        ).scalar_one_or_none()
        if row is None:
            raise NotFound("project")

        def apply() -> None:
            row.name = checked
            row.description = description
            row.status = status
            row.updated_at = datetime.now(UTC)

        return await self._write(row, apply, checked)

    async def _write(
        self, row: AssetProject, change: Callable[[], None], name: str
    ) -> ProjectRecord:
        """Apply ``change`` in a savepoint and return the project as written.

        Names are unique among a vault's active projects (a partial unique index): a taken
        name is a ``Conflict``.
        """
        taken = Conflict(f"a project named {name!r} already exists in this vault")
        await self._flush_refusing(change, {"uq_mem_asset_projects_active_name": taken})
        await self._session.refresh(row)
        return _project(row)


class FolderRepository(SessionRepository):
    """Folders of one project; depth and cycles are also enforced by a database trigger."""

    def _scoped(self, scope: VaultScope) -> Select[AssetFolder]:
        return select(AssetFolder).where(
            AssetFolder.owner_identity == scope.owner_identity,
            AssetFolder.vault == scope.physical_vault,
            AssetFolder.deleted_at.is_(None),
        )

    async def create(
        self, scope: VaultScope, *, project_id: str, parent_id: str | None, name: str
    ) -> FolderRecord:
        """Create a folder under ``parent_id`` (None = project root).

        The project row is locked first, as moves and deletions of its folders do: a parent
        deleted meanwhile is seen as gone (``NotFound``), never given a live child.
        """
        checked = validate_folder_name(name)
        project = await ProjectRepository(self._session).lock(scope, project_id)
        if project.status != "active":
            raise Conflict("the project is archived; folders cannot be added to it")
        if parent_id is not None:
            parent = await self.get(scope, parent_id, fresh=True)
            if parent.project_id != project_id:
                raise NotFound("parent folder")
        row = AssetFolder(
            id=new_id("afl"),
            owner_identity=scope.owner_identity,
            vault=scope.physical_vault,
            project_id=project_id,
            parent_id=parent_id,
            name=checked,
        )
        await self._write(lambda: self._session.add(row), checked)
        await self._session.refresh(row)
        return _folder(row)

    async def move(
        self, scope: VaultScope, folder_id: str, new_parent_id: str | None
    ) -> FolderRecord:
        """Move a folder under another folder of the same project (None = project root)."""
        folder = await self.get(scope, folder_id)
        if new_parent_id is not None:
            parent = await self.get(scope, new_parent_id)
            if parent.project_id != folder.project_id:
                raise NotFound("parent folder")
        row = (
            await self._session.execute(self._scoped(scope).where(AssetFolder.id == folder_id))
        ).scalar_one()

        def apply() -> None:
            row.parent_id = new_parent_id
            row.updated_at = datetime.now(UTC)

        await self._write(apply, row.name)
        return _folder(row)

    async def update(
        self, scope: VaultScope, folder_id: str, *, name: str, parent_id: str | None
    ) -> FolderRecord:
        """Rename a folder and place it under ``parent_id`` (None = the project root).

        The parent must be a folder of the same project, neither the folder itself nor one of
        its subfolders, and the moved subtree must stay within 8 levels. The project row is
        locked first, as the folder tree trigger does, so concurrent moves in one project run
        one after the other and each checks the tree the previous one left: together they
        cannot form a cycle. The trigger checks again.
        """
        checked = validate_folder_name(name)
        folder = await self.get(scope, folder_id)
        await ProjectRepository(self._session).lock(scope, folder.project_id)
        rows = await self._session.scalars(
            self._scoped(scope)
            .where(AssetFolder.project_id == folder.project_id)
            .execution_options(populate_existing=True)
        )
        parents = {row.id: row.parent_id for row in rows}
        if folder_id not in parents:
            raise NotFound("folder")  # deleted while this transaction waited for the lock
        if parent_id is not None:
            if parent_id not in parents:
                raise NotFound("parent folder")
            above = folder_depth(parent_id, parents)
            if above is None or folder_id in above:
                raise FolderTreeError(
                    "a folder cannot be moved under itself or one of its subfolders"
                )
            if len(above) + subtree_height(folder_id, parents) > MAX_FOLDER_DEPTH:
                raise FolderTreeError(
                    f"folders can be nested at most {MAX_FOLDER_DEPTH} deep: the folder and "
                    f"its {subtree_height(folder_id, parents) - 1} level(s) of subfolders do "
                    f"not fit under a folder at depth {len(above)}"
                )
        row = (
            await self._session.execute(
                self._scoped(scope).where(AssetFolder.id == folder_id).with_for_update()
            )
        ).scalar_one_or_none()
        if row is None:
            raise NotFound("folder")

        def apply() -> None:
            row.name = checked
            row.parent_id = parent_id
            row.updated_at = datetime.now(UTC)

        await self._write(apply, checked)
        return _folder(row)

    async def get(
        self, scope: VaultScope, folder_id: str, *, key_share: bool = False, fresh: bool = False
    ) -> FolderRecord:
        """An active folder of this vault, or ``NotFound``.

        ``key_share`` holds the row against a concurrent deletion until the transaction ends:
        a deletion locks its folders ``FOR UPDATE`` first, so one of the two waits, and the
        waiting one sees the other's outcome. ``fresh`` reads the row as committed now, not
        as this session last saw it (after waiting for a lock).
        """
        if not is_valid_id(folder_id, "afl"):
            raise NotFound("folder")
        query = self._scoped(scope).where(AssetFolder.id == folder_id)
        if key_share:
            query = query.with_for_update(key_share=True).execution_options(populate_existing=True)
        elif fresh:
            query = query.execution_options(populate_existing=True)
        row = (await self._session.execute(query)).scalar_one_or_none()
        if row is None:
            raise NotFound("folder")
        return _folder(row)

    async def lineage(self, scope: VaultScope, folder_id: str) -> list[FolderRecord]:
        """The folder and its ancestors, root first (one recursive query, at most 8 rows)."""
        base = (
            select(AssetFolder.id, AssetFolder.parent_id, literal(0).label("level"))
            .where(
                AssetFolder.id == folder_id,
                AssetFolder.owner_identity == scope.owner_identity,
                AssetFolder.vault == scope.physical_vault,
                AssetFolder.deleted_at.is_(None),
            )
            .cte("lineage", recursive=True)
        )
        parent = aliased(AssetFolder)
        chain = base.union_all(
            select(parent.id, parent.parent_id, (base.c.level + 1).label("level")).where(
                parent.id == base.c.parent_id,
                parent.owner_identity == scope.owner_identity,
                parent.vault == scope.physical_vault,
                base.c.level < MAX_FOLDER_DEPTH,
            )
        )
        rows = await self._session.execute(
            select(AssetFolder)
            .join(chain, chain.c.id == AssetFolder.id)
            .order_by(chain.c.level.desc())
        )
        lineage = [_folder(row) for row in rows.scalars()]
        if not lineage:
            raise NotFound("folder")
        return lineage

    async def list(self, scope: VaultScope, project_id: str) -> list[FolderRecord]:
        """Every active folder of a project, by name (the caller builds the tree)."""
        await ProjectRepository(self._session).get(scope, project_id)
        rows = await self._session.scalars(
            self._scoped(scope)
            .where(AssetFolder.project_id == project_id)
            .order_by(func.lower(AssetFolder.name), AssetFolder.id)
        )
        return [_folder(row) for row in rows]

    async def list_vault(self, scope: VaultScope) -> list[FolderRecord]:
        """Every active folder of every project of a vault, in one query."""
        rows = await self._session.scalars(
            self._scoped(scope).order_by(
                AssetFolder.project_id, func.lower(AssetFolder.name), AssetFolder.id
            )
        )
        return [_folder(row) for row in rows]

    async def lock(self, scope: VaultScope, folder_ids: Sequence[str]) -> None:
        """Lock active folders ``FOR UPDATE`` (a deletion: saves and moves into them wait)."""
        if folder_ids:
            await self._session.execute(
                self._scoped(scope).where(AssetFolder.id.in_(list(folder_ids))).with_for_update()
            )

    async def mark_deleted(self, scope: VaultScope, folder_ids: Sequence[str]) -> int:
        """Soft-delete folders (their names become free again); return how many changed."""
        if not folder_ids:
            return 0
        result = await self._session.execute(
            update(AssetFolder)
            .where(
                AssetFolder.owner_identity == scope.owner_identity,
                AssetFolder.vault == scope.physical_vault,
                AssetFolder.id.in_(list(folder_ids)),
                AssetFolder.deleted_at.is_(None),
            )
            .values(deleted_at=func.now(), updated_at=func.now())
            .execution_options(synchronize_session=False)
        )
        return int(result.rowcount or 0)  # pyright: ignore[reportAttributeAccessIssue]

    async def _write(self, change: Callable[[], None], name: str) -> None:
        # The tree's rules are the database's too (a unique index, the folder-tree trigger).
        await self._flush_refusing(
            change,
            {
                "uq_mem_asset_folders_active_sibling_name": Conflict(
                    f"a folder named {name!r} already exists here"
                ),
                "folder_depth": FolderTreeError("folders can be nested at most 8 deep"),
                "folder_cycle": FolderTreeError(
                    "a folder cannot be moved under itself or one of its subfolders"
                ),
            },
        )


def folder_depth(folder_id: str, parents: dict[str, str | None]) -> list[str] | None:
    """``folder_id`` and its ancestors, itself first; ``None`` if the chain loops or breaks."""
    chain: list[str] = []
    current: str | None = folder_id
    while current is not None:
        if current in chain or current not in parents:
            return None
        chain.append(current)
        current = parents[current]
    return chain


def subtree_height(folder_id: str, parents: dict[str, str | None]) -> int:
    """Levels in the subtree rooted at ``folder_id``: 1 for a folder without subfolders."""
    children: dict[str, list[str]] = {}
    for child, parent in parents.items():
        if parent is not None:
            children.setdefault(parent, []).append(child)
    height, level = 0, [folder_id]
    while level and height <= MAX_FOLDER_DEPTH * 8:
        height += 1
        level = [child for current in level for child in children.get(current, [])]
    return height
