"""Objects and assets (docs/design.md#model).

Objects are always addressed with their owner, assets with their owner and vault. The embedding
job queue is in :mod:`memory_db.repositories.jobs`, orphan candidates in
:mod:`memory_db.repositories.orphans`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields, replace
from datetime import UTC, datetime, timedelta
from typing import Any, TypeAlias

from sqlalchemy import (
    CTE,
    ColumnElement,
    DateTime,
    Exists,
    Integer,
    Select,
    String,
    Subquery,
    Text,
    Update,
    any_,
    bindparam,
    case,
    cast,
    false,
    func,
    literal,
    null,
    or_,
    select,
    text,
    true,
    tuple_,
    union_all,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY, REGCONFIG, TSQUERY
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.orm import QueryableAttribute

from memory_db.errors import Conflict, InvalidInput, InvalidStorageKey, NotFound
from memory_db.ids import is_valid_id, new_id
from memory_db.repositories._base import SessionRepository, asset_object_join, record_from_row
from memory_db.repositories.asset_states import ASSET_STATE_CHANNEL
from memory_db.repositories.asset_tags import TagChange, change_tags_statement, tag_change
from memory_db.repositories.filters import AssetFilter, taken_key, taken_range
from memory_db.repositories.records import (
    INTEGRITY_CODES,
    AssetRecord,
    AssetSettled,
    ObjectRecord,
    OcrState,
    QuarantineReason,
    StoredAsset,
    TextMatch,
    TrashedAsset,
    VaultScope,
)
from memory_db.schema import ApiKey, Asset, AssetJob, AssetObject
from memory_db.storage.keys import parse_storage_key

_DEDUPE_INDEX = "uq_mem_asset_objects_owner_sha256_active"
# A listing walks one index range per vault (and per folder of a subtree) and merges the
# pages; beyond this many branches, one walk filtered by all of them (see _branches).
MAX_LIST_BRANCHES = 64
# A select of any columns (listing's statements are built in parts, then merged).
AnySelect: TypeAlias = "Select[*tuple[Any, ...]]"
# Assets a reader can see; "deleting" and "deleted" are gone for everyone.
VISIBLE_STATUSES = ("processing", "ready", "failed")
# Full-text matches ranked per query at most (see AssetRepository.search_text).
TEXT_POOL = 300


class DuplicateObject(Conflict):
    """Another object of the same owner already holds these bytes (lost a concurrent race)."""


def object_record(row: AssetObject) -> ObjectRecord:
    """The record of an object row."""
    return record_from_row(ObjectRecord, row)


def in_scopes_named(scopes: Sequence[VaultScope]) -> ColumnElement[bool]:
    """The asset is in one of ``scopes``, each value a named parameter.

    ``scope_owner_<i>`` and ``scope_vault_<i>``: a statement built once for a number of scopes
    takes another caller's scopes as parameters (``memory_db.vectors.ranking``), where the
    plain ``IN`` list binds the pairs as one anonymous value fixed when it is built.
    """
    pairs = [
        tuple_(
            bindparam(f"scope_owner_{i}", scope.owner_identity, type_=Text),
            bindparam(f"scope_vault_{i}", scope.physical_vault, type_=Text),
        )
        for i, scope in enumerate(scopes)
    ]
    return tuple_(Asset.owner_identity, Asset.vault).in_(pairs)


def scope_values(scopes: Sequence[VaultScope]) -> dict[str, object]:
    """The parameters of :func:`in_scopes_named` for ``scopes``."""
    values: dict[str, object] = {}
    for i, scope in enumerate(scopes):
        values[f"scope_owner_{i}"] = scope.owner_identity
        values[f"scope_vault_{i}"] = scope.physical_vault
    return values


def table_valued(model: type[Asset]) -> Any:
    """The whole row of ``model``'s table as one value (``to_jsonb(mem_assets)``)."""
    table: Any = model.__table__
    return table.table_valued()


def stored_from_json(row: dict[str, Any]) -> StoredAsset:
    """A row of :meth:`AssetRepository.reload_rows` as the record :meth:`find_visible` gives."""
    asset = row["asset"]
    ocr = asset["ocr"]
    return StoredAsset(
        asset=AssetRecord(
            id=asset["id"],
            owner_identity=asset["owner_identity"],
            vault=asset["vault"],
            project_id=asset["project_id"],
            folder_id=asset["folder_id"],
            object_id=asset["object_id"],
            title=asset["title"],
            description=asset["description"],
            alt_text=asset["alt_text"],
            source_url=asset["source_url"],
            source_kind=asset["source_kind"],
            source_ref=dict(asset["source_ref"]),
            tags=list(asset["tags"]),
            metadata=dict(asset["metadata"]),
            status=asset["status"],
            embedding_status=asset["embedding_status"],
            failure_code=asset["failure_code"],
            failure_message=asset["failure_message"],
            created_by=asset["created_by"],
            created_at=datetime.fromisoformat(asset["created_at"]),
            updated_at=datetime.fromisoformat(asset["updated_at"]),
            generated_text=asset["generated_text"],
            ocr_text=asset["ocr_text"],
            ocr=None if ocr is None else dict(ocr),
            original_file_name=asset["original_file_name"],
            saved_by_key_id=asset["saved_by_key_id"],
            taken_at=(
                None if asset["taken_at"] is None else datetime.fromisoformat(asset["taken_at"])
            ),
            taken_offset_minutes=asset["taken_offset_minutes"],
            camera_make=asset["camera_make"],
            camera_model=asset["camera_model"],
            orientation=asset["orientation"],
            latitude=asset["latitude"],
            longitude=asset["longitude"],
        ),
        mime_type=row["mime_type"],
        width=row["width"],
        height=row["height"],
        bytes=row["bytes"],
        preview_storage_key=row["preview_storage_key"],
        object_status=row["object_status"],
        preview_sha256=row["preview_sha256"],
        storage_key=row["storage_key"],
    )


def asset_record(row: Asset) -> AssetRecord:
    """The record of an asset row."""
    return record_from_row(
        AssetRecord,
        row,
        source_ref=dict(row.source_ref),
        tags=list(row.tags),
        metadata=dict(row.metadata_),
        ocr=None if row.ocr is None else dict(row.ocr),
    )


# What a StoredAsset is read from, in its fields' order: the asset's record, then what its
# object says. Visible assets are read as plain rows, not as ORM objects: the ORM built each
# listed row twice (its objects, then the record copied from them), about 4 ms of a
# 20-asset list call's CPU. A row's JSON values are its own, so the record takes them as they
# are (an ORM object's values belong to its session, and are copied: asset_record).
_ASSET_COLUMNS = tuple(Asset.__table__.c[f.name] for f in fields(AssetRecord))
_OBJECT_COLUMNS = (
    AssetObject.__table__.c.mime_type,
    AssetObject.__table__.c.width,
    AssetObject.__table__.c.height,
    AssetObject.__table__.c.bytes,
    AssetObject.__table__.c.preview_storage_key,
    AssetObject.__table__.c.status.label("object_status"),
    AssetObject.__table__.c.preview_sha256,
    AssetObject.__table__.c.storage_key,
)
_STORED_COLUMNS = (*_ASSET_COLUMNS, *_OBJECT_COLUMNS)
# Where a statement's own columns start, after a StoredAsset's (a label, a deleted time).
_STORED_WIDTH = len(_STORED_COLUMNS)


def stored_from_row(row: Sequence[Any]) -> StoredAsset:
    """The record of a row that starts with the columns ``AssetRepository._visible`` selects."""
    width = len(_ASSET_COLUMNS)
    return StoredAsset(AssetRecord(*row[:width]), *row[width:_STORED_WIDTH])


