"""The base of every result a workflow returns: the tools' wire shapes, defined once.

A workflow answers with these models (``ProjectView``, ``SaveResult``, ``SearchView`` ...);
the MCP tools return them as they are, so their output schemas come from these classes: the
class docstring and the field descriptions are what a client reads.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class WireModel(BaseModel):
    """camelCase aliases, both spellings accepted in Python, unknown fields rejected."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        serialize_by_alias=True,
        extra="forbid",
        frozen=True,
    )
