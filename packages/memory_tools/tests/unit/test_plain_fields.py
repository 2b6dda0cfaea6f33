"""A workflow's answer becomes its output model exactly as with ``dataclasses.asdict``."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple

from memory_tools.assets import PreviewLink
from memory_tools.mcp.schemas import SearchOut
from memory_tools.mcp.tools import plain_fields
from memory_tools.search import SearchHit, SearchView

NOW = datetime.now(UTC)


def _hit(i: int, preview: PreviewLink | None) -> SearchHit:
    return SearchHit(
        asset_id=f"ast_{i}",
        vault="Library",
        title=f"title {i}",
        mime_type="image/png",
        width=10,
        height=20,
        project_id=None,
        folder_id=None,
        source_url=None,
        tags=["a", "b"],
        created_at=NOW,
        score=0.5,
        match_representations=["fused"],
        embedding_model="local-hash-v1",
        preview=preview,
    )


def test_a_search_answer_gives_the_same_output_as_with_asdict() -> None:
    view = SearchView(
        mode="text",
        results=[_hit(1, PreviewLink("https://x/y?sig=1", NOW)), _hit(2, None)],
        no_good_match=False,
        best_score=0.5,
        good_match_score=0.3,
    )
    assert plain_fields(view) == asdict(view)
    assert SearchOut.model_validate(plain_fields(view)) == SearchOut.model_validate(asdict(view))


class Point(NamedTuple):
    x: int
    y: int


@dataclass
class Inner:
    values: tuple[int, ...]


@dataclass
class Outer:
    inner: Inner
    inners: list[Inner]
    mapping: dict[str, Any]
    point: Point
    nothing: None = None
    extra: list[Any] = field(default_factory=list[Any])


def test_nested_containers_are_converted_like_asdict_does() -> None:
    value = Outer(
        inner=Inner((1, 2)),
        inners=[Inner(()), Inner((3,))],
        mapping={"a": Inner((4,)), "b": [Inner((5,))], "c": {"d": 1}},
        point=Point(1, 2),
        extra=[(Inner((6,)),)],
    )
    converted = plain_fields(value)
    assert converted == asdict(value)
    assert type(converted["point"]) is Point and type(converted["inner"]["values"]) is tuple
