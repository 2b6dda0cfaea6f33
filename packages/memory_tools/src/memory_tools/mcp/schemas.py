"""Public output shapes of the memory tools: camelCase on the wire, strict."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

# Extended ISO 8601 as RFC 3339 writes it: a date, a time (seconds and fraction optional) and a
# zone. Nothing looser: a bare "0" or 1700000000 would otherwise be read as a Unix time.
_INSTANT = re.compile(
    r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(?P<zone>Z|[+-]\d{2}(:?\d{2})?)?"
)
_INSTANT_EXAMPLE = "e.g. 2026-11-30T12:00:00Z or 2026-11-30T13:00:00+01:00"


def iso_instant(value: object) -> object:
    """An instant from an ISO 8601 string with a date, a time and a zone; nothing else.

    ``None`` and ``datetime`` (Python callers) pass through; numbers, dates alone, times
    without a zone and other strings are refused with a message that says what to send.
    """
    if value is None or isinstance(value, datetime):
        return value
    if not isinstance(value, str):
        raise PydanticCustomError(
            "iso_instant_type",
            "give an ISO 8601 string with a date, a time and a zone "
            f"({_INSTANT_EXAMPLE}); numbers are not read as Unix times",
        )
    match = _INSTANT.fullmatch(value.strip())
    if match is not None and match["zone"] is None:
        raise PydanticCustomError("iso_instant_zone", f"give a time zone ({_INSTANT_EXAMPLE})")
    try:
        if match is None:
            raise ValueError(value)
        return datetime.fromisoformat(value.strip())
    except ValueError:
        raise PydanticCustomError(
            "iso_instant",
            f"not an ISO 8601 instant: give a date, a time and a zone ({_INSTANT_EXAMPLE})",
        ) from None


CreatedAfterParam = Annotated[
    datetime | None,
    BeforeValidator(iso_instant),
    Field(
        description="Created at or after this instant (inclusive). ISO 8601 with a date, a time "
        "and a zone, e.g. 2026-11-30T12:00:00Z or 2026-11-30T13:00:00+01:00; a value without "
        "a zone is refused."
    ),
]
CreatedBeforeParam = Annotated[
    datetime | None,
    BeforeValidator(iso_instant),
    Field(
        description="Created before this instant (exclusive). ISO 8601 with a date, a time and "
        "a zone, e.g. 2026-12-01T00:00:00Z; a value without a zone is refused."
    ),
]


class WireModel(BaseModel):
    """camelCase aliases, both spellings accepted in Python, unknown fields rejected."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        serialize_by_alias=True,
        extra="forbid",
        frozen=True,
    )


class ProjectOut(WireModel):
    """A project."""

    project_id: str = Field(description="Opaque project id (apr_...).")
    vault: str = Field(description="The vault handle as the caller names it.")
    name: str
    description: str | None
    status: str = Field(description="active or archived.")
    created_at: datetime
    updated_at: datetime


class ProjectListOut(WireModel):
    """Projects visible to the caller."""

    projects: list[ProjectOut]


class FolderOut(WireModel):
    """A folder with its presentation path."""

    folder_id: str = Field(description="Opaque folder id (afl_...).")
    project_id: str
    parent_id: str | None = Field(description="Parent folder id; null at the project root.")
    vault: str
    name: str
    path: str = Field(description="Presentation path such as /Trips/2026 (never a storage key).")
    depth: int = Field(description="1 for a folder at the project root, at most 8.")
    created_at: datetime


class FolderTreeOut(WireModel):
    """A project's folder tree, depth-first with siblings by name."""

    vault: str
    project_id: str
    folders: list[FolderOut]


class SaveOut(WireModel):
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


class PreviewOut(WireModel):
    """A short-lived link to the sanitised WebP preview (never stored; ask again when expired)."""

    url: str | None = Field(description="The signed link; null when unavailable says why.")
    expires_at: datetime | None
    unavailable: str | None = Field(
        default=None,
        description="Why no link can be given (e.g. a stdio server with nothing serving its "
        "links); null when url is set.",
    )


class RepresentationOut(WireModel):
    """The embedding state of one representation."""

    representation: str = Field(description="visual or fused.")
    status: str = Field(description="queued, running, retry, done, failed or cancelled.")
    attempts: int
    model: str
    last_error_code: str | None
    completed_at: datetime | None


