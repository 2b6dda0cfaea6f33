"""The save plan (docs/design.md#saving): what one save stores, where, and what it charges.

Every source of bytes (an inline base64 image, a downloaded URL, a staged direct upload) ends
in the same plan, and the saver's steps (reserve, store, commit, release) each take it. This
module decides and never does I/O: no database, object store or network, so every decision
here is unit-tested on its own (``tests/unit/test_save_plan.py`` of this package).

- :class:`SaveIntent`: what the caller asked for, validated (everything but the bytes);
- :class:`SaveOrder`: an intent with its target and its open reservation;
- :class:`SavePlan`: an order with its inspected bytes, object keys, text and representations;
- :func:`dedupe`: whether the save repeats an earlier scraper save (its asset is returned), or
  the owner's stored copy is shared, taken back, or new bytes stored;
- :func:`repeat_key`: what makes a scraper save the same as an earlier one;
- :func:`ocr_wanted`: whether a new save gets an OCR job (``ASSET_OCR``), which the jobs run.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Literal

from memory_db import AssetRecord, VaultScope
from memory_db.repositories.records import QuarantineReason
from memory_db.storage import build_object_key
from memory_tools.errors import ConflictFailure, InvalidImage
from memory_tools.ingest.images import InspectedImage

SourceKind = Literal["external_url", "upload", "scrape", "screenshot"]
# How a save gets its object: store new bytes, share the owner's live copy of the same
# SHA-256, or take back a copy a delete left inside its grace window; or none at all: the save
# repeats an earlier scraper save, whose asset it returns (``repeat``).
Dedupe = Literal["store", "share", "take_back", "repeat"]
# Saves made by the scraper tools: an artifact (scrape_image_download, scrape_page_screenshot)
# or a page's image (scrape_page_images with save). Repeating one returns the first's asset.
SCRAPER_SOURCE_KINDS: tuple[SourceKind, ...] = ("scrape", "screenshot")

# Characters of the text read in an image that join its fused text (after a person's words).
MAX_FUSED_OCR_CHARS = 1000
# The engine an OCR job is queued under (the worker reads with it: memory_tools.jobs.ocr).
OCR_ENGINE = "tesseract"
NO_FUSED_TEXT = "skipped: no caller title, alt text, description or page title"


@dataclass(frozen=True)
class SaveTarget:
    """Where a save goes: the vault scope, its handle as the caller named it, the namespace."""

    scope: VaultScope
    display_vault: str
    namespace_id: str
    project_id: str | None
    folder_id: str | None
    # The caller owns the vault. Bytes are shared across all of an owner's vaults, so a save
    # tells a grantee nothing of them: "deduplicated" would say what the owner stores elsewhere.
    caller_is_owner: bool = True


@dataclass(frozen=True)
class SaveIntent:
    """What a caller asked to save, validated and normalised: everything but the bytes."""

    vault: str
    project_id: str | None
    folder_id: str | None
    source_kind: SourceKind
    source_url: str | None  # as stored: scrubbed of credentials
    title: str | None
    title_source: Literal["caller", "derived"]
    description: str | None
    alt_text: str | None
    tags: list[str]
    source_ref: dict[str, Any]
    idempotency_key: str | None
    fingerprint: str  # what makes two requests under one idempotency key the same request
    artifact_id: str | None = None  # the scraper artifact the bytes come from
    file_name: str | None = None  # the uploaded file's base name, cleaned (inputs.file_name)


@dataclass(frozen=True)
class SaveOrder:
    """A save that holds its reservation: who saves what, where; only the bytes are missing."""

    actor: str  # the caller's identity (a shared writer saves into the owner's vault)
    intent: SaveIntent
    target: SaveTarget
    reservation_id: str
    object_id: str  # the id new bytes are stored under
    key_id: str | None = None  # the key the caller called with (the asset's ``savedBy``)

    @property
    def owner(self) -> str:
        """Whose namespace, quota and objects the save uses."""
        return self.target.scope.owner_identity


@dataclass(frozen=True)
class SavePlan:
    """One save, decided: the bytes, the object keys, the text and the vectors it adds."""

    order: SaveOrder
    data: bytes
    image: InspectedImage
    original_key: str
    preview_key: str
    preview_sha256: str
    title: str
    text: str | None  # the fused representation's text; ``None``: no fused vector
    representations: tuple[str, ...]
    vector_bytes: int

    @property
    def owner(self) -> str:
        """Whose namespace, quota and objects the save uses."""
        return self.order.owner

    @property
    def new_keys(self) -> tuple[str, str]:
        """The object keys new bytes are written to (the original, then the preview)."""
        return (self.original_key, self.preview_key)

    def charge(self, *, deduplicated: bool) -> int:
        """Bytes counted against the quota: the vectors, plus the bytes unless shared."""
        stored = 0 if deduplicated else self.image.bytes + len(self.image.preview)
        return self.vector_bytes + stored

    def metadata(self, *, deduplicated: bool) -> dict[str, Any]:
        """The asset's metadata: the image's facts and how the save went."""
        image = self.image
        metadata: dict[str, Any] = {
            "image": {
                "format": image.format.name,
                "pages": image.pages,
                "orientation": image.orientation,
                "previewWidth": image.preview_width,
                "previewHeight": image.preview_height,
            },
            "titleSource": self.order.intent.title_source,
            "deduplicated": deduplicated,
            "vectorBytes": self.vector_bytes,
            "embedding": {"fused": "queued" if self.text else NO_FUSED_TEXT},
        }
        if self.order.intent.artifact_id is not None:
            # Which artifact it was saved from: saving that artifact again returns this asset.
            metadata["artifactId"] = self.order.intent.artifact_id
        return metadata

    def provenance(self, *, deduplicated: bool) -> dict[str, Any]:
        """The detail of the save's provenance record (no text, no keys)."""
        return {
            "sourceKind": self.order.intent.source_kind,
            "bytes": self.image.bytes,
            "deduplicated": deduplicated,
            "representations": list(self.representations),
        }


