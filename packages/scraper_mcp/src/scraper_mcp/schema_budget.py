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

# Per-tool budgets, in bytes of the tool's entry: its size when set (in the comment) plus a
# margin of 60-170 bytes; image_asset_list and image_asset_search (which take every filter) have
# about 350 more for the filters being added this session. They added up to 23,500. The list
# measured 21,147 bytes when they were set: 2,853 bytes (11.9 %) of headroom under
# MEMORY_LIST_BUDGET, which the list's own check holds whatever the per-tool budgets say.
# Near-duplicates (issue 35: image_asset_duplicates, nearDuplicates on get, save and update,
# save's waitSeconds) took about 1,350 bytes of that headroom; the budgets still add up to at
# most MEMORY_LIST_BUDGET, so the margins of the tools this session leaves alone were cut to
# about 30 bytes.
MEMORY_TOOL_BUDGETS: dict[str, int] = {
    "image_asset_delete": 700,  # 627
    "image_asset_duplicates": 1_000,  # 985
    "image_asset_enrich": 850,  # 763
    "image_asset_get": 1_980,  # 1,797; 1,963 with nearDuplicates (issue 35)
    "image_asset_list": 2_500,  # 2,119
    "image_asset_move": 900,  # 775
    "image_asset_restore": 760,  # 660
    "image_asset_save": 2_280,  # 2,038; 2,268 with waitSeconds and nearDuplicates (issue 35)
    "image_asset_search": 3_200,  # 2,856
    "image_asset_update": 1_620,  # 1,426; 1,592 with nearDuplicates (as get shows it)
    "image_folder_create": 990,  # 952
    "image_folder_delete": 1_110,  # 1,089
    "image_folder_list": 880,  # 853
    "image_folder_update": 1_140,  # 1,116
    "image_project_archive": 820,  # 784
    "image_project_create": 840,  # 803
    "image_project_list": 760,  # 721
    "image_project_update": 1_030,  # 1,004
    "image_vault_list": 620,  # 589
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
