"""Plain, immutable records returned by repositories (no ORM objects leak out of a session)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, NamedTuple

# The failure codes reconciliation gives the images of an object whose bytes are gone or
# changed; only these does it lift again once the bytes are back and match.
INTEGRITY_CODES = ("object_missing", "object_corrupt")

# Why an object is quarantined: reconciliation found its stored bytes missing or changed
# (``integrity``), or the embedding provider could not read them (``unreadable``).
QuarantineReason = Literal["integrity", "unreadable"]


class TextMatch(NamedTuple):
    """One asset of the full-text list: its text rank and whether it holds every query word."""

    asset_id: str
    rank: float
    every_word: bool


@dataclass(frozen=True, slots=True)
class VaultScope:
    """The resolved access every scoped repository method requires: whose data, which vault."""

    owner_identity: str
    physical_vault: str


@dataclass(frozen=True, slots=True)
class IdentityRecord:
    """An owner identity and its plan."""

    owner_identity: str
    quota_bytes: int
    namespace_id: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class ApiKeyRecord:
    """An API key without its secret."""

    id: str
    owner_identity: str
    label: str | None
    scopes: tuple[str, ...]
    created_at: datetime
    revoked_at: datetime | None
    last_used_at: datetime | None
    note: str | None = None
    paused_at: datetime | None = None
    calls: int = 0  # calls, searches and saves made with it (written at most once a minute)
    searches: int = 0
    saves: int = 0

    @property
    def state(self) -> str:
        """``active``, ``paused`` or ``revoked`` (revoked wins: it is for good)."""
        if self.revoked_at is not None:
            return "revoked"
        return "active" if self.paused_at is None else "paused"


@dataclass(frozen=True, slots=True)
class VaultRecord:
    """A vault as seen by one identity: owned, or shared through a grant."""

    id: str
    owner_identity: str
    handle: str
    physical_vault: str
    permission: str  # "owner" for the owner; the grant's permission otherwise
    created_at: datetime

    @property
    def scope(self) -> VaultScope:
        """The scope repositories take for this vault."""
        return VaultScope(self.owner_identity, self.physical_vault)

    @property
    def is_owner(self) -> bool:
        """Whether the viewing identity owns this vault."""
        return self.permission == "owner"


@dataclass(frozen=True, slots=True)
class GrantRecord:
    """A grant of a vault to another identity."""

    id: str
    owner_identity: str
    physical_vault: str
    grantee_identity: str
    permission: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class ProjectRecord:
    """A project in one vault."""

    id: str
    owner_identity: str
    vault: str
    name: str
    description: str | None
    status: str
    created_by: str
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class FolderRecord:
    """A folder in a project."""

    id: str
    owner_identity: str
    vault: str
    project_id: str
    parent_id: str | None
    name: str
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class NamespaceUsage:
    """An owner's byte counters and plan quota (docs/design.md#namespace)."""

    owner_identity: str
    namespace_id: str
    used_bytes: int
    reserved_bytes: int
    quota_bytes: int


@dataclass(frozen=True, slots=True)
class ReservationRecord:
    """An upload reservation (docs/design.md#reservations)."""

    id: str
    owner_identity: str
    operation: str
    idempotency_key: str | None
    expected_bytes: int
    reserved_bytes: int
    status: str
    asset_id: str | None
    vault: str | None
    object_id: str | None
    request: dict[str, Any]
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class ObjectRecord:
    """Immutable stored bytes of one owner (docs/design.md#objects)."""

    id: str
    owner_identity: str
    namespace_id: str
    sha256: str
    storage_key: str
    preview_storage_key: str | None
    mime_type: str
    extension: str
    bytes: int
    preview_bytes: int | None
    width: int
    height: int
    status: str
    created_at: datetime
    preview_sha256: str | None = None  # None: stored before previews were hashed (rev. 0007)


@dataclass(frozen=True, slots=True)
class AssetRecord:
    """The governed record of one image (docs/design.md#assets)."""

    id: str
    owner_identity: str
    vault: str
    project_id: str | None
    folder_id: str | None
    object_id: str
    title: str
    description: str | None
    alt_text: str | None
    source_url: str | None
    source_kind: str
    source_ref: dict[str, Any]
    tags: list[str]
    metadata: dict[str, Any]
    status: str
    embedding_status: str
    failure_code: str | None
    failure_message: str | None
    created_by: str
    created_at: datetime
    updated_at: datetime
    # The whitelisted words of its current generated context (docs/generated-context.md).
    generated_text: str | None = None
    # The text read in the image (docs/ocr.md) and how it was read; None until read.
    ocr_text: str | None = None
    ocr: dict[str, Any] | None = None
    # The base name of the file the bytes were uploaded as; None when none was given.
    original_file_name: str | None = None
    # The key whose call saved it (``savedBy``); None when unknown (older assets, deleted key).
    saved_by_key_id: str | None = None
    # When, with what and where it was taken (its EXIF; docs/design.md#capture).
    taken_at: datetime | None = None
    taken_offset_minutes: int | None = None
    camera_make: str | None = None
    camera_model: str | None = None
    orientation: int | None = None
    latitude: float | None = None
    longitude: float | None = None