def object_transition(
    owner: str, object_id: str, statuses: tuple[str, ...], **values: Any
) -> Update:
    """The update that sets ``values`` on an object of ``owner`` whose status is in ``statuses``.

    Nothing changes when the object is in another status, so the update itself is the check.
    """
    return (
        update(AssetObject)
        .where(
            AssetObject.owner_identity == owner,
            AssetObject.id == object_id,
            AssetObject.status.in_(statuses),
        )
        .values(**values)
        .execution_options(synchronize_session=False)
    )


class ObjectRepository(SessionRepository):
    """Owner-scoped immutable objects."""

    async def find_reusable(self, owner: str, sha256: str) -> ObjectRecord | None:
        """The owner's available object with these bytes, locked against deletion meanwhile."""
        row = await self._session.scalar(
            select(AssetObject)
            .where(
                AssetObject.owner_identity == owner,
                AssetObject.sha256 == sha256,
                AssetObject.status == "available",
            )
            .with_for_update(read=True)
        )
        return None if row is None else object_record(row)

    async def find_recently_deleted(
        self, owner: str, sha256: str, *, within: timedelta
    ) -> ObjectRecord | None:
        """The owner's object with these bytes that a delete took out of use lately, locked.

        Lately: at most ``within`` ago, by the database clock. Its bytes are still stored and
        still counted, so a save of the same bytes takes it back (``take_back``) instead of
        storing a copy.

        The purge waits longer than the grace window before it removes bytes, so an object
        found here is never half-purged.
        """
        row = await self._session.scalar(
            select(AssetObject)
            .where(
                AssetObject.owner_identity == owner,
                AssetObject.sha256 == sha256,
                AssetObject.status == "deleting",
                AssetObject.updated_at > func.now() - within,
            )
            .with_for_update()
            .execution_options(populate_existing=True)
        )
        return None if row is None else object_record(row)

    async def quarantine_reason(self, owner: str, sha256: str) -> QuarantineReason | None:
        """Why the owner's copy of these bytes is quarantined, or ``None`` when it is not.

        ``integrity``: reconciliation found the stored bytes missing or changed (its images
        failed with an integrity code); ``unreadable``: the embedding provider could not read
        the bytes.
        """
        row = await self._session.execute(
            text(
                "SELECT o.id, EXISTS (SELECT 1 FROM mem_assets a "
                "WHERE a.owner_identity = o.owner_identity AND a.object_id = o.id "
                "AND a.status = 'failed' AND a.failure_code = ANY(:codes)) AS integrity "
                "FROM mem_asset_objects o "
                "WHERE o.owner_identity = :o AND o.sha256 = :s AND o.status = 'quarantined' "
                "LIMIT 1"
            ),
            {"o": owner, "s": sha256, "codes": list(INTEGRITY_CODES)},
        )
        found = row.first()
        if found is None:
            return None
        return "integrity" if found.integrity else "unreadable"

    async def copies(
        self, owner: str, sha256: str, *, within: timedelta
    ) -> tuple[bool, bool, QuarantineReason | None]:
        """What the owner stores of these bytes, in one statement: ``(live, recent, quarantined)``.

        ``live``: an available object (:meth:`find_reusable`); ``recent``: none, but one a
        delete took out of use at most ``within`` ago (:meth:`find_recently_deleted`);
        ``quarantined``: neither, and why a quarantined copy is (:meth:`quarantine_reason`).
        Nothing is locked: a save decides with this, and its commit finds the object again
        under the namespace lock.
        """
        rows = (
            await self._session.execute(
                text(COPIES_SQL),
                {"o": owner, "s": sha256, "within": within, "codes": list(INTEGRITY_CODES)},
            )
        ).all()
        return copies_found([(row.status, row.recent, row.integrity) for row in rows])

    async def quarantine(self, owner: str, object_id: str) -> None:
        """Take an available object out of reuse and embedding (a provider could not read it)."""
        await self._transition(
            owner, object_id, ("available",), status="quarantined", updated_at=func.now()
        )

    async def lock(self, owner: str, object_id: str) -> ObjectRecord:
        """One object, locked against concurrent reuse and deletion."""
        row = await self._session.scalar(
            select(AssetObject)
            .where(AssetObject.owner_identity == owner, AssetObject.id == object_id)
            .with_for_update()
            .execution_options(populate_existing=True)
        )
        if row is None:
            raise NotFound("object")
        return object_record(row)

    async def mark_deleting(self, owner: str, object_id: str) -> bool:
        """Take an object out of use before its bytes go; ``False`` if it was not in use."""
        return await self._transition(
            owner,
            object_id,
            ("available", "quarantined", "pending"),
            status="deleting",
            updated_at=func.now(),
        )

    async def deleting(
        self, *, limit: int = 100, older_than: timedelta = timedelta(0)
    ) -> list[ObjectRecord]:
        """Objects whose bytes wait for deletion, oldest first.

        Only those marked ``deleting`` at least ``older_than`` ago (the delete grace window:
        until then a deleted asset may be restored and its object taken back into use).
        """
        rows = await self._session.scalars(
            select(AssetObject)
            .where(
                AssetObject.status == "deleting",
                AssetObject.updated_at <= func.now() - older_than,
            )
            .order_by(AssetObject.updated_at, AssetObject.id)
            .limit(limit)
        )
        return [object_record(row) for row in rows.all()]

    async def purge_due(self, owner: str, object_id: str, *, older_than: timedelta) -> bool:
        """Make a ``deleting`` object due for the purge now (a purge from the trash).

        Its ``updated_at`` is set ``older_than`` (the sweep's wait) into the past: the sweep
        takes it as due, and a save of the same bytes no longer takes it back
        (:meth:`find_recently_deleted` looks only within the grace window). ``False`` if the
        object was not ``deleting``.
        """
        return await self._transition(
            owner, object_id, ("deleting",), updated_at=func.now() - older_than
        )

    async def take_back(self, owner: str, object_id: str) -> bool:
        """Return an object marked ``deleting`` to use (a restore); ``False`` if it was not."""
        return await self._transition(
            owner, object_id, ("deleting",), status="available", updated_at=func.now()
        )

    async def _transition(
        self, owner: str, object_id: str, statuses: tuple[str, ...], **values: Any
    ) -> bool:
        """Set ``values`` on one of ``owner``'s objects only while its status is in ``statuses``.

        The status guard is what makes racing changes safe (a purge-now and a restore, say): the
        one that commits second finds the object no longer in that status and changes nothing.
        """
        result = await self._session.execute(
            object_transition(owner, object_id, statuses, **values)
        )
        return bool(result.rowcount)  # pyright: ignore[reportAttributeAccessIssue]

    async def mark_deleted(self, owner: str, object_id: str) -> ObjectRecord | None:
        """Record that an object's bytes are gone; ``None`` if another sweep got there first."""
        row = await self._session.scalar(
            select(AssetObject)
            .where(
                AssetObject.owner_identity == owner,
                AssetObject.id == object_id,
                AssetObject.status == "deleting",
            )
            .with_for_update(skip_locked=True)
            .execution_options(populate_existing=True)
        )
        if row is None:
            return None
        now = datetime.now(UTC)
        row.status = "deleted"
        row.deleted_at = now
        row.updated_at = now
        await self._session.flush()
        return object_record(row)

    async def get(self, owner: str, object_id: str) -> ObjectRecord:
        """One object of ``owner``."""
        row = await self._session.scalar(
            select(AssetObject).where(
                AssetObject.owner_identity == owner, AssetObject.id == object_id
            )
        )
        if row is None:
            raise NotFound("object")
        return object_record(row)

    async def for_storage_key(self, key: str) -> tuple[ObjectRecord, str | None] | None:
        """The object a storage key belongs to and its recorded SHA-256 for that key.

        The hash is ``None`` only for the preview of an object stored before revision 0007.

        Serves the signed-link route, which is authorised by the link (not by an identity): the
        key's namespace and object id must both match the row, and only a readable object
        counts: ``available``, or ``deleting`` for its preview alone (the trash shows previews of
        deleted images while they can be restored; an original is never served once no live
        image uses it). ``None`` when no such object stores bytes under ``key``.
        """
        try:
            parsed = parse_storage_key(key)
        except InvalidStorageKey:
            return None
        if parsed.kind != "object":
            return None
        row = await self._session.scalar(
            select(AssetObject).where(
                AssetObject.id == parsed.object_id,
                AssetObject.namespace_id == parsed.namespace_id,
                AssetObject.status.in_(("available", "deleting")),
            )
        )
        if row is None:
            return None
        if row.storage_key == key and row.status == "available":
            return object_record(row), row.sha256
        if row.preview_storage_key == key:
            return object_record(row), row.preview_sha256
        return None

    async def stored_keys(self, owner: str) -> set[str]:
        """Every key whose bytes the owner's objects account for (all but ``deleted``)."""
        rows = await self._session.execute(
            select(AssetObject.storage_key, AssetObject.preview_storage_key).where(
                AssetObject.owner_identity == owner, AssetObject.status != "deleted"
            )
        )
        return {key for pair in rows.all() for key in pair if key is not None}

    async def get_many(
        self, keys: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], ObjectRecord]:
        """Objects by ``(owner, object_id)``, in one query; missing ones are left out."""
        if not keys:
            return {}
        rows = await self._session.scalars(
            select(AssetObject).where(
                tuple_(AssetObject.owner_identity, AssetObject.id).in_(sorted(set(keys)))
            )
        )
        return {(row.owner_identity, row.id): object_record(row) for row in rows}

    async def create(
        self,
        *,
        object_id: str,
        owner: str,
        namespace_id: str,
        sha256: str,
        storage_key: str,
        preview_storage_key: str,
        preview_sha256: str,
        mime_type: str,
        extension: str,
        nbytes: int,
        preview_bytes: int,
        width: int,
        height: int,
        etag: str | None,
        version_id: str | None,
    ) -> ObjectRecord:
        """An available object; :class:`DuplicateObject` if the owner already has these bytes.

        One statement: the insert skips a row the dedupe index already holds (no savepoint to
        catch its violation) and returns what it wrote (no reload).
        """
        values = dict(
            id=object_id,
            owner_identity=owner,
            namespace_id=namespace_id,
            sha256=sha256,
            storage_key=storage_key,
            preview_storage_key=preview_storage_key,
            preview_sha256=preview_sha256,
            mime_type=mime_type,
            extension=extension,
            bytes=nbytes,
            preview_bytes=preview_bytes,
            width=width,
            height=height,
            etag=etag,
            version_id=version_id,
            status="available",
        )
        row = await self._session.scalar(
            pg_insert(AssetObject)
            .values(**values)
            .on_conflict_do_nothing(
                index_elements=["owner_identity", "sha256"],
                index_where=text("status IN ('pending', 'available', 'quarantined')"),
            )
            .returning(AssetObject)
            .execution_options(populate_existing=True)
        )
        if row is None:  # the dedupe index (_DEDUPE_INDEX) holds these bytes already
            raise DuplicateObject("the owner already stores these bytes")
        return object_record(row)


