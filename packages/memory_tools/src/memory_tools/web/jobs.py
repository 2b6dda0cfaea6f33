"""The web app's jobs pages (docs/web.md)."""

from __future__ import annotations

from starlette.routing import Route

from memory_tools.services import MemoryServices


def routes(services: MemoryServices) -> list[Route]:
    """The routes of this page group."""
    return []
