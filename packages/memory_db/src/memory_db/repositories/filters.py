"""The exact filters of listing and search, each declared once (docs/design.md#filters).

A filter is one field of :class:`AssetFilter`, declared with :func:`condition`: its value when
it does not filter, its SQL condition over an asset row (``mem_assets`` joined with its
``mem_asset_objects`` row) and, when the vector tables carry the column, the same predicate
over a vector table. Listing, the candidate reload of search, search's full-text list and the
vector query all read these declarations, so a filter cannot mean one thing in a listing and
another in a search. Adding a filter: a field here with its condition, and the caller-facing
parameter of the same name in ``memory_tools.workflows.filters.FilterParameters`` (its bounds,
its description; callers send it in camelCase: ``source_host`` is ``sourceHost``), which both
tools and both web pages read. Tests run every field a caller sets through every caller
surface, and compare every vector predicate with its SQL condition.

The vault scope (whose data, which vault) is not a filter: repositories and the vector index
apply it to every query before any of these conditions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from typing import Any, TypeVar, overload

from sqlalchemy import ColumnElement, DateTime, func, literal, literal_column
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import QueryableAttribute

from memory_db.errors import InvalidInput
from memory_db.schema import UNDATED_TAKEN_AT, Asset, AssetObject

Value = TypeVar("Value")


@dataclass(frozen=True, slots=True)
class Condition:
    """What one filter field means, in the asset tables and (when it can) in a vector table.

    ``sql`` gets the field's value whenever it differs from the field's default. ``vector`` is
    SQL over a vector table's columns with the value as ``:value``; ``None`` when the vector
    tables lack the column (search then narrows the candidates by asset id instead).
    ``reads_object``: the condition reads ``mem_asset_objects``, which a query over assets
    alone must join.
    """

    sql: Callable[[Any], ColumnElement[bool]]
    vector: str | None = None
    reads_object: bool = False
    set_by_caller: bool = True


@overload
def condition(
    unset: None,
    sql: Callable[[Value], ColumnElement[bool]],
    *,
    vector: str | None = None,
    reads_object: bool = False,
    set_by_caller: bool = True,
) -> Value | None: ...


@overload
def condition(
    unset: Value,
    sql: Callable[[Value], ColumnElement[bool]],
    *,
    vector: str | None = None,
    reads_object: bool = False,
    set_by_caller: bool = True,
) -> Value: ...


def condition(
    unset: Any,
    sql: Callable[[Any], ColumnElement[bool]],
    *,
    vector: str | None = None,
    reads_object: bool = False,
    set_by_caller: bool = True,
) -> Any:
    """Declare a filter field: ``unset`` does not filter, any other value applies ``sql``.

    ``set_by_caller=False`` marks fields the workflows derive (a checked project, a folder
    subtree, search candidates) rather than take from a tool parameter.
    """
    declared = Condition(sql, vector, reads_object, set_by_caller)
    return field(default=unset, metadata={"condition": declared})


def _one_of(column: QueryableAttribute[Any]) -> Callable[[tuple[str, ...]], ColumnElement[bool]]:
    return lambda values: column.in_(list(values))


def source_host() -> ColumnElement[str]:
    """The host of an asset's source URL, as SQL.

    An index of listing is built on this very expression (revision 0020), so the pattern is
    written into the statement, not sent as a parameter.
    """
    pattern = literal(r"^[a-z]+://\[?([^/\]:]+)", literal_execute=True)
    return func.lower(func.substring(Asset.source_url, pattern))


def taken_key() -> ColumnElement[datetime]:
    """An asset's capture time, undated assets at the year 1000 (``schema.TAKEN_KEY``), as SQL.

    The ``taken`` listing indexes are built on this very expression (revision 0024).
    """
    # A function, not one literal column: a comparison names its parameter after the left
    # side, and the literal's text (quotes, colons) is no parameter name.
    return func.coalesce(Asset.taken_at, _undated())


def taken_range(after: datetime | None, before: datetime | None) -> list[ColumnElement[bool]]:
    """The capture filters over :func:`taken_key`: index conditions of the ``taken`` order.

    The filters themselves compare the column (:class:`AssetFilter`), which no index leads
    with, so a listing by creation time walks its own index rather than sorting a capture
    range; a listing by capture time adds these, and reads the range from its index.
    """
    found: list[ColumnElement[bool]] = []
    if after is not None:
        found.append(taken_key() >= after)
    if before is not None:
        found.append(taken_key() < before)
    return found


def _undated() -> ColumnElement[datetime]:
    return literal_column(f"'{UNDATED_TAKEN_AT}'::timestamptz", DateTime(timezone=True))


# A constant (not a parameter), so that a cached generic plan knows its frequency too.
_EMPTY_ARRAY = literal_column("'[]'::jsonb", JSONB)


def _host(value: str) -> ColumnElement[bool]:
    return source_host() == value.lower()


@dataclass(frozen=True, slots=True)
class AssetFilter:
    """Exact filters of listing and search; a field at its default does not filter."""

    project_id: str | None = condition(
        None,
        lambda value: Asset.project_id == value,
        vector="project_id = :value",
        set_by_caller=False,
    )
    # The folder, or it and its descendants.
    folder_ids: tuple[str, ...] | None = condition(
        None,
        _one_of(Asset.folder_id),
        vector="folder_id = ANY(:value)",
        set_by_caller=False,
    )
    # Every tag must be present.
    tags: tuple[str, ...] = condition((), lambda value: Asset.tags.contains(list(value)))
    # The empty array itself (the tags are always an array): an equality the planner has
    # statistics for, so it knows how many assets are untagged.
    untagged: bool = condition(False, lambda _: Asset.tags == _EMPTY_ARRAY)
    source_kinds: tuple[str, ...] = condition(
        (), _one_of(Asset.source_kind), vector="source_kind = ANY(:value)"
    )
    source_host: str | None = condition(None, _host)
    mime_types: tuple[str, ...] = condition(
        (),
        _one_of(AssetObject.mime_type),
        vector="mime_type = ANY(:value)",
        reads_object=True,
    )
    created_after: datetime | None = condition(
        None, lambda value: Asset.created_at >= value, vector="created_at >= :value"
    )
    created_before: datetime | None = condition(
        None, lambda value: Asset.created_at < value, vector="created_at < :value"
    )
    # Saved with this key (``savedBy``, revision 0023): the vector tables lack the column, so
    # search narrows its candidates by asset id, as for ``source_host``.
    saved_by: str | None = condition(None, lambda value: Asset.saved_by_key_id == value)
    # Capture time from EXIF (revision 0024); the vector tables do not carry it.
    taken_after: datetime | None = condition(None, lambda value: Asset.taken_at >= value)
    taken_before: datetime | None = condition(None, lambda value: Asset.taken_at < value)
    # Only these assets (search candidates).
    asset_ids: tuple[str, ...] | None = condition(
        None,
        _one_of(Asset.id),
        vector="asset_id = ANY(:value)",
        set_by_caller=False,
    )

    def active(self) -> Iterator[tuple[str, Any, Condition]]:
        """``(name, value, condition)`` of every field that filters."""
        for declared in fields(self):
            value = getattr(self, declared.name)
            if value != declared.default:
                yield declared.name, value, declared.metadata["condition"]

    def conditions(self) -> list[ColumnElement[bool]]:
        """The SQL conditions over an asset row joined with its object."""
        return [declared.sql(value) for _, value, declared in self.active()]

    def reads_objects(self) -> bool:
        """Whether a condition reads ``mem_asset_objects`` (a query over assets must join it)."""
        return any(declared.reads_object for _, _, declared in self.active())

    def outside_vectors(self) -> bool:
        """Whether a filtering field has no column in the vector tables."""
        return any(declared.vector is None for _, _, declared in self.active())

    def for_vectors(self) -> AssetFilter:
        """The same filter without the fields the vector tables cannot evaluate."""
        unset = {name: FILTER_FIELDS[name][0] for name, _, c in self.active() if not c.vector}
        return replace(self, **unset)

    def vector_conditions(self, params: dict[str, object]) -> list[str]:
        """SQL over a vector table's columns; the values are added to ``params``.

        ``InvalidInput`` for a filtering field the vector tables have no column for: ignoring
        it would return vectors the filter excludes.
        """
        found: list[str] = []
        for name, value, declared in self.active():
            if declared.vector is None:
                raise InvalidInput(f"the vector index cannot filter on {name}")
            # Parenthesised: a predicate with an OR must not loosen the scope it is ANDed to.
            found.append("(" + declared.vector.replace(":value", f":filter_{name}") + ")")
            params[f"filter_{name}"] = list(value) if isinstance(value, tuple) else value
        return found


# Every filter field: its name, its value when it does not filter, and its condition.
FILTER_FIELDS: dict[str, tuple[Any, Condition]] = {
    declared.name: (declared.default, declared.metadata["condition"])
    for declared in fields(AssetFilter)
}
