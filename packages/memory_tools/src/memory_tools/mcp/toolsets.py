"""Which tools a server offers: named toolsets, chosen with ``--toolsets``, and ``--read-only``.

A :class:`Toolset` is a name a server accepts for some tools of one registry: ``memory`` (every
memory tool), ``memory-read`` (the memory tools whose spec is read-only), and, on the aggregate
server, ``scraper`` (declared by ``scraper_mcp``). A :class:`ToolSelection` is what one server
was started with: the chosen toolsets and whether only read-only tools are offered. Both are
decided from the registries' specs (``ToolSpec.read_only``), never from lists of names, so a tool
added later lands in the right toolsets by its decorator alone.

A tool that is not selected is not registered on the server: it is not listed, and fastmcp
answers a call to it as an unknown tool. A read-only server also refuses the plain HTTP writes
next to ``/mcp`` (direct uploads): ``MemoryServices.read_only``, checked by the workflow
(:func:`memory_tools.policy.require_writable`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memory_tools.mcp.registry import ToolRegistry, ToolSpec


@dataclass(frozen=True)
class Toolset:
    """A name ``--toolsets`` accepts: the tools of a registry (only its read-only ones if so).

    ``registry`` returns the registry when asked: the MCP layer (fastmcp) loads only then, so
    a command line naming toolsets is parsed without it.
    """

    name: str
    description: str
    registry: Callable[[], ToolRegistry]
    read_only_tools: bool = False

    def holds(self, spec: ToolSpec) -> bool:
        """Whether ``spec`` is one of this toolset's tools."""
        return spec in self.registry().specs and (spec.read_only or not self.read_only_tools)


def _memory_registry() -> ToolRegistry:
    from memory_tools.mcp.tools import tools

    return tools


MEMORY = Toolset("memory", "every memory tool", _memory_registry)
MEMORY_READ = Toolset(
    "memory-read", "the read-only memory tools", _memory_registry, read_only_tools=True
)
# The toolsets of the memory server; the aggregate server adds ``scraper_mcp``'s.
MEMORY_TOOLSETS = (MEMORY, MEMORY_READ)


@dataclass(frozen=True)
class ToolSelection:
    """The tools one server offers: those of ``toolsets``, only read-only ones if ``read_only``."""

    toolsets: tuple[Toolset, ...]
    read_only: bool = False

    def offers(self, spec: ToolSpec) -> bool:
        """Whether a server with this selection registers the tool of ``spec``."""
        if self.read_only and not spec.read_only:
            return False
        return any(toolset.holds(spec) for toolset in self.toolsets)

    def offered(self) -> tuple[ToolSpec, ...]:
        """The specs this selection offers, registry by registry, in declaration order."""
        registries: list[ToolRegistry] = []
        for toolset in self.toolsets:
            if toolset.registry() not in registries:
                registries.append(toolset.registry())
        return tuple(spec for r in registries for spec in r.specs if self.offers(spec))

    def arguments(self) -> list[str]:
        """The command-line options that select this again (for ``--processes`` children)."""
        chosen = ["--toolsets", ",".join(toolset.name for toolset in self.toolsets)]
        return [*chosen, "--read-only"] if self.read_only else chosen


# What the memory server offers without --toolsets.
MEMORY_SELECTION = ToolSelection((MEMORY,))


def select(
    names: Iterable[str], available: Sequence[Toolset], *, read_only: bool, server: str
) -> ToolSelection:
    """The selection named by ``names`` among ``available``; ``ValueError`` saying why not.

    ``server`` names the program in the message (``memory-server``); ``scraper`` asked of the
    memory server is refused with where it is served instead.
    """
    by_name = {toolset.name: toolset for toolset in available}
    chosen: list[Toolset] = []
    for raw in names:
        name = raw.strip()
        if name in by_name:
            if by_name[name] not in chosen:
                chosen.append(by_name[name])
            continue
        accepted = ", ".join(by_name)
        if name == "scraper":
            raise ValueError(
                f"'scraper': {server} serves no scraper tools (scraper-mcp-server does); "
                f"choose from {accepted}"
            )
        raise ValueError(f"{name!r} is not a toolset; choose from {accepted}")
    if not chosen:
        raise ValueError(f"name at least one toolset: {', '.join(by_name)}")
    return ToolSelection(tuple(chosen), read_only=read_only)
