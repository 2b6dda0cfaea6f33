"""What ``tools/list`` may cost: the byte budgets of each tool and of each server, as data.

An agent pays for a server's ``tools/list`` in context on every session (issue 34), so each
tool has a budget, and so has the whole list. ``benchmarks/tool_schemas.py`` (``make bench``)
prints the figures with PASS/FAIL; ``tests/manifest/test_schema_budget.py`` fails the suite when
a tool grows past its budget or a server's list past its own.

**The measure.** What a client receives: the ``tools/list`` result read by a fastmcp ``Client``
(the MCP SDK's ``ListToolsResult``), dumped as sent (camelCase, no nulls) and serialised as
compact JSON (``,`` and ``:`` without spaces, UTF-8, non-ASCII unescaped), in bytes. A tool's
bytes are its own entry in that list (``name``, ``title``, ``description``, ``inputSchema``,
``outputSchema``, ``annotations``, ``_meta``); a server's are the whole result (its tools and
the ~150 bytes of result fields the 2026-07-28 protocol revision adds around them, which a
client of an older revision does not receive). The JSON-RPC envelope adds about 35 bytes.

**The budgets.** The memory server's list is at most :data:`MEMORY_LIST_BUDGET` (24,000 bytes,
about 6,000 tokens). Each tool's budget is its size when the budgets were set plus a small
margin. The list was set about 10 % under its budget: that headroom is kept for the fields being
added (filters such as ``savedBy``, ``takenAfter``/``takenBefore``, ``assetIds``). A tool that
needs more takes it from that headroom: raise its budget here, in the same change, and say why
in docs/tools.md ("What tools/list costs"). The aggregate server lists the memory tools and the
scraper tools: its budget is the memory server's plus :data:`SCRAPER_TOOL_BUDGETS`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fastmcp import Client

if TYPE_CHECKING:
    from fastmcp import FastMCP

# The ceiling for the memory server's whole tools/list, in bytes (~6,000 tokens).
MEMORY_LIST_BUDGET = 24_000

# Per-tool budgets, in bytes of the tool's entry: its size when last set (in the comment) plus
# 5-14 bytes. When first set (21,147 bytes for the list) they left 11.9 % of headroom for the
# fields issue 35 added: assetIds and addTags/removeTags on the per-asset tools (920 bytes),
# image_asset_duplicates, nearDuplicates on get, save and update and save's waitSeconds (about
# 1,350). Shorter descriptions then won back 371 bytes. The budgets add up to at most
# MEMORY_LIST_BUDGET; the list's own check holds whatever the per-tool budgets say.
MEMORY_TOOL_BUDGETS: dict[str, int] = {
    "image_asset_delete": 770,  # 757
    "image_asset_duplicates": 990,  # 979
    "image_asset_enrich": 870,  # 857
    "image_asset_get": 1_940,  # 1,927
    "image_asset_list": 2_450,  # 2,443
    "image_asset_move": 910,  # 905
    "image_asset_restore": 800,  # 790
    "image_asset_save": 2_270,  # 2,257
    "image_asset_search": 3_180,  # 3,167
    "image_asset_update": 1_930,  # 1,916
    "image_folder_create": 960,  # 946
    "image_folder_delete": 1_090,  # 1,083
    "image_folder_list": 860,  # 847
    "image_folder_update": 1_120,  # 1,110
    "image_project_archive": 790,  # 778
    "image_project_create": 810,  # 797
    "image_project_list": 730,  # 721
    "image_project_update": 980,  # 974
    "image_vault_list": 520,  # 513
}

SCRAPER_TOOL_BUDGETS: dict[str, int] = {
    "scrape_image_download": 900,  # 763
    "scrape_page_images": 1_800,  # 1,668
    "scrape_page_screenshot": 1_000,  # 865
}

# The aggregate server lists both: the memory list's budget plus the scraper tools'.
AGGREGATE_LIST_BUDGET = MEMORY_LIST_BUDGET + sum(SCRAPER_TOOL_BUDGETS.values())
TOOL_BUDGETS: dict[str, int] = MEMORY_TOOL_BUDGETS | SCRAPER_TOOL_BUDGETS


def wire_bytes(value: Any) -> int:
    """Bytes of ``value`` as compact JSON in UTF-8 (the measure of this module's docstring)."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


@dataclass(frozen=True)
class ToolSize:
    """One listed tool's bytes: in total, and of its description, input and output schemas."""

    name: str
    description: int
    input: int
    output: int
    total: int

    @property
    def budget(self) -> int | None:
        """The tool's budget, or ``None`` for a tool that has none (a test refuses that)."""
        return TOOL_BUDGETS.get(self.name)


@dataclass(frozen=True)
class ListSize:
    """A server's ``tools/list``: each tool's size and the bytes of the whole result."""

    tools: tuple[ToolSize, ...]
    total: int

    def over_budget(self, budget: int) -> list[str]:
        """One line per tool past its budget (or without one), and for a total past ``budget``."""
        found: list[str] = []
        for tool in self.tools:
            if tool.budget is None:
                found.append(f"{tool.name}: {tool.total} bytes and no budget in schema_budget")
            elif tool.total > tool.budget:
                found.append(f"{tool.name}: {tool.total} bytes > its budget of {tool.budget}")
        if self.total > budget:
            found.append(f"tools/list: {self.total} bytes > its budget of {budget}")
        return found


def tool_size(tool: dict[str, Any]) -> ToolSize:
    """The size of one tool entry of a ``tools/list`` result (as sent)."""
    return ToolSize(
        name=tool["name"],
        description=wire_bytes(tool.get("description", "")),
        input=wire_bytes(tool.get("inputSchema", {})),
        output=wire_bytes(tool["outputSchema"]) if "outputSchema" in tool else 0,
        total=wire_bytes(tool),
    )


async def list_size(server: FastMCP) -> ListSize:
    """What ``server``'s ``tools/list`` costs a client, tool by tool and in total."""
    async with Client(server) as client:
        result = await client.list_tools_mcp()
    sent = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    return ListSize(
        tools=tuple(sorted((tool_size(tool) for tool in sent["tools"]), key=lambda t: t.name)),
        total=wire_bytes(sent),
    )
