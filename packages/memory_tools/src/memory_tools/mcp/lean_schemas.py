"""The schemas a tool is listed with, made lean: what an agent pays for in every session.

``tools/list`` goes into an agent's context on every session, so each byte of it is paid for
again and again (issue 34 §3; the budget and its measure: ``scraper_mcp.schema_budget``).
``ToolRegistry.bind`` lists every tool, memory and scraper alike, through these two functions:

- :func:`lean_input_schema` keeps every constraint a call is held to (types, bounds, patterns,
  enums, ``required``, ``additionalProperties: false``) and rewrites only how it is spelled: a
  nullable value is one schema with a type list (``{"type": ["string", "null"], "maxLength":
  64}``, which JSON Schema reads exactly as pydantic's ``anyOf`` of the string schema and
  ``null``), local ``$ref`` s are inlined (fastmcp would inline them on listing anyway, for
  clients that cannot follow them), and ``"default": null`` (what leaving a field out means
  anyway) is left out. Calls are still validated by pydantic from the method's signature, never
  from this schema, so every refusal and its message stay as they were.
- :func:`lean_output_schema` keeps the shape of an answer an agent plans with: each field of the
  answer and of the records it lists (items of its arrays), with its JSON type(s) and which
  fields are always present. Objects nested inside a record (an asset's ``preview``,
  ``textInImage``, ``generatedContext``) are given by type only; their fields, and every
  field's meaning, are documented in docs/tools.md. It drops the per-field prose, formats and
  ``additionalProperties``. The answer (``structuredContent``) is unchanged, and still validates
  against the lean schema, which only says less.

Measured on the memory server's 18 tools (docs/tools.md, "What tools/list costs"): output
schemas were 31 kB of the 55 kB; with every nested field spelled out but no prose they were
still 15.5 kB, over half of the 24 kB budget, while no MCP client we know of puts an output
schema in the model's context. ``$defs`` shared within a tool were tried and not kept: our
schemas repeat almost no structure within one tool, and fastmcp inlines ``$ref`` on listing.
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
_NOT_COLLAPSIBLE = ("anyOf", "oneOf", "allOf", "$ref", "enum", "const", "type")


def lean_input_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with every constraint kept, nullable unions as type lists, ``$ref`` inlined."""
    inlined = dereference_refs(schema)
    return _lean_input(inlined)


def lean_output_schema(schema: dict[str, Any] | None) -> dict[str, Any] | None:
    """The shape of an answer: its fields and its listed records' fields, by JSON type.

    ``None`` (a tool without an output schema) stays ``None``.
    """
    if schema is None:
        return None
    shaped = _shape(dereference_refs(schema), record=True)
    # fastmcp reads these markers off the output schema when it builds the answer.
    for marker in ("x-fastmcp-wrap-result",):
        if marker in schema:
            shaped[marker] = schema[marker]
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
        elif key == "title" or (key == "default" and value is None):
            continue
        else:
            lean[key] = value
    return _collapse_nullable(lean)


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
    if any(key in other for key in _NOT_COLLAPSIBLE if key != "type"):
        return schema
    siblings = {key: value for key, value in schema.items() if key != "anyOf"}
    if set(siblings) & set(other):
        return schema
    return {"type": [other["type"], "null"], **{k: v for k, v in other.items() if k != "type"}} | (
        siblings
    )


def _types(schema: dict[str, Any]) -> list[str]:
    """Every JSON type a schema admits, in order, for a schema given by its type only."""
    found: list[str] = []
    members = schema.get("anyOf") or schema.get("oneOf") or [schema]
    for member in members:
        named = member.get("type") if isinstance(member, dict) else None
        for name in [named] if isinstance(named, str) else (named or []):
            if name not in found:
                found.append(name)
    return found


def _by_type(schema: dict[str, Any]) -> dict[str, Any]:
    types = _types(schema)
    if not types:
        return {}
    return {"type": types[0] if len(types) == 1 else types}


def _shape(schema: dict[str, Any], *, record: bool) -> dict[str, Any]:
    """The lean output shape of ``schema``; ``record``: spell out its fields (one level)."""
    members = schema.get("anyOf") or schema.get("oneOf")
    if members:
        spelled = [m for m in members if isinstance(m, dict) and ("properties" in m or "items" in m)]
        if not record or not spelled:
            return _by_type(schema)
        return {"anyOf": [_shape(member, record=record) for member in members]}
    shaped = _by_type(schema)
    for key in ("const", "enum"):
        if key in schema:
            shaped[key] = schema[key]
    properties = schema.get("properties")
    if isinstance(properties, dict):
        if not record:
            return shaped
        shaped["properties"] = {
            name: _shape(inner, record=False) for name, inner in properties.items()
        }
        if schema.get("required"):
            shaped["required"] = schema["required"]
    items = schema.get("items")
    if isinstance(items, dict):
        # The records an answer lists (results, folders, vaults): their fields are spelled out.
        shaped["items"] = _shape(items, record=True)
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict) and extra:
        shaped["additionalProperties"] = _by_type(extra)
    return shaped
