"""The filter parameters in a page's query string or form, by the tools' camelCase names.

The search page and the library read what narrows their images with :func:`read_filters`
and check it with ``FilterParameters.checked``, so a filter is named, bounded and described
once (:mod:`memory_tools.workflows.filters`) for the tools and the pages alike. The values are
kept as typed (a page shows them again beside a refusal) until they are checked.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal, cast, get_args, get_origin

from pydantic.fields import FieldInfo
from starlette.datastructures import ImmutableMultiDict

from memory_tools.web.bodies import comma_separated
from memory_tools.workflows.filters import FilterParameters

Shape = Literal["many", "flag", "one"]
_TRUE = frozenset({"on", "true", "1", "yes"})


def shape(info: FieldInfo) -> Shape:
    """How a parameter is written in a form: several values, a checkbox, or one text."""
    annotation = info.annotation
    if annotation is bool:
        return "flag"
    members = get_args(annotation) if get_args(annotation) else (annotation,)
    return "many" if any(get_origin(member) is list for member in members) else "one"


def _fields(names: Iterable[str] | None) -> dict[str, FieldInfo]:
    """The parameters' fields by camelCase name, in declaration order."""
    declared = FilterParameters.model_fields
    chosen = declared if names is None else {name: declared[name] for name in names}
    return {info.alias or name: info for name, info in chosen.items()}


def read_filters(
    values: ImmutableMultiDict[str, Any],
    names: Iterable[str] | None = None,
    *,
    former: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Every parameter ``names`` (all by default) as typed, keyed by its camelCase name.

    Several values (a repeated name, or commas: ``tags=beach, 2026``) are a list
    (:func:`memory_tools.web.bodies.comma_separated`: blanks dropped, repeats once), a checkbox
    is ``True`` when ticked, one value is its stripped text; an absent one is ``[]``, ``False``
    or ``""``. ``former``: an older name a link may still carry, by the name it became.
    """
    read: dict[str, Any] = {}
    for alias, info in _fields(names).items():
        spelled = [alias, *(old for old, new in (former or {}).items() if new == alias)]
        given = [v.strip() for name in spelled for v in values.getlist(name) if isinstance(v, str)]
        kind = shape(info)
        if kind == "many":
            read[alias] = comma_separated(given)
        elif kind == "flag":
            read[alias] = any(v.lower() in _TRUE for v in given)
        else:
            read[alias] = next((v for v in given if v), "")
    return read


def unset_filters(names: Iterable[str] | None = None) -> dict[str, Any]:
    """Every parameter ``names`` (all by default) as :func:`read_filters` reads an empty form."""
    return read_filters(ImmutableMultiDict(), names)


def set_filters(read: Mapping[str, Any]) -> dict[str, Any]:
    """The values of ``read`` that narrow anything (blanks dropped), ready to be checked."""
    return {alias: value for alias, value in read.items() if value not in ("", [], False)}


def filter_pairs(read: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``read`` written back as query pairs, by the same names (a view is always a link)."""
    pairs: list[tuple[str, str]] = []
    for alias, value in set_filters(read).items():
        if isinstance(value, list):
            pairs.extend((alias, str(item)) for item in cast(list[Any], value))
        elif value is True:
            pairs.append((alias, "on"))
        else:
            pairs.append((alias, str(value)))
    return pairs
