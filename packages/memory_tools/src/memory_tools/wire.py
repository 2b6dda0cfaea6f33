"""The base of every result a workflow returns: the tools' wire shapes, defined once.

A workflow answers with these models (``ProjectView``, ``SaveResult``, ``SearchView`` ...);
the MCP tools return them as they are, so their output schemas come from these classes: the
class docstring and the field descriptions are what a client reads.

An answer may also carry thumbnails of its results (``with_thumbnails``): pictures an agent
can see, sent as MCP image content beside the structured answer and never part of it or of
its schema (:mod:`memory_tools.workflows.thumbnails` makes them, the tool registry sends them).

What arrives on the wire and fails its model is told back by :func:`describe`, the same way on
every adapter (the MCP tools' arguments, the upload routes' JSON bodies).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Self

from pydantic import BaseModel, ConfigDict, PrivateAttr
from pydantic import ValidationError as PydanticValidationError
from pydantic.alias_generators import to_camel

from memory_db.repositories import StoredAsset


@dataclass(frozen=True)
class Thumbnail:
    """The thumbnail of one result: asked for with its preview, then made (or why not)."""

    asset_id: str
    preview_key: str | None = None  # the sanitised preview it is made from; never sent
    preview_sha256: str | None = None
    jpeg: bytes | None = None  # once made
    width: int = 0
    height: int = 0
    missing: str | None = None  # why there is none
    id_name: str = "assetId"  # what the id is called in the answer (a screenshot: artifactId)

    @classmethod
    def wanted(cls, stored: StoredAsset) -> Thumbnail:
        """The thumbnail to make of one result: from its preview, or none and why."""
        if stored.preview_storage_key is None or stored.object_status != "available":
            return cls(stored.asset.id, missing="its preview is not available")
        return cls(
            stored.asset.id,
            preview_key=stored.preview_storage_key,
            preview_sha256=stored.preview_sha256,
        )


class WireModel(BaseModel):
    """camelCase aliases, both spellings accepted in Python, unknown fields rejected."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        serialize_by_alias=True,
        extra="forbid",
        frozen=True,
    )

    # Not a field: never serialised, never in the schema.
    _thumbnails: tuple[Thumbnail, ...] | None = PrivateAttr(default=None)

    @property
    def thumbnails(self) -> tuple[Thumbnail, ...] | None:
        """The thumbnails that go with this answer, in result order; ``None``: not asked."""
        return self._thumbnails

    def with_thumbnails(self, thumbnails: tuple[Thumbnail, ...]) -> Self:
        """A copy of the answer with ``thumbnails`` (one per result, in result order)."""
        answer = self.model_copy()
        answer._thumbnails = thumbnails
        return answer


# The official MCP SDK client refuses a server-sent event over 1 MiB, and an answer's structured
# content travels twice (as structuredContent and as its JSON text). So the items of one answer
# (a list page, search results) are kept within this many bytes of JSON: a page of 100 images
# with every field at its bound would otherwise be about 1.9 MB.
ANSWER_ITEMS_BUDGET = 384 * 1024


def fitting(items: Sequence[WireModel], budget: int = ANSWER_ITEMS_BUDGET) -> int:
    """How many of ``items``, from the first, fit in ``budget`` bytes of JSON (at least one)."""
    used = 0
    for count, item in enumerate(items):
        used += len(item.model_dump_json().encode())
        if used > budget and count > 0:
            return count
    return len(items)


# pydantic error types, said the way a caller reads them.
_MESSAGES = {
    "unexpected_keyword_argument": "is not a known field",
    "missing_argument": "is required",
    "missing": "is required",
    "extra_forbidden": "is not a known field",
}


_UNKNOWN_FIELD = frozenset({"unexpected_keyword_argument", "extra_forbidden"})


def describe(error: PydanticValidationError, known_fields: Collection[str] = ()) -> str:
    """``field: problem; field: problem`` without echoing the submitted values.

    An unknown snake_case field whose camelCase spelling is one of ``known_fields`` gets a
    suggestion: ``image_base64: is not a known field; did you mean `imageBase64`?``.
    """
    parts: list[str] = []
    for item in error.errors(include_input=False, include_url=False):
        field = ".".join(str(p) for p in item["loc"]) or "arguments"
        message = _MESSAGES.get(item["type"], str(item["msg"]))
        if item["type"] in _UNKNOWN_FIELD:
            message = unknown_field(field, known_fields)
        parts.append(f"{field}: {message}")
    return "; ".join(parts)


def unknown_field(field: str, known_fields: Collection[str]) -> str:
    """What is said of an unknown field: with its camelCase spelling when that one is known."""
    camel = to_camel(field)
    if camel != field and camel in known_fields:
        return f"is not a known field; did you mean `{camel}`?"
    return "is not a known field"


class NearDuplicate(WireModel):
    """An asset of the same vault whose image looks nearly the same (docs/tools.md)."""

    asset_id: str
    title: str
    distance: float