class AssetOut(WireModel):
    """An asset with its embedding state."""

    asset_id: str
    vault: str
    project_id: str | None
    folder_id: str | None
    title: str
    description: str | None
    alt_text: str | None
    tags: list[str]
    source_url: str | None
    source_kind: str
    source_ref: dict[str, str | int | float | bool | None]
    status: str = Field(description="processing, ready or failed.")
    embedding_status: str = Field(description="pending, running, ready, partial or failed.")
    failure_code: str | None
    failure_message: str | None
    mime_type: str
    width: int
    height: int
    bytes: int
    created_at: datetime
    updated_at: datetime
    representations: list[RepresentationOut]
    fused_note: str | None = Field(description="Why no fused vector was made, if none was.")
    preview: PreviewOut | None


class AssetSummaryOut(WireModel):
    """One listed asset: compact metadata, never image bytes."""

    asset_id: str
    vault: str
    project_id: str | None
    folder_id: str | None
    title: str
    tags: list[str]
    source_kind: str
    source_url: str | None
    status: str
    embedding_status: str
    mime_type: str
    width: int
    height: int
    bytes: int
    created_at: datetime


class AssetListOut(WireModel):
    """One page of assets."""

    items: list[AssetSummaryOut]
    next_cursor: str | None = Field(
        description="Pass as cursor for the next page; null at the end."
    )


class SearchResultOut(WireModel):
    """One search result, best first."""

    asset_id: str
    vault: str
    title: str
    mime_type: str
    width: int
    height: int
    project_id: str | None
    folder_id: str | None
    source_url: str | None
    tags: list[str]
    created_at: datetime
    score: float = Field(description="Best cosine similarity of the asset's vectors to the query.")
    match_representations: list[str] = Field(
        description="Which lists found it: visual, fused (vectors) and metadata (words)."
    )
    embedding_model: str
    preview: PreviewOut | None


class SearchOut(WireModel):
    """Search results with evidence, best first (at most the requested limit, maybe none)."""

    mode: str = Field(description="text, image or fused: how the query was embedded.")
    results: list[SearchResultOut] = Field(
        description="Only results with evidence (a word match, or a similarity above the "
        "embedder's evidence floor); never padded up to limit."
    )
    no_good_match: bool = Field(
        description="True when no result matched by words or reached goodMatchScore: treat the "
        "results as weak, or as nothing found when there are none."
    )
    best_score: float | None = Field(
        description="The best similarity seen (also when nothing was returned); null when no "
        "image was compared."
    )
    good_match_score: float = Field(
        description="The embedder's documented good-match line for this kind of query."
    )


class MoveOut(WireModel):
    """Where the asset is now; its object (the stored bytes) never changes on a move."""

    asset_id: str
    vault: str
    project_id: str | None
    folder_id: str | None
    object_id: str
    moved: bool = Field(description="False when the asset was already there.")


class DeleteOut(WireModel):
    """The outcome of a delete; repeating it reports alreadyDeleted and changes nothing."""

    asset_id: str
    vault: str
    status: str
    already_deleted: bool
    jobs_cancelled: int
    vectors_removed: int
    object_released: bool = Field(
        description="No other asset uses these bytes: they are purged once the delete grace "
        "window (ASSET_DELETE_GRACE_HOURS) has passed; until then image_asset_restore brings "
        "the image back."
    )


class RestoreOut(WireModel):
    """A restored image; restoring one that is not deleted reports alreadyActive."""

    asset_id: str
    vault: str
    status: str
    embedding_status: str
    already_active: bool
    project_id: str | None
    folder_id: str | None
    placement: str = Field(
        description="'original' (where it was), 'project_root' (its folder is gone) or "
        "'unfiled' (its project is gone or archived)."
    )
    job_ids: list[str]


class FolderDeletionOut(WireModel):
    """A folder deletion, or its dry run (deleted false, with a confirm token)."""

    folder_id: str
    project_id: str
    vault: str
    deleted: bool
    folders: int = Field(description="The folder and its subfolders.")
    assets: int = Field(description="Images in them.")
    bytes: int = Field(description="Original bytes of the distinct images they use.")
    confirm: str | None = Field(
        description="Pass back as confirm (with recursive=true) to delete exactly this."
    )
