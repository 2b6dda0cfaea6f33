"""The save flow (docs/design.md#saving): from a URL or base64 to an asset with queued jobs.

Transactions are short and never span the network:

1. authorise, validate project/folder, open the (idempotent) reservation;
2. fetch or decode the bytes, inspect them, make the preview (no transaction);
3. lock the owner's namespace and reserve the bytes (``quota_exceeded`` when they do not fit);
4. upload new immutable objects unless the owner already stores the same SHA-256;
5. lock the namespace again, create (or reuse) the object, the asset and its jobs, turn the
   reservation into used bytes, record provenance and notify workers — all in one commit.

A failure after step 3 releases the reserved bytes; objects uploaded before a failed commit
are recorded as orphan candidates for reconciliation. Repeating a request with the same
idempotency key returns the asset of the first; concurrent repeats wait for it. A refused save
(``fetch_failed``, ``invalid_image``, ``unsafe_url``, ``quota_exceeded``...) stores nothing and
does not use its key up: the corrected retry under the same key is a new attempt.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import anyio
import httpx
from pydantic import Field

from memory_db import (
    Conflict,
    MemoryDbError,
    NotFound,
    QuotaExceededError,
    UnitOfWork,
    VaultScope,
    get_logger,
    new_id,
)
from memory_db.repositories import DuplicateObject, ObjectRecord
from memory_db.storage import build_object_key
from memory_tools import policy
from memory_tools.access import Caller, resolve_vault
from memory_tools.errors import (
    ConflictFailure,
    FeatureDisabled,
    InvalidImage,
    InvalidInputFailure,
    NotFoundFailure,
    QuotaExceeded,
    ToolFailure,
    translate,
)
from memory_tools.ingest import inputs
from memory_tools.ingest.fetch import check_url
from memory_tools.ingest.images import InspectedImage, inspect_image
from memory_tools.services import MemoryServices
from memory_tools.wire import WireModel

log = get_logger(__name__)

OPERATION = "asset_save"
VECTOR_HEADER_BYTES = 8
_POLL_SECONDS = 0.1


@dataclass(frozen=True)
class SaveRequest:
    """What a caller asked to save (exactly one of the three sources)."""

    vault: str = "Library"
    source_url: str | None = None
    artifact_id: str | None = None
    image_base64: str | None = None
    title: str | None = None
    description: str | None = None
    alt_text: str | None = None
    tags: list[str] = field(default_factory=list[str])
    source_ref: dict[str, Any] = field(default_factory=dict[str, Any])
    project_id: str | None = None
    folder_id: str | None = None
    idempotency_key: str | None = None


class SaveResult(WireModel):
    """The asset a save created, or the one an earlier save with the same key created."""

    asset_id: str = Field(description="Opaque asset id (ast_...).")
    object_id: str = Field(description="The stored bytes (aob_...); shared by identical images.")
    vault: str
    status: str = Field(description="processing until embedded, then ready or failed.")
    embedding_status: str = Field(description="pending, running, ready, partial or failed.")
    deduplicated: bool = Field(description="True when you already stored these exact bytes.")
    replayed: bool = Field(description="True when an earlier save with this idempotencyKey won.")
    job_ids: list[str] = Field(description="Embedding jobs (aej_...), one per representation.")
    width: int
    height: int
    mime_type: str
    bytes: int


@dataclass(frozen=True)
class _Prepared:
    """The validated, normalised request (no I/O has happened yet)."""

    request: SaveRequest
    source_kind: Literal["external_url", "upload"]
    fetch_url: str | None  # as given (a signed CDN URL needs its query to be fetched)
    source_url: str | None  # as stored: scrubbed of credentials
    data: bytes | None  # base64 input, decoded
    title: str | None
    title_source: Literal["caller", "derived"]
    description: str | None
    alt_text: str | None
    tags: list[str]
    source_ref: dict[str, Any]
    idempotency_key: str | None

    def fingerprint(self) -> str:
        """What makes two requests with one idempotency key the same request."""
        material = {
            "vault": self.request.vault,
            "url": self.request.source_url,
            "data": hashlib.sha256(self.data).hexdigest() if self.data is not None else None,
            "title": self.title,
            "description": self.description,
            "alt": self.alt_text,
            "tags": self.tags,
            "ref": self.source_ref,
            "project": self.request.project_id,
            "folder": self.request.folder_id,
        }
        return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class SaveTarget:
    """Where a save goes: the vault scope, its handle as the caller named it, the namespace."""

    scope: VaultScope
    display_vault: str
    namespace_id: str
    project_id: str | None
    folder_id: str | None


def fused_text(
    *,
    title: str | None,
    title_source: str,
    alt_text: str | None,
    description: str | None,
    source_ref: dict[str, Any],
) -> str | None:
    """The whitelisted text of a fused representation, or ``None`` when there is none.

    Only a caller-given title, alt text, description and a page title count; never a file
    name, a path or a URL (docs/design.md#representations).
    """
    parts: list[str] = []
    if title and title_source == "caller":
        parts.append(title)
    for value in (alt_text, description, source_ref.get("pageTitle")):
        if isinstance(value, str) and value.strip() and value not in parts:
            parts.append(value.strip())
    return "\n".join(parts) if parts else None


async def check_placement(
    uow: UnitOfWork,
    scope: VaultScope,
    project_id: str | None,
    folder_id: str | None,
    *,
    key_share: bool = False,
) -> None:
    """The project exists and is active, and the folder belongs to it (``MemoryDbError``s)."""
    if project_id is not None:
        project = await uow.projects.get(scope, project_id, key_share=key_share)
        if project.status != "active":
            raise Conflict("the project is archived; it takes no new images")
    if folder_id is not None:
        folder = await uow.folders.get(scope, folder_id, key_share=key_share)
        if folder.project_id != project_id:
            raise NotFound("folder")


def vector_bytes(services: MemoryServices, representations: int) -> int:
    """Bytes the vectors of one asset take (counted against the quota, docs/design.md#namespace)."""
    element = 2 if services.settings.asset_embed_vector_type == "halfvec" else 4
    return representations * (services.settings.asset_embed_dim * element + VECTOR_HEADER_BYTES)


class AssetSaver:
    """Runs the save flow for one server's services."""

    def __init__(self, services: MemoryServices) -> None:
        self.services = services
        self._settings = services.settings
        # How long a deleted image's bytes stay (``ASSET_DELETE_GRACE_HOURS``): a save of the
        # same bytes within it takes that copy back instead of storing and charging another.
        self._delete_grace = timedelta(hours=services.settings.asset_delete_grace_hours)

    # --- step 0: input ----------------------------------------------------------------------

    def prepare(self, request: SaveRequest, *, upload: bool = False) -> _Prepared:
        """Validate and normalise ``request``; raises ``invalid_input``/``unsafe_url``.

        ``upload`` is the direct-upload flow: the bytes arrive later, so no source is given.
        """
        sources = [
            name
            for name, value in (
                ("sourceUrl", request.source_url),
                ("artifactId", request.artifact_id),
                ("imageBase64", request.image_base64),
            )
            if value is not None
        ]
        if upload and sources:
            raise InvalidInputFailure("an upload carries its bytes itself; give no other source")
        if not upload and len(sources) != 1:
            given = ", ".join(sources) if sources else "none"
            raise InvalidInputFailure(
                f"give exactly one of sourceUrl, artifactId, imageBase64 (given: {given})"
            )
        if request.artifact_id is not None:
            # Scraper artifacts arrive with the scraper integration; until then none exist.
            raise NotFoundFailure("artifact not found")
        if request.folder_id is not None and request.project_id is None:
            raise InvalidInputFailure("folderId: give the folder's projectId as well")
        data: bytes | None = None
        source_url: str | None = None
        fetch_url: str | None = None
        kind: Literal["external_url", "upload"] = "upload"
        if upload:
            pass
        elif request.image_base64 is not None:
            data = inputs.decode_base64(request.image_base64, self._settings.asset_max_bytes)
        else:
            assert request.source_url is not None
            fetcher = self.services.fetcher
            policy = fetcher.policy if fetcher is not None else None
            if policy is None:
                raise FeatureDisabled("saving by URL is not configured on this server")
            url = check_url(request.source_url, policy)
            fetch_url = str(url)
            source_url = inputs.scrub_url(fetch_url)
            kind = "external_url"
        title = inputs.clean_text(request.title, "title", inputs.MAX_TITLE)
        title_source: Literal["caller", "derived"] = "caller"
        if title is None:
            title_source = "derived"
            host = httpx.URL(source_url).host if source_url else None
            title = f"Image from {host}" if host else None  # the upload default comes later
        return _Prepared(
            request=request,
            source_kind=kind,
            fetch_url=fetch_url,
            source_url=source_url,
            data=data,
            title=title,
            title_source=title_source,
            description=inputs.clean_text(
                request.description, "description", inputs.MAX_DESCRIPTION
            ),
            alt_text=inputs.clean_text(request.alt_text, "altText", inputs.MAX_ALT_TEXT),
            tags=inputs.canonical_tags(request.tags),
            source_ref=inputs.source_ref(request.source_ref),
            idempotency_key=inputs.idempotency_key(request.idempotency_key),
        )

    # --- the flow ---------------------------------------------------------------------------

    async def save(self, caller: Caller, request: SaveRequest) -> SaveResult:
        """Save one image for ``caller``; see the module docstring for the steps."""
        policy.require(self._settings)
        if self.services.embedder is None:
            raise FeatureDisabled("no embedder is configured on this server")
        prepared = self.prepare(request)
        target, reservation_id, replay = await self._open(caller, prepared)
        if replay is not None:
            return replay
        try:
            data = prepared.data
            if data is None:
                assert prepared.fetch_url is not None and self.services.fetcher is not None
                # A download can take ASSET_FETCH_TIMEOUT_SECONDS: other calls go meanwhile.
                async with self.services.call_admission.stepped_aside():
                    data = (await self.services.fetcher.fetch(prepared.fetch_url)).data
            image = await inspect_image(
                data,
                max_pixels=self._settings.asset_max_decoded_pixels,
                preview_edge=self._settings.asset_preview_max_edge,
                admission=self.services.decode_admission,
            )
            return await self.store(caller, prepared, target, reservation_id, data, image)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.release(target.scope.owner_identity, reservation_id)
            raise

    async def _open(
        self, caller: Caller, prepared: _Prepared
    ) -> tuple[SaveTarget, str, SaveResult | None]:
        """Authorise, resolve the target, and open or join the reservation."""
        request = prepared.request
        deadline = anyio.current_time() + self._settings.asset_fetch_timeout_seconds + 60
        while True:
            async with self.services.database.unit_of_work() as uow:
                target = await self.target(uow, caller, request)
                owner = target.scope.owner_identity
                expected = (
                    len(prepared.data)
                    if prepared.data is not None
                    else self._settings.asset_max_bytes
                )
                expires = datetime.now(UTC) + timedelta(
                    seconds=self._settings.asset_fetch_timeout_seconds + 600
                )
                reservation, created = await uow.quota.open_reservation(
                    owner,
                    operation=OPERATION,
                    idempotency_key=prepared.idempotency_key,
                    expected_bytes=expected,
                    expires_at=expires,
                    vault=target.scope.physical_vault,
                    request={"fingerprint": prepared.fingerprint()},
                )
                if created:
                    return target, reservation.id, None
                if reservation.status in ("released", "expired"):
                    # The earlier attempt was refused or abandoned and stored nothing: the key
                    # is free for a retry, corrected or not, which takes the reservation over.
                    retaken = await uow.quota.retake(
                        owner,
                        reservation.id,
                        expires_at=expires,
                        expected_bytes=expected,
                        vault=target.scope.physical_vault,
                        request={"fingerprint": prepared.fingerprint()},
                    )
                    if retaken is not None:
                        return target, retaken.id, None
                elif reservation.request.get("fingerprint") != prepared.fingerprint():
                    raise ConflictFailure(
                        "idempotencyKey was already used for a different save request"
                    )
                elif reservation.status == "finalized" and reservation.asset_id is not None:
                    return (
                        target,
                        reservation.id,
                        await self.replay(uow, target, reservation.asset_id),
                    )
            # Another request with this key is in flight: wait for its outcome.
            if anyio.current_time() > deadline:
                raise ConflictFailure("a save with this idempotencyKey is still in progress")
            await anyio.sleep(_POLL_SECONDS)

    async def target(self, uow: UnitOfWork, caller: Caller, request: SaveRequest) -> SaveTarget:
        """The writable vault scope, project and folder ``request`` names, for ``caller``."""
        vault = await resolve_vault(uow, caller, request.vault, "write")
        scope = vault.record.scope
        try:
            await check_placement(uow, scope, request.project_id, request.folder_id)
            usage = await uow.quota.usage(scope.owner_identity)
        except MemoryDbError as exc:
            raise translate(exc) from None
        return SaveTarget(
            scope=scope,
            display_vault=vault.display_handle,
            namespace_id=usage.namespace_id,
            project_id=request.project_id,
            folder_id=request.folder_id,
        )

    async def replay(self, uow: UnitOfWork, target: SaveTarget, asset_id: str) -> SaveResult:
        """The current state of an asset an earlier request created."""
        asset = await uow.assets.get_for_owner(target.scope.owner_identity, asset_id)
        if asset is None or asset.status in ("deleting", "deleted"):
            raise ConflictFailure("idempotencyKey belongs to an asset that has been deleted")
        stored = await uow.objects.get(asset.owner_identity, asset.object_id)
        jobs = await uow.jobs.for_asset(asset.owner_identity, asset.id)
        return SaveResult(
            asset_id=asset.id,
            object_id=asset.object_id,
            vault=target.display_vault,
            status=asset.status,
            embedding_status=asset.embedding_status,
            deduplicated=bool(asset.metadata.get("deduplicated", False)),
            replayed=True,
            job_ids=[job.id for job in jobs],
            width=stored.width,
            height=stored.height,
            mime_type=stored.mime_type,
            bytes=stored.bytes,
        )

    async def release(self, owner: str, reservation_id: str) -> None:
        """Give a reservation's bytes back (best effort; the expiry sweep is the fallback)."""
        try:
            async with self.services.database.unit_of_work() as uow:
                await uow.quota.release(owner, reservation_id)
        except Exception:  # the expiry sweep releases it later
            log.warning(
                "asset_reservation_release_failed", reservation_id=reservation_id, exc_info=True
            )

    async def store(
        self,
        caller: Caller,
        prepared: _Prepared,
        target: SaveTarget,
        reservation_id: str,
        data: bytes,
        image: InspectedImage,
        *,
        object_id: str | None = None,
    ) -> SaveResult:
        """Steps 3-5: reserve, write the objects (create-only), commit.

        ``object_id``: the id to store new bytes under (a direct upload decided it at
        initiation); a fresh one otherwise.
        """
        owner = target.scope.owner_identity
        text = fused_text(
            title=prepared.title,
            title_source=prepared.title_source,
            alt_text=prepared.alt_text,
            description=prepared.description,
            source_ref=prepared.source_ref,
        )
        representations = ["visual", "fused"] if text else ["visual"]
        vectors = vector_bytes(self.services, len(representations))
        # Step 3: reserve what this save would add, under the namespace lock.
        async with self.services.database.unit_of_work() as uow:
            existing = await uow.objects.find_reusable(owner, image.sha256)
            if existing is None:
                # Deleted within the grace window: the bytes are still stored and counted.
                existing = await uow.objects.find_recently_deleted(
                    owner, image.sha256, within=self._delete_grace
                )
            if existing is None and await uow.objects.is_quarantined(owner, image.sha256):
                raise InvalidImage(
                    "these exact bytes are quarantined: the embedding provider could not read "
                    "them before"
                )
            need = vectors + (0 if existing else image.bytes + len(image.preview))
            try:
                await uow.quota.reserve(owner, reservation_id, need)
            except QuotaExceededError as exc:
                raise QuotaExceeded(str(exc)) from None
        object_id = object_id or new_id("aob")
        uploaded: list[str] = []
        receipts: tuple[str | None, str | None] = (None, None)
        if existing is None:
            uploaded, receipts = await self._upload(target, object_id, data, image)
        try:
            result, losers = await self._commit(
                caller,
                prepared,
                target,
                reservation_id,
                image,
                object_id,
                receipts,
                existing,
                representations,
                text,
                vectors,
            )
        except ToolFailure:
            # Refused inside the transaction (e.g. the folder was deleted meanwhile): it rolled
            # back for certain, so nothing references these bytes. Delete them now.
            with anyio.CancelScope(shield=True):
                await self._discard(owner, uploaded)
            raise
        except BaseException as exc:
            # The commit itself may or may not have happened: keep the bytes for the orphan
            # sweep, which deletes them only if no object row claims them after the window.
            with anyio.CancelScope(shield=True):
                await self._orphan(owner, uploaded, f"save commit failed: {type(exc).__name__}")
            raise
        if losers:
            with anyio.CancelScope(shield=True):
                await self._discard(owner, losers)
        return result

    async def _upload(
        self,
        target: SaveTarget,
        object_id: str,
        data: bytes,
        image: InspectedImage,
    ) -> tuple[list[str], tuple[str | None, str | None]]:
        env = self._settings.asset_storage_env_prefix
        original_key = build_object_key(
            env, target.namespace_id, object_id, "original", image.format.extension
        )
        preview_key = build_object_key(env, target.namespace_id, object_id, "preview")
        store = self.services.store
        uploaded: list[str] = []
        receipts: tuple[str | None, str | None] = (None, None)
        try:
            put = await store.put(
                original_key,
                data,
                content_type=image.format.mime_type,
                checksum_sha256=image.sha256,
            )
            uploaded.append(original_key)
            receipts = (put.etag, put.version_id)
            await store.put(
                preview_key,
                image.preview,
                content_type="image/webp",
                checksum_sha256=hashlib.sha256(image.preview).hexdigest(),
            )
            uploaded.append(preview_key)
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                await self._orphan(
                    target.scope.owner_identity,
                    [original_key, preview_key],
                    f"upload failed: {type(exc).__name__}",
                )
            if isinstance(exc, MemoryDbError):
                raise ToolFailure("the object store could not take the image; try again") from None
            raise
        return uploaded, receipts

    async def _commit(
        self,
        caller: Caller,
        prepared: _Prepared,
        target: SaveTarget,
        reservation_id: str,
        image: InspectedImage,
        object_id: str,
        receipts: tuple[str | None, str | None],
        existing: ObjectRecord | None,
        representations: list[str],
        text: str | None,
        vectors: int,
    ) -> tuple[SaveResult, list[str]]:
        """Step 5. Returns the result and keys to discard (a concurrent save won the object)."""
        owner = target.scope.owner_identity
        env = self._settings.asset_storage_env_prefix
        embedder = self.services.embedder
        assert embedder is not None
        losers: list[str] = []
        async with self.services.database.unit_of_work() as uow:
            await uow.quota.usage(owner, lock=True)
            stored = await uow.objects.find_reusable(owner, image.sha256) if existing else None
            if existing is not None and stored is None:
                # A copy a delete left within its grace window is taken back into use (its
                # deleted assets stay restorable and share it); one purged meanwhile is gone.
                recent = await uow.objects.find_recently_deleted(
                    owner, image.sha256, within=self._delete_grace
                )
                if recent is None or not await uow.objects.take_back(owner, recent.id):
                    raise ConflictFailure("the stored copy of this image changed meanwhile; retry")
                stored = recent
            if stored is None:
                try:
                    stored = await uow.objects.create(
                        object_id=object_id,
                        owner=owner,
                        namespace_id=target.namespace_id,
                        sha256=image.sha256,
                        storage_key=build_object_key(
                            env, target.namespace_id, object_id, "original", image.format.extension
                        ),
                        preview_storage_key=build_object_key(
                            env, target.namespace_id, object_id, "preview"
                        ),
                        preview_sha256=hashlib.sha256(image.preview).hexdigest(),
                        mime_type=image.format.mime_type,
                        extension=image.format.extension,
                        nbytes=image.bytes,
                        preview_bytes=len(image.preview),
                        width=image.width,
                        height=image.height,
                        etag=receipts[0],
                        version_id=receipts[1],
                    )
                except DuplicateObject:
                    # A concurrent save of the same bytes committed first: share its object.
                    stored = await uow.objects.find_reusable(owner, image.sha256)
                    if stored is None:
                        raise ConflictFailure(
                            "a concurrent save is storing this image; retry"
                        ) from None
                    losers = [
                        build_object_key(
                            env, target.namespace_id, object_id, "original", image.format.extension
                        ),
                        build_object_key(env, target.namespace_id, object_id, "preview"),
                    ]
            deduplicated = stored.id != object_id
            used = vectors + (0 if deduplicated else image.bytes + len(image.preview))
            metadata: dict[str, Any] = {
                "image": {
                    "format": image.format.name,
                    "pages": image.pages,
                    "orientation": image.orientation,
                    "previewWidth": image.preview_width,
                    "previewHeight": image.preview_height,
                },
                "titleSource": prepared.title_source,
                "deduplicated": deduplicated,
                "vectorBytes": vectors,
                "embedding": {
                    "fused": "queued"
                    if text
                    else "skipped: no caller title, alt text, description or page title"
                },
            }
            title = (
                prepared.title or f"Image {image.format.name.upper()} {image.width}x{image.height}"
            )
            try:
                # Again, locked: the project may have been archived or the folder deleted since
                # the first check; a concurrent archive or folder deletion waits for us or we
                # see its outcome.
                await check_placement(
                    uow, target.scope, target.project_id, target.folder_id, key_share=True
                )
            except MemoryDbError as exc:
                raise translate(exc) from None
            asset = await uow.assets.create(
                target.scope,
                object_id=stored.id,
                project_id=target.project_id,
                folder_id=target.folder_id,
                title=title,
                description=prepared.description,
                alt_text=prepared.alt_text,
                source_url=prepared.source_url,
                source_url_hash=(
                    hashlib.sha256(prepared.source_url.encode()).hexdigest()
                    if prepared.source_url
                    else None
                ),
                source_kind=prepared.source_kind,
                source_ref=prepared.source_ref,
                tags=prepared.tags,
                metadata=metadata,
                created_by=caller.identity,
            )
            jobs = [
                await uow.jobs.create(
                    owner,
                    asset.id,
                    representation=representation,
                    model=embedder.model,
                    dimensions=embedder.dimensions,
                )
                for representation in representations
            ]
            await uow.quota.finalize(owner, reservation_id, asset_id=asset.id, used_bytes=used)
            await uow.provenance.record(
                OPERATION,
                actor_identity=caller.identity,
                owner_identity=owner,
                vault=target.scope.physical_vault,
                target_kind="asset",
                target_id=asset.id,
                detail={
                    "sourceKind": prepared.source_kind,
                    "bytes": image.bytes,
                    "deduplicated": deduplicated,
                    "representations": representations,
                },
            )
            await uow.jobs.notify()
        log.info(
            "asset_saved",
            asset_id=asset.id,
            object_id=stored.id,
            bytes=image.bytes,
            deduplicated=deduplicated,
        )
        return (
            SaveResult(
                asset_id=asset.id,
                object_id=stored.id,
                vault=target.display_vault,
                status=asset.status,
                embedding_status=asset.embedding_status,
                deduplicated=deduplicated,
                replayed=False,
                job_ids=[job.id for job in jobs],
                width=stored.width,
                height=stored.height,
                mime_type=stored.mime_type,
                bytes=stored.bytes,
            ),
            losers,
        )

    async def _orphan(self, owner: str, keys: list[str], reason: str) -> None:
        if not keys:
            return
        try:
            async with self.services.database.unit_of_work() as uow:
                await uow.orphans.record(owner, keys, reason=reason)
        except Exception:
            log.error("asset_orphans_record_failed", keys=len(keys), exc_info=True)

    async def _discard(self, owner: str, keys: list[str]) -> None:
        """Delete bytes nobody references (lost dedupe race, refused commit); record failures."""
        failed: list[str] = []
        for key in keys:
            try:
                await self.services.store.delete(key)
            except Exception:
                failed.append(key)
        await self._orphan(owner, failed, "discarding a duplicate upload failed")