def _branches(
    scopes: Sequence[VaultScope], filters: AssetFilter
) -> list[tuple[Sequence[VaultScope], AssetFilter]]:
    """The walks of one listing: a vault each, and a folder each when a subtree is listed.

    One vault (and at most one folder) is one walk of an index in the page's order. Several
    vaults or folders in one ``IN`` list are not: an index gives each one's assets in order,
    but not their union. So each gets its own walk of at most one page, unless there are more
    than :data:`MAX_LIST_BRANCHES` (then one walk of the vault or project index, filtered).
    """
    folders = filters.folder_ids
    split: list[tuple[Sequence[VaultScope], AssetFilter]]
    if folders is not None and len(folders) > 1:
        split = [([s], replace(filters, folder_ids=(f,))) for s in scopes for f in folders]
    else:
        split = [([s], filters) for s in scopes]
    if len(split) == 1 or len(split) > MAX_LIST_BRANCHES:
        return [(scopes, filters)]
    return split


# What an asset's EXIF sets (docs/design.md#capture), by column name.
CAPTURE_COLUMNS = (
    "taken_at",
    "taken_offset_minutes",
    "camera_make",
    "camera_model",
    "orientation",
    "latitude",
    "longitude",
)


def _capture_values(capture: Mapping[str, Any] | None) -> dict[str, Any]:
    """Every capture column, NULL unless ``capture`` sets it; other names are refused."""
    given = dict(capture or {})
    unknown = set(given) - set(CAPTURE_COLUMNS)
    if unknown:
        raise InvalidInput(f"not capture columns: {sorted(unknown)}")
    return {name: given.get(name) for name in CAPTURE_COLUMNS}


def _one_asset(scope: VaultScope, asset_id: str) -> tuple[ColumnElement[bool], ...]:
    """The conditions that name one asset of one vault, deleted or not."""
    return (
        Asset.owner_identity == scope.owner_identity,
        Asset.vault == scope.physical_vault,
        Asset.id == asset_id,
    )


