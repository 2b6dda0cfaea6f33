"""The save flow (docs/design.md#saving): from a URL or base64 to an asset with queued jobs.

A save is a plan and its steps. The request becomes an intent (validated, no I/O) and an
:class:`ImageSource`; the intent opens its reservation (an order); the source's bytes, once
inspected, make the plan (``memory_tools.ingest.plan``); the steps run on the plan.
Transactions are short and never span the network:

1. authorise, validate project/folder, open the (idempotent) reservation;
2. read the source (decode, fetch), inspect the bytes, make the preview (no transaction);
3. ``reserve``: lock the owner's namespace, decide dedupe, hold the bytes (``quota_exceeded``);
4. ``store``: upload new immutable objects unless the owner already stores the same SHA-256;
5. ``commit``: lock the namespace again, create (or reuse) the object, the asset and its jobs,
   turn the reservation into used bytes, record provenance and notify workers, in one commit
   (for new bytes with nothing to repeat or place, one statement:
   ``memory_db.repositories.saves``).

Steps 1 and 3 are statements of their own, outside any transaction (issue 31: a save with its
worker's processing went from 42 round trips to 17, docs/performance.md).

A failure after step 1 runs ``release``: the reserved bytes come back (a durable source, a
staged upload, keeps its reservation after a failure that is not about its bytes, for a retry).
Objects uploaded before a failed commit are recorded as orphan candidates for reconciliation.
Repeating a request with the same idempotency key returns the asset of the first; concurrent
repeats wait for it. A refused save (``fetch_failed``, ``invalid_image``, ``unsafe_url``,
``quota_exceeded``...) stores nothing and does not use its key up: the corrected retry under
the same key is a new attempt. A new source of bytes is a new :class:`ImageSource`.

A scraper artifact (``artifactId``) is such a source: before anything else the saver reads the
artifact's row as the caller's (``owned_artifact``: unknown, another owner's and expired all
answer ``not_found``), and only then reads its bytes, from the key the row records
(:class:`~memory_tools.ingest.sources.StoredArtifact`). The asset records the artifact's
``sourceKind`` (``scrape`` or ``screenshot``) and its ``sourceRef`` (:func:`artifact_source_ref`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import anyio
import httpx
import structlog
from pydantic import Field

from memory_db import (
    Conflict,
    MemoryDbError,
    NotFound,
    QuotaExceededError,
    StorageUnavailable,
    UnitOfWork,
    VaultScope,
    get_logger,
    is_valid_id,
    new_id,
)
from memory_db.embedding import Embedder
from memory_db.repositories import (
    ArtifactRecord,
    AssetRecord,
    DuplicateObject,
    NewImage,
    ObjectRecord,
)
from memory_tools import metrics, policy
from memory_tools.access import Caller, resolve_vault
from memory_tools.errors import (
    ConflictFailure,
    FeatureDisabled,
    InvalidImage,
    InvalidInputFailure,
    NotFoundFailure,
    QuotaExceeded,
    ToolFailure,
    Unavailable,
    translate,
)
from memory_tools.ingest import inputs, reservations
from memory_tools.ingest.exif import kept_capture
from memory_tools.ingest.images import inspect_image
from memory_tools.ingest.plan import (
    OCR_ENGINE,
    SCRAPER_SOURCE_KINDS,
    Dedupe,
    SaveIntent,
    SaveOrder,
    SavePlan,
    SaveTarget,
    SourceKind,
    dedupe,
    ocr_wanted,
    plan_save,
    repeat_key,
    source_url_hash,
)
from memory_tools.ingest.reservations import Opened, ReservationAsk, open_in_vault
from memory_tools.ingest.sources import Download, ImageSource, InlineBytes, StoredArtifact
from memory_tools.progress import Progress, no_progress
from memory_tools.services import MemoryServices
from memory_tools.wire import NearDuplicate, WireModel

log = get_logger(__name__)

OPERATION = "asset_save"
VECTOR_HEADER_BYTES = 8
_POLL_SECONDS = 0.1
# Steps a save reports (memory_tools.progress): read or fetch, check, store, saved.
SAVE_STEPS = 3


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
    # The name of the file the bytes were uploaded as (a path is cut to its base name): kept
    # with the asset, and its stem is the title when the caller gives none.
    file_name: str | None = None
    # What a URL save records as its source: a URL the caller named, or an image a scraper
    # found on a page (``scrape_page_images`` with ``save``; its page goes in ``source_ref``).
    url_source_kind: Literal["external_url", "scrape"] = "external_url"


class SaveResult(WireModel):
    """The asset a save created, or the one an earlier save with the same key created."""

    asset_id: str = Field(description="Opaque asset id (ast_...).")
    object_id: str = Field(description="The stored bytes (aob_...); shared by identical images.")
    vault: str
    status: str = Field(description="processing until embedded, then ready or failed.")
    embedding_status: str = Field(description="pending, running, ready, partial or failed.")
    deduplicated: bool = Field(
        description="True when you already stored these exact bytes; for a scraper save "
        "(an artifactId, or scrape_page_images with save), also when this is the asset an "
        "earlier save of the same source made, returned unchanged."
    )
    replayed: bool = Field(description="True when an earlier save with this idempotencyKey won.")
    job_ids: list[str] = Field(description="Embedding jobs (aej_...), one per representation.")
    width: int
    height: int
    mime_type: str
    bytes: int
    near_duplicates: list[NearDuplicate] | None = Field(
        default=None, description="Lookalikes in the vault; null until embedded (waitSeconds)."
    )


@dataclass(frozen=True)
class _Written:
    """What the store step wrote: the keys, and the original's receipt."""

    keys: tuple[str, ...] = ()
    etag: str | None = None
    version_id: str | None = None


