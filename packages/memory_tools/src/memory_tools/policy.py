"""Feature switches, enforced by the workflows themselves (below every adapter).

``ASSET_FEATURE_ENABLED=false`` switches image memory off: every workflow answers
``feature_disabled``, whichever adapter calls it (MCP tools, the direct-upload routes, anything
added later). ``ASSET_SEARCH_ENABLED=false`` switches search alone off. Each workflow entry point
calls :func:`require` once, before it reads or changes anything; adapters only render the
``FeatureDisabled`` failure in their own format (a tool error, a JSON error with status 503).

A server started with ``--read-only`` offers only read-only tools; every workflow that changes
something also calls :func:`require_writable`, because other routes reach it (the direct
uploads, the web app), so a read-only server refuses it with ``forbidden`` (HTTP 403).
"""

from __future__ import annotations

from typing import Literal

from memory_db import MemorySettings
from memory_tools.errors import FeatureDisabled, Forbidden

Feature = Literal["memory", "search"]


def require(settings: MemorySettings, feature: Feature = "memory") -> None:
    """Raise ``FeatureDisabled`` unless ``feature`` (and image memory itself) is switched on."""
    if not settings.asset_feature_enabled:
        raise FeatureDisabled("image memory is switched off (ASSET_FEATURE_ENABLED=false)")
    if feature == "search" and not settings.asset_search_enabled:
        raise FeatureDisabled("image search is switched off (ASSET_SEARCH_ENABLED=false)")


def require_writable(read_only: bool) -> None:
    """Raise ``Forbidden`` on a read-only server (``MemoryServices.read_only``)."""
    if read_only:
        raise Forbidden("this server is read-only (started with --read-only): it changes nothing")
