"""What the scraper tools (``scraper_mcp``) build on: their one door into ``memory_tools``.

``scraper_mcp`` adds tools to the memory server: declared with the same registry, run through
the same call runner, fetching through the same URL and address policy and saving through the
same save plan. It imports ``memory_tools`` only from here and from the package root (the
services, the caller and its vault check, the failures every adapter knows);
``scripts/check_layering.py`` holds it to that. So what the scraper relies on is listed in one
place: a new need is added here, in the open, instead of being reached for in a module whose
insides may change.

What it holds, by use:

- declaring tools, running them as the caller and offering them beside the memory tools: the
  registry (``ToolRegistry``, ``ToolSpec``), ``run_as_caller`` and the toolsets;
- the feature switches (``policy``), the key's scopes and the failures beyond the root's;
- fetching under the server's URL and address policy (``check_url``, ``Download`` ...);
- saving what was found: an asset through the save plan, or an artifact;
- answers and images: the wire models and the thumbnail maker (``shrink``).

It lives beside the MCP adapter because the scraper is an MCP tool package: its tools are
offered, admitted and refused exactly like the memory tools.
"""

from memory_tools import policy
from memory_tools.access import require_scope
from memory_tools.errors import FetchFailed, NotHtml, UnsafeUrl, translate
from memory_tools.ingest.fetch import (
    MAX_URL_LENGTH,
    FetchedBody,
    FetchPolicy,
    check_url,
    follow_redirects,
    redirect_location,
    request_failures,
)
from memory_tools.ingest.images import lock_down_libvips
from memory_tools.ingest.inputs import MAX_SOURCE_REF_BYTES, scrub_url
from memory_tools.ingest.save import AssetSaver, SaveRequest, check_placement
from memory_tools.ingest.sources import Download
from memory_tools.mcp.registry import ToolRegistry, ToolSpec
from memory_tools.mcp.tools import run_as_caller
from memory_tools.mcp.toolsets import (
    MEMORY,
    MEMORY_SELECTION,
    MEMORY_TOOLSETS,
    ToolSelection,
    Toolset,
)
from memory_tools.wire import Thumbnail, WireModel
from memory_tools.workflows.artifacts import ArtifactSourceKind, ArtifactView, store_artifact
from memory_tools.workflows.thumbnails import shrink

__all__ = [
    "MAX_SOURCE_REF_BYTES",
    "MAX_URL_LENGTH",
    "MEMORY",
    "MEMORY_SELECTION",
    "MEMORY_TOOLSETS",
    "ArtifactSourceKind",
    "ArtifactView",
    "AssetSaver",
    "Download",
    "FetchFailed",
    "FetchPolicy",
    "FetchedBody",
    "NotHtml",
    "SaveRequest",
    "Thumbnail",
    "ToolRegistry",
    "ToolSelection",
    "ToolSpec",
    "Toolset",
    "UnsafeUrl",
    "WireModel",
    "check_placement",
    "check_url",
    "follow_redirects",
    "lock_down_libvips",
    "policy",
    "redirect_location",
    "request_failures",
    "require_scope",
    "run_as_caller",
    "scrub_url",
    "shrink",
    "store_artifact",
    "translate",
]