def require_folder_project(request: SaveRequest) -> None:
    """A folder is named with its project (``invalid_input``)."""
    if request.folder_id is not None and request.project_id is None:
        raise InvalidInputFailure("folderId: give the folder's projectId as well")


# What an artifact's source ref may hand on to the asset's (docs/design.md#artifacts).
ARTIFACT_REF_KEYS = ("imageUrl", "pageUrl", "pageTitle", "altText", "caption")


def artifact_source_ref(artifact: ArtifactRecord, given: dict[str, Any]) -> dict[str, Any]:
    """The asset's sourceRef: the artifact's recorded context, then the caller's other keys.

    What the server recorded when it fetched the bytes (the image and page URLs, the page title,
    alt text and caption it saw) wins over the caller's ``sourceRef``: a save cannot rewrite
    where its bytes came from. The caller's keys that the artifact does not record are kept.
    """
    recorded = {
        key: artifact.source_ref[key]
        for key in ARTIFACT_REF_KEYS
        if artifact.source_ref.get(key) not in (None, "")
    }
    return {**given, **recorded}


def describe(
    request: SaveRequest,
    *,
    source_kind: SourceKind,
    source_url: str | None = None,
    data: bytes | None = None,
    artifact: ArtifactRecord | None = None,
) -> SaveIntent:
    """The validated, normalised intent of ``request`` (``invalid_input``).

    ``source_url``: the URL as stored (scrubbed); ``data``: inline bytes. Both only take part
    in the fingerprint and the derived title; the bytes themselves travel in the source.
    ``artifact``: the caller's artifact the bytes come from; its recorded context joins the
    source ref (:func:`artifact_source_ref`) and its alt text stands in for a missing
    ``altText``.
    """
    title = inputs.clean_text(request.title, "title", inputs.MAX_TITLE)
    file_name = inputs.file_name(request.file_name)
    title_source: Literal["caller", "derived"] = "caller"
    if title is None:
        # A derived title is never part of the fused text (plan.fused_text): a file name says
        # how a camera or a download named the bytes, not what they show.
        title_source = "derived"
        host = httpx.URL(source_url).host if source_url else None
        title = inputs.title_from_file_name(file_name) or (
            f"Image from {host}" if host else None  # otherwise the plan's default
        )
    description = inputs.clean_text(request.description, "description", inputs.MAX_DESCRIPTION)
    alt_text = inputs.clean_text(request.alt_text, "altText", inputs.MAX_ALT_TEXT)
    tags = inputs.canonical_tags(request.tags)
    source_ref = inputs.source_ref(request.source_ref)
    if artifact is not None:
        source_ref = inputs.source_ref(artifact_source_ref(artifact, source_ref))
        if alt_text is None:
            recorded_alt = artifact.source_ref.get("altText")
            if isinstance(recorded_alt, str):
                alt_text = inputs.clean_text(
                    recorded_alt[: inputs.MAX_ALT_TEXT], "altText", inputs.MAX_ALT_TEXT
                )
    idempotency_key = inputs.idempotency_key(request.idempotency_key)
    material = {
        "vault": request.vault,
        "url": request.source_url,
        "data": hashlib.sha256(data).hexdigest() if data is not None else None,
        "title": title,
        "description": description,
        "alt": alt_text,
        "tags": tags,
        "ref": source_ref,
        "project": request.project_id,
        "folder": request.folder_id,
    }
    if request.artifact_id is not None:
        material["artifact"] = request.artifact_id
    if file_name is not None:  # absent otherwise, so earlier requests keep their fingerprint
        material["fileName"] = file_name
    return SaveIntent(
        vault=request.vault,
        project_id=request.project_id,
        folder_id=request.folder_id,
        source_kind=source_kind,
        source_url=source_url,
        title=title,
        title_source=title_source,
        description=description,
        alt_text=alt_text,
        tags=tags,
        source_ref=source_ref,
        idempotency_key=idempotency_key,
        file_name=file_name,
        fingerprint=hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest(),
        artifact_id=artifact.id if artifact is not None else None,
    )


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