def fused_text(
    *,
    title: str | None,
    title_source: str,
    alt_text: str | None,
    description: str | None,
    source_ref: dict[str, Any],
    ocr_text: str | None = None,
    generated: str | None = None,
) -> str | None:
    """The whitelisted text of a fused representation, or ``None`` when there is none.

    Only a caller-given title, alt text, description and a page title count, then the text
    read in the image (docs/ocr.md), last and cut to :data:`MAX_FUSED_OCR_CHARS`; never a file
    name, a path or a URL (docs/design.md#representations). ``generated``: the whitelisted
    words of the asset's generated context (caption, visible text, subjects), used only when
    the caller and the page gave no words: the caller's own words always win
    (docs/generated-context.md).
    """
    parts: list[str] = []
    if title and title_source == "caller":
        parts.append(title)
    for value in (alt_text, description, source_ref.get("pageTitle")):
        if isinstance(value, str) and value.strip() and value not in parts:
            parts.append(value.strip())
    if not parts and generated and generated.strip():
        parts.append(generated.strip())
    if ocr_text and ocr_text.strip():
        read = " ".join(ocr_text.split())
        if len(read) > MAX_FUSED_OCR_CHARS:
            cut = read.rfind(" ", 0, MAX_FUSED_OCR_CHARS + 1)
            read = read[: cut if cut > 0 else MAX_FUSED_OCR_CHARS]
        parts.append(read)
    return "\n".join(parts) if parts else None


def asset_fused_text(asset: AssetRecord) -> str | None:
    """The fused text of a stored asset: its own words (else generated ones), then OCR text."""
    return fused_text(
        title=asset.title,
        title_source=str(asset.metadata.get("titleSource", "derived")),
        alt_text=asset.alt_text,
        description=asset.description,
        source_ref=asset.source_ref,
        ocr_text=asset.ocr_text,
        generated=asset.generated_text,
    )