class AssetRepository(SessionRepository):
    """Assets of one owner and vault."""

    async def create(
        self,
        scope: VaultScope,
        *,
        object_id: str,
        project_id: str | None,
        folder_id: str | None,
        title: str,
        description: str | None,
        alt_text: str | None,
        source_url: str | None,
        source_url_hash: str | None,
        source_kind: str,
        source_ref: dict[str, Any],
        tags: list[str],
        metadata: dict[str, Any],
        created_by: str,
        asset_id: str | None = None,
        original_file_name: str | None = None,
        saved_by_key_id: str | None = None,
        capture: Mapping[str, Any] | None = None,
    ) -> AssetRecord:
        """A new asset in ``processing`` with embeddings ``pending``.

        ``capture``: the capture columns read from its EXIF (:data:`CAPTURE_COLUMNS`).

        One statement: the insert returns the row with what the database filled in (times,
        defaults), so nothing is read back.
        """
        values: dict[str, Any] = {
            "id": asset_id or new_id("ast"),
            "owner_identity": scope.owner_identity,
            "vault": scope.physical_vault,
            "project_id": project_id,
            "folder_id": folder_id,
            "object_id": object_id,
            "title": title,
            "description": description,
            "alt_text": alt_text,
            "source_url": source_url,
            "source_url_hash": source_url_hash,
            "source_kind": source_kind,
            "source_ref": source_ref,
            "tags": tags,
            "metadata_": metadata,
            "status": "processing",
            "embedding_status": "pending",
            "created_by": created_by,
            "updated_by": created_by,
            "original_file_name": original_file_name,
            "saved_by_key_id": saved_by_key_id,
            **_capture_values(capture),
        }
        row = await self._session.scalar(
            pg_insert(Asset)
            .values(**values)
            .returning(Asset)
            .execution_options(populate_existing=True)
        )
        if row is None:  # an insert without a conflict clause returns its row or raises
            raise NotFound("asset")
        return asset_record(row)

    async def get(self, scope: VaultScope, asset_id: str) -> AssetRecord:
        """A non-deleted asset in this vault."""
        if not is_valid_id(asset_id, "ast"):
            raise NotFound("asset")
        row = await self._session.scalar(
            select(Asset).where(
                *_one_asset(scope, asset_id),
                Asset.status != "deleted",
            )
        )
        if row is None:
            raise NotFound("asset")
        return asset_record(row)

    async def set_capture(self, owner: str, asset_id: str, capture: Mapping[str, Any]) -> None:
        """Replace an asset's capture columns (:data:`CAPTURE_COLUMNS`) with ``capture``.

        Columns ``capture`` omits become NULL: what a re-read did not find is not kept.
        Does not stamp ``updated_at``: nobody edited the asset.
        """
        await self._session.execute(
            update(Asset)
            .where(Asset.owner_identity == owner, Asset.id == asset_id)
            .values(**_capture_values(capture))
            .execution_options(synchronize_session=False)
        )

    async def _update(self, scope: VaultScope, asset_id: str, **values: Any) -> None:
        """Set columns of one asset of this vault, stamping ``updated_at`` by the database clock."""
        await self._session.execute(
            update(Asset)
            .where(*_one_asset(scope, asset_id))
            .values(**values, updated_at=func.now())
            .execution_options(synchronize_session=False)
        )

    @staticmethod
    def _visible(
        scopes: Sequence[VaultScope],
        statuses: Sequence[str] = VISIBLE_STATUSES,
        *,
        named: bool = False,
    ) -> AnySelect:
        pairs = [(scope.owner_identity, scope.physical_vault) for scope in scopes]
        in_scopes = (
            in_scopes_named(scopes)
            if named
            else tuple_(Asset.owner_identity, Asset.vault).in_(pairs)
        )
        return (
            select(*_STORED_COLUMNS)
            .select_from(Asset)
            .join(AssetObject, asset_object_join())
            .where(
                in_scopes,
                # Constants, not parameters: the listing indexes are partial on the visible
                # statuses (revision 0020), and a prepared statement's cached generic plan
                # can prove that only from constants.
                Asset.status.in_([literal(status, literal_execute=True) for status in statuses]),
            )
        )

    async def get_visible(self, scopes: Sequence[VaultScope], asset_id: str) -> StoredAsset | None:
        """An asset in one of ``scopes`` that is not being deleted, with its object.

        With the saving key's label (``savedBy``) joined in: one statement, not a second read.
        """
        if not scopes or not is_valid_id(asset_id, "ast"):
            return None
        query = (
            self._visible(scopes)
            .add_columns(ApiKey.label)
            .outerjoin(ApiKey, ApiKey.id == Asset.saved_by_key_id)
            .where(Asset.id == asset_id)
        )
        row = (await self._session.execute(query)).one_or_none()
        if row is None:
            return None
        return replace(stored_from_row(row), saved_by_label=row[_STORED_WIDTH])

    async def list_visible(
        self,
        scopes: Sequence[VaultScope],
        filters: AssetFilter,
        *,
        newest_first: bool,
        limit: int,
        after: tuple[datetime, str] | None = None,
        by_taken: bool = False,
    ) -> list[StoredAsset]:
        """One page of assets by created time then id (a stable keyset order).

        ``by_taken``: by capture time instead (:func:`taken_key`: undated assets as taken in
        the year 1000, so last when the newest come first); ``after`` is then a position in
        that key.
        """
        if not scopes:
            return []
        if filters.tags:
            # How many assets hold the tags decides the plan: a few are read from the tags'
            # GIN index and sorted, many are met soon by walking the vault in order. A cached
            # generic plan cannot see the tags, and was measured walking all 90,000 assets of
            # a vault for a tag none holds (37 ms of CPU; docs/scaling.md#listing-at-scale),
            # so a tag listing is planned with its values (transaction-local).
            await self._session.execute(
                select(func.set_config("plan_cache_mode", "force_custom_plan", True))
            )
        query = self.list_statement(
            scopes, filters, newest_first=newest_first, limit=limit, after=after, by_taken=by_taken
        )
        rows = await self._session.execute(query)
        return [stored_from_row(row) for row in rows.all()]

    @classmethod
    def list_statement(
        cls,
        scopes: Sequence[VaultScope],
        filters: AssetFilter,
        *,
        newest_first: bool,
        limit: int,
        after: tuple[datetime, str] | None = None,
        by_taken: bool = False,
    ) -> AnySelect:
        """The statement of :meth:`list_visible` (its plans are checked by a test).

        Each vault (and each folder of a subtree) is one branch that walks a listing index
        in the page's order from the cursor until the page is full (revision 0020; 0024 for
        capture time). With several branches, each reads at most one page and the pages are
        merged: an ``IN`` list of vaults or folders would instead read all their assets to
        sort them.
        """
        key: ColumnElement[datetime] = taken_key() if by_taken else Asset.created_at.expression
        order = (key.desc(), Asset.id.desc()) if newest_first else (key.asc(), Asset.id.asc())

        def page(branch: Sequence[VaultScope], branch_filters: AssetFilter) -> AnySelect:
            query = cls._visible(branch).where(*branch_filters.conditions())
            if by_taken:
                query = query.where(
                    *taken_range(branch_filters.taken_after, branch_filters.taken_before)
                )
            if after is not None:
                position = tuple_(key, Asset.id)
                marker = tuple_(literal(after[0], DateTime(timezone=True)), literal(after[1]))
                query = query.where(position < marker if newest_first else position > marker)
            return query.order_by(*order).limit(limit)

        whole = cls._visible(scopes).order_by(*order).limit(limit)
        return cls._merged(scopes, filters, page, whole, key, newest_first, limit)

    @staticmethod
    def _merged(
        scopes: Sequence[VaultScope],
        filters: AssetFilter,
        page: Callable[[Sequence[VaultScope], AssetFilter], AnySelect],
        whole: AnySelect,
        key: ColumnElement[datetime] | QueryableAttribute[datetime | None],
        descending: bool,
        limit: int,
    ) -> AnySelect:
        """One ``page`` per branch, merged into the first ``limit`` rows by ``key`` then id.

        The branches' pages (ids and keys only) are merged and cut to one page, and ``whole``
        (the rows of every branch, in order, with no filter or cursor: the ids carry them)
        reads those ids by primary key: an array of ids is an index condition, so the rows
        are looked up whatever the planner estimates (a join could read the whole table).
        """
        branches = _branches(scopes, filters)
        if len(branches) == 1:
            return page(*branches[0])
        pages = union_all(
            *(page(s, f).with_only_columns(Asset.id, key.label("key")) for s, f in branches)
        ).subquery("pages")
        merged = (pages.c.key, pages.c.id)
        if descending:
            merged = (pages.c.key.desc(), pages.c.id.desc())
        top = select(pages.c.id).order_by(*merged).limit(limit).subquery("top")
        # An array (cast: ANY of a bare subquery would compare with each of its rows).
        ids = cast(select(func.array_agg(top.c.id)).scalar_subquery(), ARRAY(Text))
        # The scope again on the page's rows: the ids come from the caller's vaults, and the
        # statement says so itself.
        return whole.where(Asset.id == any_(ids))

    async def find_visible(
        self,
        scopes: Sequence[VaultScope],
        filters: AssetFilter,
        *,
        statuses: Sequence[str] = VISIBLE_STATUSES,
        limit: int,
    ) -> list[StoredAsset]:
        """Assets matching ``filters`` in any order (search reloads its candidates here)."""
        if not scopes or filters.asset_ids == ():
            return []
        query = self._visible(scopes, statuses).where(*filters.conditions()).limit(limit)
        rows = await self._session.execute(query)
        return [stored_from_row(row) for row in rows.all()]

    async def matching_ids(
        self,
        scopes: Sequence[VaultScope],
        filters: AssetFilter,
        *,
        statuses: Sequence[str] = VISIBLE_STATUSES,
        limit: int,
    ) -> list[str]:
        """Ids of at most ``limit`` assets matching ``filters``."""
        if not scopes:
            return []
        query = (
            self._visible(scopes, statuses)
            .where(*filters.conditions())
            .with_only_columns(Asset.id)
            .limit(limit)
        )
        return list((await self._session.scalars(query)).all())

    @staticmethod
    def text_lists(
        scopes: Sequence[VaultScope],
        filters: AssetFilter,
        words: str,
        *,
        limit: int,
        pool: int = TEXT_POOL,
    ) -> tuple[CTE, CTE]:
        """The full-text list as two CTEs (``id``, ``rank``), for one statement to read.

        The first ranks the assets holding every word, the second (only when the first has
        fewer than ``limit``) those holding any, without the first's; each ranks at most
        ``pool`` matches in all (see :meth:`search_text`). A search embeds them in its ranking
        statement; :meth:`search_text` reads them alone. The scopes, ``words`` and ``limit`` are
        named parameters (:func:`in_scopes_named`, ``words``, ``text_limit``): the ranking
        statement is built once per shape and takes them per search.
        """
        in_scopes = in_scopes_named(scopes)
        words_value = bindparam("words", words, type_=String)
        limit_value = bindparam("text_limit", limit, type_=Integer)
        # Scalar subqueries: made once per execution, also in a generic plan (a search's
        # ranking statement runs one), where a function of a parameter is not folded into a
        # constant when planned and ``ts_rank_cd`` would make the query again for every row.
        every_query = func.plainto_tsquery(literal("english", REGCONFIG), words_value)
        every_word = select(every_query).scalar_subquery()
        any_word = select(
            cast(func.replace(cast(every_query, Text), " & ", " | "), TSQUERY)
        ).scalar_subquery()

        def matching(query: ColumnElement[Any]) -> Select[Any, Any]:
            matches = select(Asset.id, Asset.search_document).where(
                in_scopes,
                Asset.status == "ready",
                Asset.search_document.op("@@")(query),
                *filters.conditions(),
            )
            if filters.reads_objects():
                matches = matches.join(AssetObject, asset_object_join())
            return matches

        def ranked(pooled: Subquery, ranked_limit: Any) -> Select[Any, Any]:
            rank = func.ts_rank_cd(pooled.c.search_document, any_word)
            return (
                select(pooled.c.id, rank.label("rank"))
                .order_by(rank.desc(), pooled.c.id)
                .limit(ranked_limit)
            )

        every = ranked(matching(every_word).limit(pool).subquery(), limit_value).cte("words_every")
        found = select(func.count()).select_from(every).scalar_subquery()
        others = (
            matching(any_word)
            .where(Asset.id.not_in(select(every.c.id)))
            .limit(func.greatest(pool - found, 0))
            .subquery()
        )
        # Only when fewer than ``limit`` hold every word: LIMIT 0 reads nothing.
        any_ = ranked(others, func.greatest(limit_value - found, 0)).cte("words_any")
        return every, any_

    async def search_text(
        self,
        scopes: Sequence[VaultScope],
        filters: AssetFilter,
        words: str,
        *,
        limit: int,
        pool: int = TEXT_POOL,
    ) -> list[TextMatch]:
        """Ready assets whose title, tags, alt text or description share words with ``words``.

        English-stemmed. Ranking reads every row it ranks, so at most ``pool`` matches are
        ranked: assets holding every word first, best ``ts_rank_cd`` first, then (when fewer
        than ``limit`` hold them all) assets holding any, best first after them. Rare words
        (names, numbers, codes), where this list finds what vectors miss, are ranked in full;
        a word most assets share says little, and the vector lists decide there. The search
        document is a generated column (see migration 0004). One statement
        (:meth:`text_lists`).
        """
        if not scopes:
            return []
        every, any_ = self.text_lists(scopes, filters, words, limit=limit, pool=pool)
        both = union_all(
            select(every.c.id, every.c.rank, true().label("every"), literal(0).label("pass")),
            select(any_.c.id, any_.c.rank, false().label("every"), literal(1).label("pass")),
        ).subquery()
        rows = await self._session.execute(
            select(both.c.id, both.c.rank, both.c.every).order_by(
                both.c["pass"], both.c.rank.desc(), both.c.id
            )
        )
        # Not re-sorted across the two passes: an asset holding every word stays ahead of one
        # holding some of them, however often (cover density rewards repeating a common word,
        # which would push a unique title's one match past a short limit).
        return [TextMatch(a, float(r), bool(e)) for a, r, e in rows.all()][:limit]

    @staticmethod
    def reload_rows(
        scopes: Sequence[VaultScope],
        filters: AssetFilter,
        candidates: Select[Any],
        *,
        statuses: Sequence[str] = ("ready",),
    ) -> Select[Any]:
        """Each candidate asset the scope and ``filters`` admit, as one JSON value (``row``).

        For a statement that reloads search candidates beside other work: read back with
        :func:`stored_from_json`. The same predicates as :meth:`find_visible`; the scopes are
        named parameters (:func:`in_scopes_named`).
        """
        row = func.jsonb_build_object(
            "asset",
            func.to_jsonb(table_valued(Asset)).op("-")(literal("search_document", Text)),
            "mime_type",
            AssetObject.mime_type,
            "width",
            AssetObject.width,
            "height",
            AssetObject.height,
            "bytes",
            AssetObject.bytes,
            "preview_storage_key",
            AssetObject.preview_storage_key,
            "object_status",
            AssetObject.status,
            "preview_sha256",
            AssetObject.preview_sha256,
            "storage_key",
            AssetObject.storage_key,
        )
        return AssetRepository._admitting(
            scopes, filters, statuses, Asset.id.in_(candidates)
        ).with_only_columns(row.label("row"))

    @staticmethod
    def admits(
        scopes: Sequence[VaultScope],
        filters: AssetFilter,
        asset_id: ColumnElement[Any],
        *,
        statuses: Sequence[str] = ("ready",),
    ) -> Exists:
        """Whether the scope and ``filters`` admit ``asset_id``, a column of an outer query.

        The predicates of :meth:`reload_rows`, checked one candidate at a time: a statement can
        walk its candidates best first and stop once it has enough, before it reloads any.
        """
        return (
            AssetRepository._admitting(scopes, filters, statuses, Asset.id == asset_id)
            .with_only_columns(Asset.id)
            .exists()
        )

    @staticmethod
    def _admitting(
        scopes: Sequence[VaultScope],
        filters: AssetFilter,
        statuses: Sequence[str],
        candidates: ColumnElement[bool],
    ) -> AnySelect:
        return AssetRepository._visible(scopes, statuses, named=True).where(
            *filters.conditions(), candidates
        )

    async def locate(self, scopes: Sequence[VaultScope], asset_id: str) -> AssetRecord | None:
        """An asset in one of ``scopes`` whatever its status (deleted ones too), or ``None``."""
        if not scopes or not is_valid_id(asset_id, "ast"):
            return None
        pairs = [(scope.owner_identity, scope.physical_vault) for scope in scopes]
        row = await self._session.scalar(
            select(Asset).where(
                tuple_(Asset.owner_identity, Asset.vault).in_(pairs), Asset.id == asset_id
            )
        )
        return None if row is None else asset_record(row)

    async def lock(
        self, scope: VaultScope, asset_id: str, *, include_deleted: bool = False
    ) -> AssetRecord | None:
        """An asset of this vault locked for a change (move, delete); ``None`` if absent."""
        if not is_valid_id(asset_id, "ast"):
            return None
        query = select(Asset).where(
            *_one_asset(scope, asset_id),
        )
        if not include_deleted:
            query = query.where(Asset.status.in_(VISIBLE_STATUSES))
        row = await self._session.scalar(
            query.with_for_update().execution_options(populate_existing=True)
        )
        return None if row is None else asset_record(row)

    async def place(
        self,
        scope: VaultScope,
        asset_id: str,
        *,
        project_id: str | None,
        folder_id: str | None,
        actor: str,
    ) -> AssetRecord:
        """Set an asset's project and folder (the composite keys keep both in its vault)."""
        await self._update(
            scope, asset_id, project_id=project_id, folder_id=folder_id, updated_by=actor
        )
        return await self.get(scope, asset_id)

    async def edit(
        self,
        scope: VaultScope,
        asset_id: str,
        *,
        title: str,
        description: str | None,
        alt_text: str | None,
        tags: list[str],
        metadata: dict[str, Any],
        actor: str,
    ) -> AssetRecord:
        """Set an asset's words (its full-text document, a generated column, follows)."""
        await self._update(
            scope,
            asset_id,
            title=title,
            description=description,
            alt_text=alt_text,
            tags=tags,
            metadata_=metadata,
            updated_by=actor,
        )
        return await self.get(scope, asset_id)

    async def change_tags(
        self,
        scope: VaultScope,
        asset_id: str,
        *,
        add: list[str],
        remove: list[str],
        max_tags: int,
        actor: str,
    ) -> TagChange | None:
        """Add and remove tags in one statement (no lost update); ``None``: no visible asset.

        See :mod:`memory_db.repositories.asset_tags`: the change is written only when it
        changes something and leaves at most ``max_tags`` tags.
        """
        if not is_valid_id(asset_id, "ast"):
            return None
        statement, parameters = change_tags_statement(
            scope, asset_id, add=add, remove=remove, max_tags=max_tags, actor=actor
        )
        row = (await self._session.execute(statement, parameters)).first()
        return None if row is None else tag_change(row)

    async def set_status(self, scope: VaultScope, asset_id: str, status: str, actor: str) -> None:
        """Move an asset to ``deleting`` or ``deleted`` (docs/design.md#deleting).

        Calls waiting on the asset's state (``ASSET_STATE_CHANNEL``) are woken when this
        commits: a deleted asset is an answer (``not_found``), not something to wait for.
        """
        values: dict[str, Any] = {"status": status, "updated_by": actor}
        if status == "deleted":
            values["deleted_at"] = func.now()
        await self._update(scope, asset_id, **values)
        await self._session.execute(
            text("SELECT pg_notify(:channel, :asset_id)"),
            {"channel": ASSET_STATE_CHANNEL, "asset_id": asset_id},
        )

    async def reopen_failed(self, owner: str, asset_id: str) -> bool:
        """Return a ``failed`` asset to ``processing``, failure cleared; ``False`` if not failed.

        Its failed representation was queued again (``memory_tools.jobs.queue``).

        Waiters on the asset's state are woken when this commits, like :meth:`set_status`.
        """
        result = await self._session.execute(
            update(Asset)
            .where(
                Asset.owner_identity == owner,
                Asset.id == asset_id,
                Asset.status == "failed",
            )
            .values(
                status="processing",
                failure_code=None,
                failure_message=None,
                updated_at=func.now(),
            )
            .execution_options(synchronize_session=False)
        )
        if not result.rowcount:  # pyright: ignore[reportAttributeAccessIssue]
            return False
        await self._session.execute(
            text("SELECT pg_notify(:channel, :asset_id)"),
            {"channel": ASSET_STATE_CHANNEL, "asset_id": asset_id},
        )
        return True

    async def deleted_within(self, scope: VaultScope, asset_id: str, window: timedelta) -> bool:
        """Whether the asset is ``deleted`` and was deleted less than ``window`` ago.

        By the database's clock, the one that stamped ``deleted_at``.
        """
        found = await self._session.scalar(
            select(Asset.id).where(
                *_one_asset(scope, asset_id),
                Asset.status == "deleted",
                Asset.purged_at.is_(None),
                Asset.deleted_at > func.now() - window,
            )
        )
        return found is not None

    async def trash(
        self,
        scopes: Sequence[VaultScope],
        *,
        window: timedelta,
        limit: int,
        after: tuple[datetime, str] | None = None,
        asset_id: str | None = None,
    ) -> list[TrashedAsset]:
        """One page of restorable deleted assets, most recently deleted first (keyset order).

        Restorable: ``deleted`` less than ``window`` ago (the delete grace window, by the
        database clock) and not purged. ``asset_id``: only that asset (its preview is asked
        for by id).
        """
        if not scopes or (asset_id is not None and not is_valid_id(asset_id, "ast")):
            return []
        query = self.trash_statement(
            scopes, window=window, limit=limit, after=after, asset_id=asset_id
        )
        rows = await self._session.execute(query)
        return [
            TrashedAsset(stored_from_row(row), row[_STORED_WIDTH])
            for row in rows.all()
            if row[_STORED_WIDTH] is not None
        ]

    @classmethod
    def trash_statement(
        cls,
        scopes: Sequence[VaultScope],
        *,
        window: timedelta,
        limit: int,
        after: tuple[datetime, str] | None = None,
        asset_id: str | None = None,
    ) -> AnySelect:
        """The statement of :meth:`trash`: one walk of the trash index per vault, merged."""
        order = (Asset.deleted_at.desc(), Asset.id.desc())

        def page(branch: Sequence[VaultScope], _: AssetFilter) -> AnySelect:
            query = (
                cls._visible(branch, ("deleted",))
                .add_columns(Asset.deleted_at)
                .where(Asset.purged_at.is_(None), Asset.deleted_at > func.now() - window)
            )
            if asset_id is not None:
                query = query.where(Asset.id == asset_id)
            if after is not None:
                position = tuple_(Asset.deleted_at, Asset.id)
                marker = tuple_(literal(after[0], DateTime(timezone=True)), literal(after[1]))
                query = query.where(position < marker)
            return query.order_by(*order).limit(limit)

        whole = (
            cls._visible(scopes, ("deleted",))
            .add_columns(Asset.deleted_at)
            .order_by(*order)
            .limit(limit)
        )
        return cls._merged(scopes, AssetFilter(), page, whole, Asset.deleted_at, True, limit)

    async def mark_purged(self, scope: VaultScope, asset_id: str, actor: str) -> None:
        """Take a deleted asset out of the trash for good: it can no longer be restored."""
        await self._session.execute(
            update(Asset)
            .where(
                *_one_asset(scope, asset_id),
                Asset.status == "deleted",
            )
            .values(purged_at=func.now(), updated_by=actor, updated_at=func.now())
            .execution_options(synchronize_session=False)
        )

    async def keeping_references(
        self, owner: str, object_id: str, *, restorable_within: timedelta, excluding: str
    ) -> int:
        """How many assets other than ``excluding`` still need an object's bytes.

        Those not being deleted, and deleted ones that may still be restored: deleted less than
        ``restorable_within`` ago and not purged.
        """
        value = await self._session.scalar(
            select(func.count()).where(
                Asset.owner_identity == owner,
                Asset.object_id == object_id,
                Asset.id != excluding,
                Asset.status.in_(VISIBLE_STATUSES)
                | (
                    (Asset.status == "deleted")
                    & Asset.purged_at.is_(None)
                    & (Asset.deleted_at > func.now() - restorable_within)
                ),
            )
        )
        return int(value or 0)

    async def restore(
        self,
        scope: VaultScope,
        asset_id: str,
        *,
        object_id: str,
        project_id: str | None,
        folder_id: str | None,
        actor: str,
    ) -> AssetRecord:
        """Bring a deleted asset back as ``processing`` with embeddings ``pending`` (a restore)."""
        row = await self._session.scalar(
            update(Asset)
            .where(
                *_one_asset(scope, asset_id),
                Asset.status == "deleted",
            )
            .values(
                status="processing",
                embedding_status="pending",
                failure_code=None,
                failure_message=None,
                object_id=object_id,
                # Generated context describes the bytes it was made from: other bytes, no words.
                generated_text=case(
                    (Asset.object_id == object_id, Asset.generated_text), else_=None
                ),
                project_id=project_id,
                folder_id=folder_id,
                deleted_at=None,
                updated_by=actor,
                updated_at=func.now(),
            )
            .returning(Asset)
            .execution_options(synchronize_session=False, populate_existing=True)
        )
        if row is None:
            raise NotFound("asset")
        return asset_record(row)

    async def active_references(self, owner: str, object_id: str) -> int:
        """How many assets that are not being deleted use an object."""
        value = await self._session.scalar(
            select(func.count()).where(
                Asset.owner_identity == owner,
                Asset.object_id == object_id,
                Asset.status.in_(VISIBLE_STATUSES),
            )
        )
        return int(value or 0)

    async def in_folders(
        self, scope: VaultScope, project_id: str, folder_ids: Sequence[str]
    ) -> list[StoredAsset]:
        """Every visible asset in these folders of a project (recursive folder deletion)."""
        return await self.find_visible(
            [scope],
            AssetFilter(project_id=project_id, folder_ids=tuple(folder_ids)),
            limit=1_000_000,
        )

    async def get_for_owner(self, owner: str, asset_id: str) -> AssetRecord | None:
        """An asset by owner (the worker's view, after it was handed a job of that owner)."""
        row = await self._session.scalar(
            select(Asset)
            .where(Asset.owner_identity == owner, Asset.id == asset_id)
            .execution_options(populate_existing=True)
        )
        return None if row is None else asset_record(row)

    async def find_repeat(
        self,
        scope: VaultScope,
        *,
        source_url_hash: str,
        sha256: str,
        artifact_id: str | None,
        source_kinds: Sequence[str],
    ) -> AssetRecord | None:
        """The asset an earlier save of the same source made in this vault, if it is live.

        The same source: ``source_url_hash`` (of the URL the asset records) and either the same
        bytes (the object's SHA-256) or the same artifact (``metadata.artifactId``), among
        assets of ``source_kinds`` that are ``processing`` or ``ready`` (a deleted or failed
        asset is not repeated). The oldest such asset. Found through the owner's
        ``source_url_hash`` index (``ix_mem_assets_owner_source_url_hash``).
        """
        same_bytes = AssetObject.sha256 == sha256
        same = (
            same_bytes
            if artifact_id is None
            else or_(same_bytes, Asset.metadata_["artifactId"].astext == artifact_id)
        )
        row = await self._session.scalar(
            select(Asset)
            .join(AssetObject, asset_object_join())
            .where(
                Asset.owner_identity == scope.owner_identity,
                Asset.vault == scope.physical_vault,
                Asset.source_url_hash == source_url_hash,
                Asset.source_kind.in_(list(source_kinds)),
                Asset.status.in_(("processing", "ready")),
                same,
            )
            .order_by(Asset.created_at, Asset.id)
            .limit(1)
            .execution_options(populate_existing=True)
        )
        return None if row is None else asset_record(row)

    async def get_many_for_owners(
        self, keys: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], AssetRecord]:
        """Assets by ``(owner, asset_id)``, in one query (the worker's batch reload)."""
        if not keys:
            return {}
        rows = await self._session.scalars(
            select(Asset)
            .where(tuple_(Asset.owner_identity, Asset.id).in_(sorted(set(keys))))
            .execution_options(populate_existing=True)
        )
        return {(row.owner_identity, row.id): asset_record(row) for row in rows}

    async def lock_many_for_owners(
        self, keys: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], AssetRecord]:
        """Assets by ``(owner, asset_id)``, locked for update in id order (one query).

        The worker's completion holds these locks while it writes vectors: deletion updates the
        same rows, so it waits for the completion to commit, or the completion sees the asset
        ``deleting`` and writes nothing for it. Locking in id order keeps two batches that share
        assets from deadlocking. Rows are read fresh, not from the session's identity map.
        """
        if not keys:
            return {}
        rows = await self._session.scalars(
            select(Asset)
            .where(tuple_(Asset.owner_identity, Asset.id).in_(sorted(set(keys))))
            .order_by(Asset.id)
            .with_for_update()
            .execution_options(populate_existing=True)
        )
        return {(row.owner_identity, row.id): asset_record(row) for row in rows}

    async def live_after(self, after: str | None, limit: int) -> list[AssetRecord]:
        """Assets not being deleted, in id order after ``after``: an index rebuild's walk.

        Every owner's (an operator's rebuild covers the whole index); keyset-paged on the
        primary key, so each page is one short index range whatever the table's size.
        """
        query = select(Asset).where(Asset.status.in_(VISIBLE_STATUSES))
        if after is not None:
            query = query.where(Asset.id > after)
        rows = await self._session.scalars(
            query.order_by(Asset.id).limit(limit).execution_options(populate_existing=True)
        )
        return [asset_record(row) for row in rows]

    async def count_live(self, *, after: str | None = None) -> int:
        """How many assets are not being deleted (after ``after`` in id order, if given)."""
        query = select(func.count()).select_from(Asset).where(Asset.status.in_(VISIBLE_STATUSES))
        if after is not None:
            query = query.where(Asset.id > after)
        return int(await self._session.scalar(query) or 0)

    async def live_ids(self, scope: VaultScope) -> list[str]:
        """Ids of the vault's images that are not deleted (``memory-server enrich``), by id."""
        rows = await self._session.scalars(
            select(Asset.id)
            .where(
                Asset.owner_identity == scope.owner_identity,
                Asset.vault == scope.physical_vault,
                Asset.status.in_(("processing", "ready", "failed")),
            )
            .order_by(Asset.id)
        )
        return list(rows)

    async def ocr_state(self, owner: str, asset_id: str) -> OcrState | None:
        """The asset's newest OCR job and its stored text, in ONE statement; ``None``: no job.

        One statement reads one snapshot. The worker completes an OCR job and writes its text
        in one transaction, so a ``done`` read here always comes with what that job wrote.
        Reading the asset row and the jobs in two statements could see the job's commit in the
        second and not in the first: ``done`` with no text yet (issue 30).
        """
        newest = (
            select(AssetJob.status, AssetJob.last_error_code)
            .where(
                AssetJob.owner_identity == Asset.owner_identity,
                AssetJob.asset_id == Asset.id,
                AssetJob.kind == "ocr",
            )
            .order_by(AssetJob.created_at.desc(), AssetJob.id.desc())
            .limit(1)
            .lateral("newest")
        )
        row = (
            await self._session.execute(
                select(newest.c.status, newest.c.last_error_code, Asset.ocr_text, Asset.ocr)
                .select_from(Asset)
                .join(newest, true())
                .where(Asset.owner_identity == owner, Asset.id == asset_id)
            )
        ).one_or_none()
        if row is None:
            return None
        return OcrState(
            status=row.status,
            last_error_code=row.last_error_code,
            text=row.ocr_text,
            reading=None if row.ocr is None else dict(row.ocr),
        )

    async def set_ocr(
        self,
        owner: str,
        asset_id: str,
        text: str | None,
        provenance: dict[str, Any] | None,
        *,
        metadata: dict[str, Any] | None = None,
    ) -> bool:
        """Store the text read in one image and how it was read (``None``: no text read).

        Only an OCR job calls this (with the asset row locked); it changes nothing a person
        gave. ``metadata`` replaces the asset's metadata when given (the caller read it under
        the same lock). Returns whether the asset exists (and is not deleted).
        """
        extra: dict[str, Any] = {} if metadata is None else {"metadata_": metadata}
        result = await self._session.execute(
            update(Asset)
            .where(
                Asset.owner_identity == owner,
                Asset.id == asset_id,
                Asset.status.not_in(("deleting", "deleted")),
            )
            # SQL NULL, not a JSON null, when nothing was read.
            .values(
                ocr_text=text,
                ocr=null() if provenance is None else provenance,
                updated_at=func.now(),
                **extra,
            )
            .execution_options(synchronize_session=False)
        )
        return bool(getattr(result, "rowcount", 0))

    async def reconcile_embedding(self, owner: str, asset_id: str) -> AssetRecord | None:
        """Derive one asset's embedding status from its jobs; see :meth:`reconcile_many`."""
        await self.reconcile_many(owner, [asset_id])
        return await self.get_for_owner(owner, asset_id)

    async def reconcile_many(self, owner: str, asset_ids: Sequence[str]) -> list[AssetSettled]:
        """Derive the assets' embedding status from their jobs (docs/design.md#worker-failures).

        Only embedding jobs count: an image is ``ready`` for visual search whatever became of
        its other jobs (OCR, descriptions), which record their own failures.

        ``visual`` is required: its failure fails the asset (with the job's error). A failed
        ``fused`` beside a done ``visual`` is ``partial``; all done is ``ready``; otherwise
        ``running`` while a job runs, else ``pending``. One statement for the whole batch.

        The same statement notifies ``ASSET_STATE_CHANNEL`` with the id of every asset it
        updated, so waiters (:class:`memory_db.repositories.asset_states.AssetStateWatch`)
        learn of the change when, and only if, this transaction commits.

        Returns the assets this call moved into ``ready`` or ``failed`` (for the metrics).
        """
        if not asset_ids:
            return []
        rows = await self._session.execute(
            text(_RECONCILE),
            {
                "owner": owner,
                "ids": list(asset_ids),
                "channel": ASSET_STATE_CHANNEL,
                "integrity": list(INTEGRITY_CODES),
            },
        )
        return [
            AssetSettled(asset_id=row.id, status=row.status, source_kind=row.source_kind)
            for row in rows
            if row.status != row.was and row.status in ("ready", "failed")
        ]