def _target(opened: Opened, intent: SaveIntent) -> SaveTarget:
    """Where the save goes, from its opening (:meth:`ImageSaver.target` reads it apart)."""
    # Logs name the owner by this opaque id, never by their identity.
    structlog.contextvars.bind_contextvars(namespace_id=opened.namespace_id)
    vault = opened.vault
    return SaveTarget(
        scope=vault.record.scope,
        display_vault=vault.display_handle,
        namespace_id=opened.namespace_id,
        project_id=intent.project_id,
        folder_id=intent.folder_id,
        caller_is_owner=vault.record.permission == "owner",
    )


def _result(
    target: SaveTarget,
    asset: AssetRecord,
    stored: ObjectRecord,
    job_ids: list[str],
    *,
    deduplicated: bool,
    replayed: bool,
    repeated: bool = False,
) -> SaveResult:
    return SaveResult(
        asset_id=asset.id,
        object_id=stored.id,
        vault=target.display_vault,
        status=asset.status,
        embedding_status=asset.embedding_status,
        # Shared bytes are the owner's business; a repeated asset is in the vault the caller
        # writes to, so a grantee learns nothing by it.
        deduplicated=repeated or (deduplicated and target.caller_is_owner),
        replayed=replayed,
        job_ids=job_ids,
        width=stored.width,
        height=stored.height,
        mime_type=stored.mime_type,
        bytes=stored.bytes,
    )


_ARTIFACT_KINDS: dict[str, SourceKind] = {"scrape": "scrape", "screenshot": "screenshot"}

# Failures that are about the bytes themselves: even bytes that stay (a staged upload) can never
# become this asset, so the reservation is released.
_FINAL = (InvalidImage, QuotaExceeded)