@dataclass(frozen=True, slots=True)
class ContextRecord:
    """The generated context of one asset, with whether it still describes the asset's bytes."""

    asset_id: str
    owner_identity: str
    object_id: str
    source_sha256: str
    model: str
    context: dict[str, Any]
    generated_at: datetime
    job_id: str | None
    review: str
    reviewed_by: str | None
    reviewed_at: datetime | None
    # False once the asset's current rendition is not the one it was generated from.
    current: bool


@dataclass(frozen=True, slots=True)
class OcrState:
    """An asset's newest OCR job and the text on the asset, as one statement read them both.

    The job's completion and the text are written in one transaction; read in one statement,
    a ``done`` job always comes with the text (or the recorded absence of text) it wrote.
    """

    status: str  # of the newest OCR job
    last_error_code: str | None
    text: str | None  # None: no text read (yet, or in the image)
    reading: dict[str, Any] | None  # how the last reading was made (engine, time...)


@dataclass(frozen=True, slots=True)
class AssetSettled:
    """An asset that an embedding outcome just moved into ``ready`` or ``failed``."""

    asset_id: str
    status: str
    source_kind: str


@dataclass(frozen=True, slots=True)
class JobRecord:
    """A durable job (docs/design.md#jobs): an embedding (``kind="embed"``) or another kind.

    ``representation`` and ``dimensions`` are set exactly for embeddings; ``model`` names the
    embedding model, or the engine or model of another kind.
    """

    id: str
    asset_id: str
    owner_identity: str
    kind: str
    representation: str | None
    model: str
    dimensions: int | None
    status: str
    attempts: int
    max_attempts: int
    run_after: datetime
    lease_owner: str | None
    lease_until: datetime | None
    last_error_code: str | None
    last_error: str | None
    usage: dict[str, Any]
    created_at: datetime
    completed_at: datetime | None
    # Set by every change of the job but a heartbeat: when a running job was claimed, when a
    # retrying one last failed.
    updated_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class StoredAsset:
    """An asset with what its object says about the bytes."""

    asset: AssetRecord
    mime_type: str
    width: int
    height: int
    bytes: int
    preview_storage_key: str | None
    object_status: str
    preview_sha256: str | None = None  # None: stored before previews were hashed (rev. 0007)
    storage_key: str | None = None  # the original's key
    # The label of the key that saved it (``asset.saved_by_key_id``); read by
    # ``AssetRepository.get_visible`` only (None elsewhere, and for a key without a label).
    saved_by_label: str | None = None


@dataclass(frozen=True, slots=True)
class TrashedAsset:
    """A deleted asset that may still be restored, with when it was deleted."""

    stored: StoredAsset
    deleted_at: datetime


@dataclass(frozen=True, slots=True)
class ArtifactRecord:
    """A scraper artifact: validated image bytes one owner holds until ``expires_at``."""

    id: str
    owner_identity: str
    namespace_id: str
    storage_key: str
    sha256: str
    mime_type: str
    bytes: int
    width: int
    height: int
    source_kind: str  # "scrape" or "screenshot"
    source_ref: dict[str, Any]
    created_at: datetime
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class ArtifactUsage:
    """An owner's live (unexpired) artifacts: how many, and their bytes."""

    count: int
    bytes: int


@dataclass(frozen=True, slots=True)
class WorkItem:
    """One row of the server's work queue as the operator sees it (docs/design.md#jobs).

    ``kind`` is ``embedding``, ``ocr`` or ``describe`` (a job of that kind), ``purge`` (an
    object whose bytes wait for, or had, their purge) or ``reconcile`` (a finished pass of the
    store reconciliation). ``sort_at`` is what
    the list orders by: a job's creation, the time an object entered or left ``deleting``, a
    pass's start.
    """

    kind: str
    id: str
    status: str
    sort_at: datetime
    owner_identity: str | None
    subject_id: str | None  # the asset of a job, the object of a purge
    representation: str | None
    attempts: int
    max_attempts: int
    due_at: datetime | None  # when a queued item may run next
    lease_owner: str | None
    lease_until: datetime | None
    error_code: str | None
    error: str | None
    finished_at: datetime | None
    bytes: int | None  # purged or to purge; removed by a reconciliation pass


@dataclass(frozen=True, slots=True)
class ReconcileRunRecord:
    """A finished pass of the store reconciliation and what it found."""

    id: str
    actor_identity: str
    status: str
    namespaces: int
    listed: int
    removed: int
    removed_bytes: int
    waiting: int
    foreign_keys: int
    error_code: str | None
    error: str | None
    started_at: datetime
    finished_at: datetime


@dataclass(frozen=True, slots=True)
class ProvenanceRecord:
    """One provenance event (who did what to which target, and how it ended)."""

    id: str
    operation: str
    actor_identity: str
    owner_identity: str | None
    target_kind: str | None
    target_id: str | None
    outcome: str
    detail: dict[str, Any]
    created_at: datetime
