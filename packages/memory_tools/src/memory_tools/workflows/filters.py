"""The filter parameters every caller sets, declared once (docs/design.md#filters).

:class:`FilterParameters` is what a caller names to narrow a listing or a search: where to look
(vault, project, folder) and the exact filters. Its fields carry the bounds and descriptions
clients are shown, under the camelCase names they send. The list and search tools take it
spread into their signatures (``memory_tools.mcp.registry.Spread``), so each of its fields is
one tool parameter; the web app's search page and library read their query strings into it
(:func:`memory_tools.web.filter_query.read_filters`). The SQL meaning of each exact filter is
``memory_db.repositories.AssetFilter``'s, field by field under the same snake_case name.

Adding a filter: a field of ``AssetFilter`` with its condition, a field here with its bounds,
and a control in the web pages' templates. ``test_filter_surfaces.py`` fails while a caller
surface lacks it.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel
from pydantic_core import ErrorDetails, PydanticCustomError

from memory_db.repositories import AssetFilter
from memory_tools.errors import InvalidInputFailure

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


OptionalVault = Annotated[
    str | None,
    Field(max_length=400, description="Omit for every vault you may read."),
]
OptionalId = Annotated[str | None, Field(max_length=64)]
TagsParam = Annotated[
    list[Annotated[str, Field(max_length=64)]] | None,
    Field(max_length=32, description="Each must be present."),
]
SourceKindsParam = Annotated[
    list[str] | None,
    Field(max_length=6, description="upload, scrape, screenshot, instagram, external_url, import."),
]
SourceHostParam = Annotated[str | None, Field(max_length=253, description="e.g. example.com")]
MimeTypesParam = Annotated[
    list[str] | None,
    Field(max_length=4, description="image/jpeg, image/png, image/webp, image/gif."),
]
UntaggedParam = Annotated[bool, Field(description="Only images without tags.")]
CreatedAfterParam = Annotated[
    datetime | None,
    BeforeValidator(iso_instant),
    Field(description="Inclusive; with a time and a zone, e.g. 2026-11-30T12:00:00Z."),
]
CreatedBeforeParam = Annotated[
    datetime | None,
    BeforeValidator(iso_instant),
    Field(description="Exclusive; with a time and a zone, e.g. 2026-12-01T00:00:00Z."),
]

SavedByParam = Annotated[
    str | None, Field(max_length=64, description="Id of the key that saved it.")
]

TakenAfterParam = Annotated[
    datetime | None,
    BeforeValidator(iso_instant),
    Field(description="Capture time, inclusive."),
]
TakenBeforeParam = Annotated[
    datetime | None,
    BeforeValidator(iso_instant),
    Field(description="Capture time, exclusive."),
]

# Where to look: checked against the caller's vaults, never an ``AssetFilter`` field.
PLACEMENT = ("vault", "project_id", "folder_id", "include_subfolders")


class FilterParameters(BaseModel):
    """Where a listing or a search looks and what it keeps, as a caller names it.

    Field order is the order clients see the tool parameters in; the aliases are the camelCase
    names they send. Every field but the placement (:data:`PLACEMENT`) is a field of
    ``AssetFilter`` by the same name; ``None`` and ``False`` do not filter.
    """

    model_config = ConfigDict(frozen=True, alias_generator=to_camel, validate_by_name=True)

    vault: OptionalVault = None
    project_id: OptionalId = None
    folder_id: OptionalId = None
    include_subfolders: bool = False
    tags: TagsParam = None
    untagged: UntaggedParam = False
    source_kinds: SourceKindsParam = None
    source_host: SourceHostParam = None
    mime_types: MimeTypesParam = None
    created_after: CreatedAfterParam = None
    created_before: CreatedBeforeParam = None
    saved_by: SavedByParam = None
    taken_after: TakenAfterParam = None
    taken_before: TakenBeforeParam = None

    @classmethod
    def checked(cls, values: dict[str, Any]) -> FilterParameters:
        """Values by camelCase name, validated as the tools validate them.

        ``invalid_input`` naming the parameter for what the bounds refuse: the web pages' way
        to the same bounds the tools' schemas state.
        """
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            raise InvalidInputFailure(
                "; ".join(_refusal(error) for error in exc.errors())
            ) from None

    def asset_filter(self) -> AssetFilter:
        """The exact filters (every field but the placement) as ``AssetFilter`` applies them.

        An omitted value leaves its filter unset; a list becomes a tuple.
        """
        values: dict[str, Any] = {}
        for name in FILTER_NAMES:
            value = getattr(self, name)
            if value is not None:
                values[name] = tuple(value) if isinstance(value, list) else value
        return AssetFilter(**values)

    def request_fields(self) -> dict[str, Any]:
        """The keyword arguments of a listing or search request (``assets.FilterFields``)."""
        return {
            "vault": self.vault,
            "project_id": self.project_id,
            "folder_id": self.folder_id,
            "include_subfolders": self.include_subfolders,
            "filters": self.asset_filter(),
        }


# The exact filters a caller sets, by their field names (``AssetFilter``'s too).
FILTER_NAMES = tuple(name for name in FilterParameters.model_fields if name not in PLACEMENT)


def _refusal(error: ErrorDetails) -> str:
    """One validation error as ``name: what to send``, in the words the web pages used."""
    name = to_camel(str(error["loc"][0])) if error["loc"] else "value"
    context = error.get("ctx", {})
    if error["type"] == "string_too_long":
        return f"{name}: at most {context['max_length']} characters"
    if error["type"] == "too_long":
        return f"{name}: at most {context['max_length']} values"
    return f"{name}: {error['msg']}"