class AssetSaver:
    """Runs the save flow for one server's services: a plan, then its steps."""

    def __init__(self, services: MemoryServices) -> None:
        self.services = services
        self._settings = services.settings
        # How long a deleted image's bytes stay (``ASSET_DELETE_GRACE_HOURS``): a save of the
        # same bytes within it takes that copy back instead of storing and charging another.
        self._delete_grace = timedelta(hours=services.settings.asset_delete_grace_hours)

    # --- step 0: input ----------------------------------------------------------------------

    async def prepare(
        self, request: SaveRequest, artifact: ArtifactRecord | None = None
    ) -> tuple[SaveIntent, ImageSource]:
        """Validate and normalise ``request``; raises ``invalid_input``/``unsafe_url``.

        ``artifact``: the caller's artifact ``request.artifact_id`` names, as
        :meth:`owned_artifact` found it (``None``: none of the caller's, ``not_found``).
        """
        self.require_one_source(request)
        if request.artifact_id is not None:
            if artifact is None or artifact.id != request.artifact_id:
                raise NotFoundFailure("artifact not found")
            require_folder_project(request)
            source_url = artifact.source_ref.get("imageUrl") or artifact.source_ref.get("pageUrl")
            intent = describe(
                request,
                source_kind=_ARTIFACT_KINDS[artifact.source_kind],
                source_url=source_url if isinstance(source_url, str) else None,
                artifact=artifact,
            )
            return intent, StoredArtifact(self.services.store, artifact)
        require_folder_project(request)
        if request.image_base64 is not None:
            data = inputs.decode_base64(request.image_base64, self._settings.asset_max_bytes)
            return describe(request, source_kind="upload", data=data), InlineBytes(data)
        if request.source_url is None:
            raise InvalidInputFailure("give imageBase64, sourceUrl or artifactId")
        fetcher = self.services.fetcher
        if fetcher is None:
            raise FeatureDisabled("saving by URL is not configured on this server")
        fetch_url = str(await fetcher.check(request.source_url))
        intent = describe(
            request, source_kind=request.url_source_kind, source_url=inputs.scrub_url(fetch_url)
        )
        return intent, Download(fetcher, self.services.call_admission, fetch_url)

    @staticmethod
    def require_one_source(request: SaveRequest) -> None:
        """Exactly one of sourceUrl, artifactId, imageBase64 (``invalid_input``)."""
        sources = [
            name
            for name, value in (
                ("sourceUrl", request.source_url),
                ("artifactId", request.artifact_id),
                ("imageBase64", request.image_base64),
            )
            if value is not None
        ]
        if len(sources) != 1:
            given = ", ".join(sources) if sources else "none"
            raise InvalidInputFailure(
                f"give exactly one of sourceUrl, artifactId, imageBase64 (given: {given})"
            )

    async def owned_artifact(self, caller: Caller, artifact_id: str) -> ArtifactRecord | None:
        """The caller's own unexpired artifact ``artifact_id``, or ``None``.

        Read before any byte: another owner's artifact, an expired one and an unknown id are
        the same ``None`` (and the same ``not_found`` to the caller).
        """
        if not is_valid_id(artifact_id, "art"):
            return None
        async with self.services.database.unit_of_work() as uow:
            return await uow.artifacts.get_owned(caller.identity, artifact_id)

    # --- the flow ---------------------------------------------------------------------------

    async def save(
        self, caller: Caller, request: SaveRequest, progress: Progress = no_progress
    ) -> SaveResult:
        """Save one image for ``caller``; see the module docstring for the steps.

        ``progress`` hears of each step (fetching or reading, checking, storing, saved).
        """
        policy.require(self._settings)
        policy.require_writable(self.services.read_only)
        if self.services.embedder is None:
            raise FeatureDisabled("no embedder is configured on this server")
        with metrics.refusals():
            self.require_one_source(request)
            artifact = None
            if request.artifact_id is not None:
                artifact = await self.owned_artifact(caller, request.artifact_id)
            intent, source = await self.prepare(request, artifact)
            opened = await self._open(caller, intent, source)
        if isinstance(opened, SaveResult):
            metrics.count_save(intent.source_kind, "replayed")
            return opened
        return await self.save_from(opened, source, progress)

    async def _open(
        self, caller: Caller, intent: SaveIntent, source: ImageSource
    ) -> SaveOrder | SaveResult:
        """Authorise, resolve the target, and open the reservation, or replay the first save."""
        timeout = self._settings.asset_fetch_timeout_seconds
        deadline = anyio.current_time() + timeout + 60
        while True:
            # Statements of their own, no BEGIN and COMMIT: the opening is one statement (the
            # vault, the namespace, the reservation's insert or the earlier one's read), and
            # a project or folder is checked by reads before it. Under READ COMMITTED the
            # reads agreed no more inside a transaction; the commit checks the placement again
            # under its locks.
            async with self.services.database.single_statements() as uow:
                if intent.project_id is not None or intent.folder_id is not None:
                    # Refused placements reserve nothing.
                    await self.target(uow, caller, intent)
                ask = ReservationAsk(
                    operation=OPERATION,
                    noun="save request",
                    idempotency_key=intent.idempotency_key,
                    expected_bytes=(
                        self._settings.asset_max_bytes if source.size is None else source.size
                    ),
                    expires_at=datetime.now(UTC) + timedelta(seconds=timeout + 600),
                    vault=None,
                    identity={"fingerprint": intent.fingerprint},
                    requester=caller.identity,
                )
                opened = await open_in_vault(uow, caller, intent.vault, "write", ask)
                target = _target(opened, intent)
                reservation = opened.reservation
                if opened.created:
                    return SaveOrder(
                        caller.identity,
                        intent,
                        target,
                        reservation.id,
                        new_id("aob"),
                        key_id=caller.key_id,
                    )
                if reservation.status == "finalized" and reservation.asset_id is not None:
                    return await self.replay(uow, target, reservation.asset_id)
            # Another request with this key is in flight: wait for its outcome.
            if anyio.current_time() > deadline:
                raise ConflictFailure("a save with this idempotencyKey is still in progress")
            await anyio.sleep(_POLL_SECONDS)

    async def target(self, uow: UnitOfWork, caller: Caller, intent: SaveIntent) -> SaveTarget:
        """The writable vault scope, project and folder ``intent`` names, for ``caller``."""
        vault = await resolve_vault(uow, caller, intent.vault, "write")
        scope = vault.record.scope
        try:
            await check_placement(uow, scope, intent.project_id, intent.folder_id)
            usage = await uow.quota.usage(scope.owner_identity)
        except MemoryDbError as exc:
            raise translate(exc) from None
        # Logs name the owner by this opaque id, never by their identity.
        structlog.contextvars.bind_contextvars(namespace_id=usage.namespace_id)
        return SaveTarget(
            scope=scope,
            display_vault=vault.display_handle,
            namespace_id=usage.namespace_id,
            project_id=intent.project_id,
            folder_id=intent.folder_id,
            caller_is_owner=vault.record.permission == "owner",
        )

    async def replay(self, uow: UnitOfWork, target: SaveTarget, asset_id: str) -> SaveResult:
        """The current state of an asset an earlier request created."""
        asset = await uow.assets.get_for_owner(target.scope.owner_identity, asset_id)
        if asset is None or asset.status in ("deleting", "deleted"):
            raise ConflictFailure("idempotencyKey belongs to an asset that has been deleted")
        stored = await uow.objects.get(asset.owner_identity, asset.object_id)
        jobs = await uow.jobs.for_asset(asset.owner_identity, asset.id)
        job_ids = [job.id for job in jobs]
        deduplicated = bool(asset.metadata.get("deduplicated", False))
        return _result(target, asset, stored, job_ids, deduplicated=deduplicated, replayed=True)

    async def save_from(
        self, order: SaveOrder, source: ImageSource, progress: Progress = no_progress
    ) -> SaveResult:
        """Read ``source``, inspect the bytes, plan the save and run its steps.

        Whatever closes the reservation (the commit, or a release) ends with ``source.done()``.
        A failure releases the reservation, except one that is not about the bytes of a
        durable source: those stay, and so does the reservation, for a retry.
        """
        try:
            await progress(0, SAVE_STEPS, source.reading)
            data = await source.read()
            await progress(1, SAVE_STEPS, f"checking the image ({len(data)} bytes)")
            image = await inspect_image(
                data,
                max_pixels=self._settings.asset_max_decoded_pixels,
                preview_edge=self._settings.asset_preview_max_edge,
                admission=self.services.decode_admission,
            )
            source.accept(image)
            plan = plan_save(
                order,
                data,
                image,
                env_prefix=self._settings.asset_storage_env_prefix,
                vector_size=vector_bytes(self.services, 1),
            )
            await progress(2, SAVE_STEPS, "storing the image")
            result = await self.run(plan)
        except BaseException as exc:
            metrics.count_save_failure(order.intent.source_kind, exc)
            if source.durable and not isinstance(exc, _FINAL):
                raise
            with anyio.CancelScope(shield=True):
                await self.release(order)
                await source.done()
            raise
        with anyio.CancelScope(shield=True):
            await source.done()
        metrics.count_saved(
            order.intent.source_kind,
            deduplicated=result.deduplicated,
            original_bytes=len(data),
            preview_bytes=len(image.preview),
        )
        if order.key_id is not None:  # the key's save count (its Keys page row)
            self.services.key_activity.note(order.key_id, saves=1)
        await progress(SAVE_STEPS, SAVE_STEPS, "saved")
        return result

    async def run(self, plan: SavePlan) -> SaveResult:
        """Steps 3-5: reserve, store (create-only writes), commit; clean up after a failure."""
        how = await self.reserve(plan)
        written = await self.store(plan) if how == "store" else _Written()
        try:
            result, losers = await self.commit(plan, how, written)
        except ToolFailure:
            # Refused inside the transaction (e.g. the folder was deleted meanwhile): it rolled
            # back for certain, so nothing references these bytes. Delete them now.
            with anyio.CancelScope(shield=True):
                await self._discard(plan.owner, list(written.keys))
            raise
        except BaseException as exc:
            # The commit itself may or may not have happened: keep the bytes for the orphan
            # sweep, which deletes them only if no object row claims them after the window.
            with anyio.CancelScope(shield=True):
                reason = f"save commit failed: {type(exc).__name__}"
                await self._orphan(plan.owner, list(written.keys), reason)
            raise
        if losers:
            with anyio.CancelScope(shield=True):
                await self._discard(plan.owner, losers)
        return result

    # --- the steps --------------------------------------------------------------------------

    async def reserve(self, plan: SavePlan) -> Dedupe:
        """Step 3: decide how the object is got, and hold what the save adds to the quota.

        A save that repeats an earlier scraper save (``repeat``) holds nothing: it returns
        that asset (checked again under the namespace lock at commit).
        """
        owner, order = plan.owner, plan.order
        # A statement of its own (no BEGIN and COMMIT): the read that decides and the hold
        # (lock, quota check, bytes moved) together. Nothing more ties them: the commit
        # decides dedupe again under the namespace lock.
        async with self.services.database.single_statements() as uow:
            if await self._repeat_of(uow, plan) is not None:
                await reservations.hold(uow, owner, order.reservation_id, 0, caller=order.actor)
                return dedupe(live=False, recently_deleted=False, quarantined=None, repeated=True)
            shared = plan.charge(deduplicated=True)
            try:
                live, recent, quarantined = await uow.quota.reserve_for_copies(
                    owner,
                    order.reservation_id,
                    sha256=plan.image.sha256,
                    within=self._delete_grace,
                    new_bytes=plan.charge(deduplicated=False),
                    shared_bytes=shared,
                )
            except QuotaExceededError as exc:
                raise reservations.refused(exc, owner=owner, caller=order.actor) from None
            # The statement held for the same rule (plan.dedupe's), or nothing for a
            # quarantined copy, which dedupe refuses here.
            how = dedupe(live=live, recently_deleted=recent, quarantined=quarantined)
        return how

    async def store(self, plan: SavePlan) -> _Written:
        """Step 4: write the original and the preview with create-only puts."""
        store = self.services.store
        written: list[str] = []
        try:
            put = await store.put(
                plan.original_key,
                plan.data,
                content_type=plan.image.format.mime_type,
                checksum_sha256=plan.image.sha256,
            )
            written.append(plan.original_key)
            await store.put(
                plan.preview_key,
                plan.image.preview,
                content_type="image/webp",
                checksum_sha256=plan.preview_sha256,
            )
            written.append(plan.preview_key)
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                reason = f"upload failed: {type(exc).__name__}"
                await self._orphan(plan.owner, list(plan.new_keys), reason)
            if isinstance(exc, StorageUnavailable):
                # The endpoint is down or unreachable: the same save can be retried later.
                raise Unavailable(
                    "the object store is unavailable; retry in a few seconds"
                ) from None
            if isinstance(exc, MemoryDbError):
                raise ToolFailure("the object store could not take the image; try again") from None
            raise
        return _Written(tuple(written), put.etag, put.version_id)

    async def commit(
        self, plan: SavePlan, how: Dedupe, written: _Written
    ) -> tuple[SaveResult, list[str]]:
        """Step 5. Returns the result and keys to discard (a concurrent save won the object)."""
        order, image = plan.order, plan.image
        owner, target = plan.owner, order.target
        embedder = self.services.embedder
        if embedder is None:  # plans are only made with one; a half-built service has none
            raise Unavailable("this process has no embedder configured")
        kinds = self._job_kinds(plan)
        if (
            how == "store"
            and repeat_key(order.intent, image.sha256) is None
            and target.project_id is None
            and target.folder_id is None
        ):
            # New bytes, nothing to repeat, no placement to check: one statement
            # (memory_db.repositories.saves); anything else, or a concurrent save of the same
            # bytes, takes the transaction below.
            committed = await self._commit_new(plan, written, embedder, kinds)
            if committed is not None:
                return committed, []
        async with self.services.database.unit_of_work() as uow:
            # The namespace and the reservation, locked in one statement; what it holds is
            # turned into used bytes below without reading it again.
            held = await uow.quota.lock_reservation(owner, order.reservation_id)
            # Under the namespace lock: of two concurrent repeats of one scraper save, the
            # second sees the first's asset here (and discards any bytes it wrote).
            earlier = await self._repeat_of(uow, plan)
            if earlier is not None:
                return await self._repeated(uow, plan, earlier, held), list(written.keys)
            if how == "repeat":
                raise ConflictFailure(
                    "the image this save repeats was deleted meanwhile; save it again"
                )
            stored, losers = await self._object(uow, plan, how, written)
            deduplicated = stored.id != order.object_id
            try:
                # Again, locked: the project may have been archived or the folder deleted since
                # the first check; a concurrent archive or folder deletion waits for us or we
                # see its outcome.
                await check_placement(
                    uow, target.scope, target.project_id, target.folder_id, key_share=True
                )
            except MemoryDbError as exc:
                raise translate(exc) from None
            intent = order.intent
            asset = await uow.assets.create(
                target.scope,
                object_id=stored.id,
                project_id=target.project_id,
                folder_id=target.folder_id,
                title=plan.title,
                description=intent.description,
                alt_text=intent.alt_text,
                source_url=intent.source_url,
                source_url_hash=(source_url_hash(intent.source_url) if intent.source_url else None),
                source_kind=intent.source_kind,
                source_ref=intent.source_ref,
                tags=intent.tags,
                metadata=plan.metadata(deduplicated=deduplicated),
                created_by=order.actor,
                original_file_name=intent.file_name,
                saved_by_key_id=order.key_id,
                capture=self._capture(plan),
            )
            # Every job of the new asset in one statement.
            queued = await uow.jobs.create_many(
                owner,
                asset.id,
                representations=plan.representations,
                model=embedder.model,
                dimensions=embedder.dimensions,
                kinds=kinds,
            )
            jobs = [job for job in queued if job.kind == "embed"]
            used = plan.charge(deduplicated=deduplicated)
            reservation_id = order.reservation_id
            await uow.quota.finalize(
                owner, reservation_id, asset_id=asset.id, used_bytes=used, held=held
            )
            await uow.provenance.record(
                OPERATION,
                actor_identity=order.actor,
                owner_identity=owner,
                vault=target.scope.physical_vault,
                target_kind="asset",
                target_id=asset.id,
                detail=plan.provenance(deduplicated=deduplicated),
            )
            await uow.jobs.notify()
        log.info(
            "asset_saved",
            asset_id=asset.id,
            object_id=stored.id,
            bytes=image.bytes,
            deduplicated=deduplicated,
        )
        job_ids = [job.id for job in jobs]
        result = _result(target, asset, stored, job_ids, deduplicated=deduplicated, replayed=False)
        return result, losers

    def _capture(self, plan: SavePlan) -> dict[str, object]:
        """The capture columns of the new asset: its EXIF, without a location unless kept."""
        return kept_capture(plan.image.capture, self._settings).columns()

    def _job_kinds(self, plan: SavePlan) -> list[tuple[str, str]]:
        """The asset's jobs besides its embeddings: OCR and a description, when wanted."""
        intent, image = plan.order.intent, plan.image
        kinds: list[tuple[str, str]] = []
        if ocr_wanted(
            self._settings.asset_ocr,
            source_kind=intent.source_kind,
            format_name=image.format.name,
            data=plan.data,
        ):
            kinds.append(("ocr", OCR_ENGINE))
        describer = self.services.describer
        if describer is not None:  # generated context is on (docs/generated-context.md)
            kinds.append(("describe", describer.model))
        return kinds

    async def _commit_new(
        self,
        plan: SavePlan,
        written: _Written,
        embedder: Embedder,
        kinds: list[tuple[str, str]],
    ) -> SaveResult | None:
        """Step 5 for new bytes, in one statement; ``None`` if it wrote nothing.

        Nothing is written when the reservation is no longer active or a concurrent save
        committed the same bytes first: the transaction of :meth:`commit` then says which,
        or shares that save's object.
        """
        order, image, intent = plan.order, plan.image, plan.order.intent
        target, owner = order.target, plan.owner
        asset_id = new_id("ast")
        new = NewImage(
            owner=owner,
            reservation_id=order.reservation_id,
            object_values={
                "id": order.object_id,
                "owner_identity": owner,
                "namespace_id": target.namespace_id,
                "sha256": image.sha256,
                "storage_key": plan.original_key,
                "preview_storage_key": plan.preview_key,
                "preview_sha256": plan.preview_sha256,
                "mime_type": image.format.mime_type,
                "extension": image.format.extension,
                "bytes": image.bytes,
                "preview_bytes": len(image.preview),
                "width": image.width,
                "height": image.height,
                "etag": written.etag,
                "version_id": written.version_id,
                "status": "available",
            },
            asset_values={
                "id": asset_id,
                "owner_identity": owner,
                "vault": target.scope.physical_vault,
                "project_id": None,
                "folder_id": None,
                "object_id": order.object_id,
                "title": plan.title,
                "description": intent.description,
                "alt_text": intent.alt_text,
                "source_url": intent.source_url,
                "source_url_hash": (
                    source_url_hash(intent.source_url) if intent.source_url else None
                ),
                "source_kind": intent.source_kind,
                "source_ref": intent.source_ref,
                "tags": intent.tags,
                "metadata": plan.metadata(deduplicated=False),
                "status": "processing",
                "embedding_status": "pending",
                "created_by": order.actor,
                "updated_by": order.actor,
                "original_file_name": intent.file_name,
                "saved_by_key_id": order.key_id,
                **self._capture(plan),
            },
            jobs=[
                *(("embed", r, embedder.model, embedder.dimensions) for r in plan.representations),
                *((kind, None, model, None) for kind, model in kinds),
            ],
            used_bytes=plan.charge(deduplicated=False),
            provenance_operation=OPERATION,
            provenance_actor=order.actor,
            provenance_detail=plan.provenance(deduplicated=False),
        )
        async with self.services.database.single_statements() as uow:
            job_ids = await uow.saves.commit_new_image(new)
        if job_ids is None:
            return None
        log.info(
            "asset_saved",
            asset_id=asset_id,
            object_id=order.object_id,
            bytes=image.bytes,
            deduplicated=False,
        )
        return SaveResult(
            asset_id=asset_id,
            object_id=order.object_id,
            vault=target.display_vault,
            status="processing",
            embedding_status="pending",
            deduplicated=False,
            replayed=False,
            job_ids=job_ids[: len(plan.representations)],
            width=image.width,
            height=image.height,
            mime_type=image.format.mime_type,
            bytes=image.bytes,
        )

    async def _repeat_of(self, uow: UnitOfWork, plan: SavePlan) -> AssetRecord | None:
        """The live asset an earlier save of this scraper source made in the target vault."""
        key = repeat_key(plan.order.intent, plan.image.sha256)
        if key is None:
            return None
        return await uow.assets.find_repeat(
            plan.order.target.scope,
            source_url_hash=key.source_url_hash,
            sha256=key.sha256,
            artifact_id=key.artifact_id,
            source_kinds=SCRAPER_SOURCE_KINDS,
        )

    async def _repeated(
        self, uow: UnitOfWork, plan: SavePlan, earlier: AssetRecord, held: int
    ) -> SaveResult:
        """Close the order on the asset ``earlier`` (nothing stored or charged); its answer.

        The reservation is finalized on that asset with no bytes used, so a replay of the
        same ``idempotencyKey`` returns it too; the repeat is recorded as ``asset_save``
        provenance of that asset. The asset is returned as it is: the repeated request's
        placement, tags and words are not applied.
        """
        order, owner = plan.order, plan.owner
        stored = await uow.objects.get(owner, earlier.object_id)
        # Its newest embedding job per representation, as a save answers (oldest first).
        newest = {
            job.representation: job.id
            for job in await uow.jobs.for_asset(owner, earlier.id)
            if job.kind == "embed" and job.representation is not None
        }
        await uow.quota.finalize(
            owner, order.reservation_id, asset_id=earlier.id, used_bytes=0, held=held
        )
        await uow.provenance.record(
            OPERATION,
            actor_identity=order.actor,
            owner_identity=owner,
            vault=order.target.scope.physical_vault,
            target_kind="asset",
            target_id=earlier.id,
            detail={
                "sourceKind": order.intent.source_kind,
                "bytes": plan.image.bytes,
                "deduplicated": True,
                "repeated": True,
                "representations": [],
            },
        )
        log.info("asset_save_repeated", asset_id=earlier.id, object_id=stored.id)
        return _result(
            order.target,
            earlier,
            stored,
            [newest[rep] for rep in sorted(newest, reverse=True)],  # visual, fused: as a save
            deduplicated=True,
            replayed=False,
            repeated=True,
        )

    async def release(self, order: SaveOrder) -> None:
        """Give the order's reserved bytes back (it runs also when no bytes came, so no plan)."""
        await reservations.release(self.services.database, order.owner, order.reservation_id)

    async def _object(
        self, uow: UnitOfWork, plan: SavePlan, how: Dedupe, written: _Written
    ) -> tuple[ObjectRecord, list[str]]:
        """The object the asset uses, and keys to discard (a concurrent save won the object)."""
        if how != "store":
            return await self._reuse(uow, plan), []
        image = plan.image
        try:
            stored = await uow.objects.create(
                object_id=plan.order.object_id,
                owner=plan.owner,
                namespace_id=plan.order.target.namespace_id,
                sha256=image.sha256,
                storage_key=plan.original_key,
                preview_storage_key=plan.preview_key,
                preview_sha256=plan.preview_sha256,
                mime_type=image.format.mime_type,
                extension=image.format.extension,
                nbytes=image.bytes,
                preview_bytes=len(image.preview),
                width=image.width,
                height=image.height,
                etag=written.etag,
                version_id=written.version_id,
            )
        except DuplicateObject:
            # A concurrent save of the same bytes committed first: share its object.
            stored = await uow.objects.find_reusable(plan.owner, image.sha256)
            if stored is None:
                raise ConflictFailure("a concurrent save is storing this image; retry") from None
            return stored, list(plan.new_keys)
        return stored, []

    async def _reuse(self, uow: UnitOfWork, plan: SavePlan) -> ObjectRecord:
        """The owner's stored copy the reserve step found, under the namespace lock."""
        owner, sha256 = plan.owner, plan.image.sha256
        stored = await uow.objects.find_reusable(owner, sha256)
        if stored is not None:
            return stored
        # A copy a delete left within its grace window is taken back into use (its deleted
        # assets stay restorable and share it); one purged meanwhile is gone.
        recent = await uow.objects.find_recently_deleted(owner, sha256, within=self._delete_grace)
        if recent is None or not await uow.objects.take_back(owner, recent.id):
            raise ConflictFailure("the stored copy of this image changed meanwhile; retry")
        return recent

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