def settle_ctes(jobs: str) -> str:
    """CTEs ``latest``, ``agg`` and ``changed``: assets settled from their embedding jobs.

    ``jobs`` is a query of job rows (every column of ``mem_asset_embedding_jobs``) of the
    assets to settle; ``changed`` returns each asset it updated (``id``, ``status``,
    ``source_kind``). One definition for :meth:`AssetRepository.reconcile_many` and the
    worker's completion statement (``memory_db.vectors.completion``), which passes its jobs
    with the outcome it writes in the same statement (a statement does not see its own
    updates). Binds ``:integrity`` (:data:`INTEGRITY_CODES`).
    """
    return f"""
        latest AS (
            SELECT DISTINCT ON (asset_id, representation)
                   owner_identity, asset_id, representation, status, last_error_code,
                   last_error
            FROM ({jobs}) AS j
            WHERE kind = 'embed' AND status <> 'cancelled'
            ORDER BY asset_id, representation, created_at DESC
        ), agg AS (
            SELECT owner_identity, asset_id,
                   max(status) FILTER (WHERE representation = 'visual') AS visual,
                   max(status) FILTER (WHERE representation = 'fused') AS fused,
                   bool_or(status = 'running') AS running,
                   max(last_error_code) FILTER (WHERE representation = 'visual') AS code,
                   max(last_error) FILTER (WHERE representation = 'visual') AS message
            FROM latest GROUP BY owner_identity, asset_id
        ), changed AS (
        UPDATE mem_assets AS a SET
            embedding_status = CASE
                WHEN agg.visual = 'failed' THEN 'failed'
                WHEN agg.visual = 'done' AND coalesce(agg.fused, 'done') = 'done'
                    THEN 'ready'
                WHEN agg.visual = 'done' AND agg.fused = 'failed' THEN 'partial'
                WHEN agg.running THEN 'running'
                ELSE 'pending' END,
            status = CASE
                WHEN agg.visual = 'failed' THEN 'failed'
                WHEN agg.visual = 'done'
                     AND coalesce(agg.fused, 'done') IN ('done', 'failed') THEN 'ready'
                ELSE a.status END,
            failure_code = CASE WHEN agg.visual = 'failed' THEN agg.code
                ELSE a.failure_code END,
            failure_message = CASE WHEN agg.visual = 'failed' THEN agg.message
                ELSE a.failure_message END,
            updated_at = now()
        FROM agg
        WHERE a.id = agg.asset_id AND a.owner_identity = agg.owner_identity
          AND a.status IN ('processing', 'ready', 'failed')
          -- an image failed for its missing or changed bytes stays so, whatever a job that
          -- was under way when reconciliation found it does; lifting the quarantine is what
          -- settles it again
          AND NOT (a.status = 'failed' AND a.failure_code = ANY(:integrity))
        RETURNING a.id, a.status, a.source_kind
        )"""  # noqa: S608 (constant text; ``jobs`` is the callers' constant SQL)


