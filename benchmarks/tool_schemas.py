"""What each server's ``tools/list`` costs an agent, tool by tool, against its byte budgets.

Builds the memory server and the aggregate (scraper) server on the documented default settings
(as ``make manifest`` does; no database is reached), lists their tools through a fastmcp
``Client`` and prints, per tool, the bytes of its description, input schema, output schema and
whole entry, with its budget; then each server's total with PASS or FAIL against its budget.
The measure and the budgets are ``scraper_mcp.schema_budget``'s: compact JSON in UTF-8 of the
``tools/list`` result as the client received it. ``tests/manifest/test_schema_budget.py``
holds the same budgets in the suite; docs/tools.md ("What tools/list costs") has the figures.

    python benchmarks/tool_schemas.py
"""

from __future__ import annotations

import argparse
import asyncio

from fastmcp import FastMCP

from memory_tools import build_memory_server
from scraper_mcp.aggregate import build_aggregate_server
from scraper_mcp.manifest import listing_services
from scraper_mcp.schema_budget import AGGREGATE_LIST_BUDGET, MEMORY_LIST_BUDGET, list_size


async def report(title: str, server: FastMCP, budget: int) -> None:
    """Print one server's tools and its total against ``budget``."""
    size = await list_size(server)
    print(f"\n{title}: {len(size.tools)} tools")
    print(f"  {'tool':<26} {'descr':>6} {'input':>6} {'output':>6} {'total':>6} {'budget':>6}")
    for tool in size.tools:
        verdict = "" if tool.budget is not None and tool.total <= tool.budget else "  FAIL"
        print(
            f"  {tool.name:<26} {tool.description:>6} {tool.input:>6} {tool.output:>6} "
            f"{tool.total:>6} {tool.budget or '-':>6}{verdict}"
        )
    descriptions = sum(tool.description for tool in size.tools)
    inputs = sum(tool.input for tool in size.tools)
    outputs = sum(tool.output for tool in size.tools)
    print(f"  {'all tools':<26} {descriptions:>6} {inputs:>6} {outputs:>6}")
    verdict = "PASS" if not size.over_budget(budget) else "FAIL"
    headroom = 100 * (budget - size.total) / budget
    print(
        f"{verdict} {title} tools/list: {size.total:,} bytes (~{size.total // 4:,} tokens) "
        f"<= {budget:,}, {headroom:.1f} % headroom; every tool within its budget"
    )
    for line in size.over_budget(budget):
        print(f"  FAIL {line}")


async def main() -> None:
    """Both servers, as ``make manifest`` lists them."""
    services = listing_services()
    try:
        await report("memory server", build_memory_server(services), MEMORY_LIST_BUDGET)
        await report("aggregate server", build_aggregate_server(services), AGGREGATE_LIST_BUDGET)
    finally:
        await services.database.close()


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    asyncio.run(main())
