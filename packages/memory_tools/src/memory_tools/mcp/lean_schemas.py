"""The schemas a tool is listed with, made lean: what an agent pays for in every session.

``tools/list`` goes into an agent's context on every session, so each byte of it is paid for
again and again (issue 34; the budget and its measure: ``scraper_mcp.schema_budget``).
``ToolRegistry.bind`` lists every tool, memory and scraper alike, through these two functions:

- :func:`lean_input_schema` keeps every constraint a call is held to (types, bounds, patterns,
  enums, ``required``, ``additionalProperties: false``) and rewrites only how it is spelled: a
  nullable value is one schema with a type list (``{"type": ["string", "null"], "maxLength":
  64}``, which JSON Schema reads exactly as pydantic's ``anyOf`` of the string schema and
  ``null``; a union of bare types is one type list too), local ``$ref`` s are inlined
  (fastmcp would inline them on listing anyway, for clients that cannot follow them), and
  ``"default": null`` (what leaving a field out means anyway), an empty ``required`` and
  titles are left out. Calls are still validated by
  pydantic from the method's signature, never from this schema, so every refusal and its
  message stay as they were.
- :func:`lean_output_schema` names what an answer holds: its fields, and the fields of the
  records it lists (the items of an array field: search results, folders, vaults), by name
  only. Every field is always present in an answer (null when empty); each field's type and
  meaning, and the fields of nested objects (an asset's ``preview`` or ``textInImage``), are
  in docs/tools.md. The answer itself (``structuredContent``, repeated as JSON text) is
  unchanged, and it still validates against the lean schema, which only says less.

What the figures supported (the memory server's whole list, 18 tools; the table is in
docs/tools.md, "What tools/list costs"): output schemas were 31 kB of the 55 kB. Without their
prose they still made the list 33.3 kB; with nested objects by type only 27.8 kB (25.2 kB
without ``required``); with the answer's top-level fields and types 23.1 kB, each over the
24 kB budget or without its 10 % headroom. Field names with the listed records' field names:
21.2 kB (none at all: 17.0 kB).
``$defs`` shared within a tool were not kept: our schemas repeat almost no structure within one
tool, and fastmcp inlines every ``$ref`` on listing anyway (some clients cannot follow them).
"""

from __future__ import annotations

from typing import Any

from fastmcp.utilities.json_schema import dereference_refs

# Keywords whose value is a map of names to schemas, or a list of schemas: walked into.
_SCHEMA_MAPS = ("properties", "$defs", "patternProperties")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_VALUES = ("items", "additionalProperties", "not", "contains")
# A nullable union is collapsed only when its other member is a plain typed schema: an enum or a
# const would need null added to it, a combinator or a reference has no single type to extend.
_NOT_COLLAPSIBLE = ("anyOf", "oneOf", "allOf", "$ref", "enum", "const")
_WRAPPED = "x-fastmcp-wrap-result"
# Annotations, not constraints: where a union and its member both have one, the union's is kept.
_NOTES = ("description", "title")


def lean_input_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with every constraint kept, nullable unions as type lists, ``$ref`` inlined."""
    inlined = dereference_refs(schema)
    return _lean_input(inlined)


def lean_output_schema(schema: dict[str, Any] | None) -> dict[str, Any] | None:
    """An answer's object schema by its field names, and its listed records' field names.

    ``None`` (a tool without an output schema) stays ``None``.
    """
    if schema is None:
        return None
    shaped = {"type": "object", **_names(dereference_refs(schema))}
    if _WRAPPED in schema:  # fastmcp reads it when it builds the answer of a non-object result
        shaped[_WRAPPED] = schema[_WRAPPED]
    return shaped


def _lean_input(schema: Any) -> Any:
    if not isinstance(schema, dict):
        return schema
    lean: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            lean[key] = {name: _lean_input(inner) for name, inner in value.items()}
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            lean[key] = [_lean_input(inner) for inner in value]
        elif key in _SCHEMA_VALUES:
            lean[key] = _lean_input(value)
        elif key == "title" or (key, value) in (("default", None), ("required", [])):
            continue
        else:
            lean[key] = value
    return _collapse_nullable(_union_of_types(lean))


def _union_of_types(schema: dict[str, Any]) -> dict[str, Any]:
    """``{"anyOf": [{"type": A}, {"type": B}, ...]}`` as ``{"type": [A, B, ...]}``: the same."""
    members = schema.get("anyOf")
    if not isinstance(members, list) or len(members) < 2:
        return schema
    if not all(isinstance(m, dict) and set(m) == {"type"} for m in members):
        return schema
    types = [member["type"] for member in members]
    if not all(isinstance(name, str) for name in types) or "type" in schema:
        return schema
    return {"type": types, **{key: value for key, value in schema.items() if key != "anyOf"}}


def _collapse_nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """``{"anyOf": [S, {"type": "null"}], ...}`` as S with ``"null"`` added to its type.

    Only when S has one plain type (see :data:`_NOT_COLLAPSIBLE`): S's keywords all apply to
    values of that type only, so the one schema accepts exactly what the union accepted.
    """
    members = schema.get("anyOf")
    if not isinstance(members, list) or len(members) != 2 or {"type": "null"} not in members:
        return schema
    (other,) = [member for member in members if member != {"type": "null"}]
    if not isinstance(other, dict) or not isinstance(other.get("type"), str):
        return schema
    if any(key in other for key in _NOT_COLLAPSIBLE):
        return schema
    siblings = {key: value for key, value in schema.items() if key != "anyOf"}
    if (set(siblings) & set(other)) - set(_NOTES):
        return schema
    # A note on both (a parameter's description, its model's docstring inlined): the union's.
    kept = {key: value for key, value in other.items() if key not in siblings and key != "type"}
    return {"type": [other["type"], "null"], **kept, **siblings}


def _field(schema: dict[str, Any]) -> dict[str, Any]:
    """A field of an answer: any value, unless it lists records (then their field names).

    A list of records that may be null (``nearDuplicates`` before an image is embedded) says
    so, or the answer would not validate against its own schema.
    """
    members = schema.get("anyOf") or schema.get("oneOf") or [schema]
    for member in members:
        items = member.get("items") if isinstance(member, dict) else None
        if isinstance(items, dict) and isinstance(items.get("properties"), dict):
            nullable = {"type": "null"} in members
            return {"type": ["array", "null"] if nullable else "array", "items": _names(items)}
    return {}


def _names(schema: dict[str, Any]) -> dict[str, Any]:
    """An object by its field names (their values: :func:`_field`)."""
    properties = schema.get("properties")
    fields = properties if isinstance(properties, dict) else {}
    return {"properties": {name: _field(inner) for name, inner in fields.items()}}