# What an owner stores of one SHA-256 (``:o``, ``:s``): each copy's status, whether a delete
# took it out of use at most ``:within`` ago, and whether a quarantined copy waits for an
# integrity repair (``:codes``, INTEGRITY_CODES). Read by ObjectRepository.copies, and by the
# hold that decides with it in the same statement (QuotaRepository.reserve_for_copies).
COPIES_SQL = (
    "SELECT o.status, o.updated_at > now() - CAST(:within AS interval) AS recent, "
    "o.status = 'quarantined' AND EXISTS (SELECT 1 FROM mem_assets a "
    "WHERE a.owner_identity = o.owner_identity AND a.object_id = o.id "
    "AND a.status = 'failed' AND a.failure_code = ANY(:codes)) AS integrity "
    "FROM mem_asset_objects o WHERE o.owner_identity = :o AND o.sha256 = :s "
    "AND o.status IN ('available', 'deleting', 'quarantined')"
)


def copies_found(
    rows: Sequence[tuple[str, bool, bool]],
) -> tuple[bool, bool, QuarantineReason | None]:
    """``(live, recent, quarantined)`` from the rows of :data:`COPIES_SQL`."""
    live = any(status == "available" for status, _recent, _integrity in rows)
    recent = not live and any(
        status == "deleting" and bool(was_recent) for status, was_recent, _integrity in rows
    )
    quarantined: QuarantineReason | None = None
    if not live and not recent:
        reasons = [integrity for status, _recent, integrity in rows if status == "quarantined"]
        if reasons:
            quarantined = "integrity" if reasons[0] else "unreadable"
    return live, recent, quarantined


# AssetRepository.reconcile_many's statement.
_RECONCILE = (
    "WITH before AS (SELECT id, status FROM mem_assets "  # noqa: S608 (constant SQL)
    "WHERE owner_identity = :owner AND id = ANY(:ids)), "
    + settle_ctes(
        "SELECT * FROM mem_asset_embedding_jobs "
        "WHERE owner_identity = :owner AND asset_id = ANY(:ids)"
    )
    + " SELECT pg_notify(:channel, changed.id), changed.id, changed.status, "
    "changed.source_kind, before.status AS was "
    "FROM changed JOIN before ON before.id = changed.id"
)

__all__ = [
    "COPIES_SQL",
    "AssetRepository",
    "DuplicateObject",
    "ObjectRepository",
    "copies_found",
    "object_record",
    "settle_ctes",
]
