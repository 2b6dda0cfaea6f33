"""Toolsets and the read-only selection are decided from the registry's specs, not name lists."""

from __future__ import annotations

import pytest

from memory_tools.mcp.tools import tools as memory_registry
from memory_tools.mcp.toolsets import MEMORY, MEMORY_READ, MEMORY_TOOLSETS, ToolSelection, select

ALL = {spec.name for spec in memory_registry.specs}
READ = {spec.name for spec in memory_registry.specs if spec.read_only}


def _names(selection: ToolSelection) -> set[str]:
    return {spec.name for spec in selection.offered()}


def test_memory_read_is_the_read_only_memory_tools() -> None:
    assert {"image_asset_search", "image_asset_get", "image_vault_list"} <= READ
    assert not {"image_asset_save", "image_asset_delete", "image_project_create"} & READ
    assert _names(ToolSelection((MEMORY,))) == ALL
    assert _names(ToolSelection((MEMORY_READ,))) == READ
    # --read-only over the whole memory toolset is the same set; memory-read adds nothing to it.
    assert _names(ToolSelection((MEMORY,), read_only=True)) == READ
    assert _names(ToolSelection((MEMORY, MEMORY_READ))) == ALL


def test_a_selection_keeps_the_registry_order_and_says_how_to_select_it_again() -> None:
    chosen = select(
        ["memory-read", " memory", "memory-read"], MEMORY_TOOLSETS, read_only=True, server="x"
    )
    assert chosen.toolsets == (MEMORY_READ, MEMORY)
    assert [s.name for s in chosen.offered()] == [
        s.name for s in memory_registry.specs if s.read_only
    ]
    assert chosen.arguments() == ["--toolsets", "memory-read,memory", "--read-only"]
    assert ToolSelection((MEMORY,)).arguments() == ["--toolsets", "memory"]


@pytest.mark.parametrize(
    ("names", "message"),
    [
        (
            ["memory", "scraper"],
            "'scraper': memory-server serves no scraper tools (scraper-mcp-server does); "
            "choose from memory, memory-read",
        ),
        (["memory-write"], "'memory-write' is not a toolset; choose from memory, memory-read"),
        ([""], "'' is not a toolset"),
    ],
)
def test_unknown_toolsets_are_refused_saying_what_to_choose(names: list[str], message: str) -> None:
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        select(names, MEMORY_TOOLSETS, read_only=False, server="memory-server")