def plan_save(
    order: SaveOrder, data: bytes, image: InspectedImage, *, env_prefix: str, vector_size: int
) -> SavePlan:
    """The plan for saving ``data`` (inspected as ``image``) as ``order`` asks.

    ``env_prefix``: the storage environment prefix of object keys; ``vector_size``: the bytes
    one stored vector takes (counted against the quota).
    """
    intent = order.intent
    text = fused_text(
        title=intent.title,
        title_source=intent.title_source,
        alt_text=intent.alt_text,
        description=intent.description,
        source_ref=intent.source_ref,
    )
    representations = ("visual", "fused") if text else ("visual",)
    namespace = order.target.namespace_id
    return SavePlan(
        order=order,
        data=data,
        image=image,
        original_key=build_object_key(
            env_prefix, namespace, order.object_id, "original", image.format.extension
        ),
        preview_key=build_object_key(env_prefix, namespace, order.object_id, "preview"),
        preview_sha256=hashlib.sha256(image.preview).hexdigest(),
        title=intent.title or f"Image {image.format.name.upper()} {image.width}x{image.height}",
        text=text,
        representations=representations,
        vector_bytes=len(representations) * vector_size,
    )


def source_url_hash(url: str) -> str:
    """The SHA-256 (hex) of a source URL as the asset records it (``source_url_hash``)."""
    return hashlib.sha256(url.encode()).hexdigest()


@dataclass(frozen=True)
class RepeatKey:
    """What makes a scraper save the same as an earlier one in the same vault.

    The same source URL and either the same bytes or the same artifact (docs/tools.md,
    "Saving the same image again").
    """

    source_url_hash: str
    sha256: str
    artifact_id: str | None


def repeat_key(intent: SaveIntent, sha256: str) -> RepeatKey | None:
    """The key a scraper save is repeated under; ``None`` for saves that are never repeats.

    Only the scraper's saves (source kinds ``scrape`` and ``screenshot``) with a source URL:
    an upload or a URL a caller names is a new asset each time (``idempotencyKey`` makes
    those repeatable).
    """
    if intent.source_kind not in SCRAPER_SOURCE_KINDS or intent.source_url is None:
        return None
    return RepeatKey(source_url_hash(intent.source_url), sha256, intent.artifact_id)


def dedupe(
    *,
    live: bool,
    recently_deleted: bool,
    quarantined: QuarantineReason | None,
    repeated: bool = False,
) -> Dedupe:
    """How a save gets its object, from what the owner already stores under its SHA-256.

    ``repeated``: the vault holds the asset an earlier save of the same scraper source made
    (:func:`repeat_key`); the save returns it and stores nothing (``repeat``).

    ``live``: a stored copy in use; ``recently_deleted``: a copy a delete left inside its
    grace window (its bytes are still stored and counted, so it is taken back rather than
    stored and charged again); ``quarantined``: why the owner's copy is out of use, which
    refuses the bytes unless a usable copy exists. ``unreadable``: the embedding provider could
    not read these exact bytes before (``invalid_image``); ``integrity``: the stored copy went
    missing or changed and waits for an operator's repair (``conflict``: the bytes themselves
    are fine, and saving them works again once reconciliation sees the copy restored).
    """
    if repeated:
        return "repeat"
    if live:
        return "share"
    if recently_deleted:
        return "take_back"
    if quarantined == "unreadable":
        raise InvalidImage(
            "these exact bytes are quarantined: the embedding provider could not read them before"
        )
    if quarantined == "integrity":
        raise ConflictFailure(
            "an earlier image of these exact bytes is failed because its stored copy is "
            "missing or damaged; saving these bytes works again once an operator restores "
            "that copy from a backup"
        )
    return "store"


def ocr_wanted(setting: str, *, source_kind: str, format_name: str, data: bytes) -> bool:
    """Whether a new save gets an OCR job under ``ASSET_OCR`` (``setting``).

    ``screenshots``: images saved from a page screenshot, and lossless PNG or WebP files (what
    screen captures, charts and diagrams are saved as); photos (JPEG, HEIC, lossy WebP...) are
    skipped, since they rarely hold text worth the CPU.
    """
    if setting == "all":
        return True
    if setting != "screenshots":
        return False
    if source_kind == "screenshot" or format_name == "png":
        return True
    return format_name == "webp" and _lossless_webp(data)


def _lossless_webp(data: bytes) -> bool:
    # A lossless WebP's image chunk is VP8L (right after the header, or after VP8X's chunks).
    return b"VP8L" in data[12:4096]
