"""What each server lists over MCP, as data: the tool manifest, the parity check and the bundle.

Everything here is read from a built server through a fastmcp ``Client`` (``tools/list``), never
from the registries directly: what a client is told is what is compared and published.

- :func:`listed_tools`: a server's tools in the dereferenced wire view (camelCase, as sent),
  without fastmcp's own ``_meta.fastmcp`` entry, sorted by name;
- :func:`memory_tool_differences`: how the memory tools of two listings differ (the parity
  test: the aggregate server must list the memory tools exactly as the memory server does);
- :func:`tool_manifest`: both servers with their default toolsets, for
  ``docs/mcp-tool-manifest.generated.json``;
- :func:`bundle_manifest`: the MCPB ``manifest.json`` of the aggregate server for desktop
  clients (``bundle/manifest.json``), its tool list taken from the tool manifest.

``make manifest`` writes both files (``scripts/write_manifest.py``); a test regenerates them and
fails when the committed ones are stale. The servers are built on the documented default
settings, whatever the environment says, so the files do not depend on the machine.
"""

from __future__ import annotations

import hashlib
import json
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastmcp import Client, FastMCP

from memory_db import Database, MemorySettings
from memory_db.database import create_engine
from memory_db.storage import InMemoryAssetObjectStore, UrlSigner
from memory_tools import MemoryServices, build_memory_server
from memory_tools.mcp.for_scrapers import MEMORY_SELECTION, ToolSelection
from scraper_mcp.aggregate import AGGREGATE_SELECTION, build_aggregate_server

if TYPE_CHECKING:
    from mcp_types import Tool as ListedTool

TOOL_MANIFEST_PATH = Path("docs/mcp-tool-manifest.generated.json")
BUNDLE_MANIFEST_PATH = Path("bundle/manifest.json")
# The MCPB manifest version whose schema has the "uv" server type.
MCPB_MANIFEST_VERSION = "0.4"
# Listing tools never opens a connection: the database address only has to parse.
_UNCONNECTED = "postgresql+asyncpg://manifest@127.0.0.1:9/unconnected"


def wire_view(tools: list[ListedTool]) -> list[dict[str, Any]]:
    """Listed tools as sent (camelCase, no nulls), without ``_meta.fastmcp``, sorted by name."""
    view: list[dict[str, Any]] = []
    for tool in sorted(tools, key=lambda listed: listed.name):
        wire = tool.model_dump(mode="json", by_alias=True, exclude_none=True)
        meta = dict(wire.pop("_meta", None) or {})
        meta.pop("fastmcp", None)
        if meta:
            wire["_meta"] = meta
        view.append(wire)
    return view


async def listed_tools(server: FastMCP) -> list[dict[str, Any]]:
    """What ``server`` answers to ``tools/list``, in the wire view of :func:`wire_view`."""
    async with Client(server) as client:
        return wire_view(await client.list_tools())


def memory_tool_differences(
    memory: list[dict[str, Any]], aggregate: list[dict[str, Any]]
) -> list[str]:
    """How the aggregate's memory tools differ from the memory server's; empty when they match.

    The memory tools are the tools the memory server lists; the aggregate must list each of
    them identically (name, title, description, schemas, annotations) and no other
    ``image_`` tool. Each difference is one line a test can show.
    """
    ours = {tool["name"]: tool for tool in memory}
    theirs = {tool["name"]: tool for tool in aggregate}
    found: list[str] = []
    for name in sorted(ours.keys() - theirs.keys()):
        found.append(f"{name}: listed by the memory server only")
    extra = {name for name in theirs.keys() - ours.keys() if name.startswith("image_")}
    for name in sorted(extra):
        found.append(f"{name}: an image_ tool the memory server does not list")
    for name in sorted(ours.keys() & theirs.keys()):
        found.extend(f"{name}: {change}" for change in _changes(ours[name], theirs[name], ""))
    return found


def _changes(ours: Any, theirs: Any, at: str) -> list[str]:
    """Where two JSON values differ: ``path: memory server's value != aggregate's``."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        changes: list[str] = []
        for key in sorted(ours.keys() | theirs.keys()):
            inner = f"{at}.{key}" if at else str(key)
            if key not in theirs:
                changes.append(f"{inner}: missing from the aggregate")
            elif key not in ours:
                changes.append(f"{inner}: only on the aggregate")
            else:
                changes.extend(_changes(ours[key], theirs[key], inner))
        return changes
    if ours == theirs:
        return []
    return [f"{at}: {json.dumps(ours)[:200]} != {json.dumps(theirs)[:200]}"]


def documented_settings() -> MemorySettings:
    """The settings every default is documented with, ignoring the environment."""
    defaults = {
        name: field.get_default(call_default_factory=True)
        for name, field in MemorySettings.model_fields.items()
        if not field.is_required()
    }
    return MemorySettings(**defaults)


def listing_services(settings: MemorySettings | None = None) -> MemoryServices:
    """Services enough to build and list a server: no database is ever reached."""
    return MemoryServices(
        database=Database(create_engine(_UNCONNECTED)),
        store=InMemoryAssetObjectStore(UrlSigner(hashlib.sha256(b"manifest").digest())),
        settings=settings or documented_settings(),
    )


def _server_entry(
    command: str, name: str, tools: ToolSelection, listed: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "command": command,
        "name": name,
        "toolsets": [toolset.name for toolset in tools.toolsets],
        "tools": listed,
    }


async def tool_manifest() -> dict[str, Any]:
    """Both servers as they list their tools with their default toolsets and settings."""
    services = listing_services()
    try:
        memory = await listed_tools(build_memory_server(services))
        aggregate = await listed_tools(build_aggregate_server(services))
    finally:
        await services.database.close()
    return {
        "generatedBy": "make manifest",
        "servers": [
            _server_entry("memory-server serve", "image-memory", MEMORY_SELECTION, memory),
            _server_entry(
                "scraper-mcp-server serve", "mcp-scraper", AGGREGATE_SELECTION, aggregate
            ),
        ],
    }


# The bundle's entry point (bundle/server.py in the tree): `scraper-mcp-server serve --transport
# stdio`, whatever arguments the host gives.
BUNDLE_ENTRY_POINT = "bundle/server.py"
# Where the data lives unless the user picks another directory: the CLI's own default
# (MemorySettings.memory_data_dir without XDG_DATA_HOME), so `memory-server admin create-key`
# run in a terminal writes its key into the database the bundle then opens.
BUNDLE_DEFAULT_DATA_DIR = "${HOME}/.local/share/mcp-memory"
# What the host machine needs, said in the manifest (and docs/runbooks/desktop-bundle.md): the
# oldest platforms every locked runtime wheel covers (tesserocr: macosx_15_0_arm64; onnxruntime
# has no Intel-Mac wheel; onnxruntime, pyvips-binary: manylinux_2_28), measured sizes.
BUNDLE_REQUIREMENTS = (
    'Needs a host that runs MCPB "uv" bundles (manifest 0.4; e.g. Claude Desktop with its '
    "uv runtime) or uv on the PATH, on macOS 15 or later on Apple silicon or on Linux "
    "(x86-64 or arm64, glibc 2.28 or later); Intel Macs and Windows are not supported. The "
    "first start downloads the locked dependencies (about 200 MB; 600 MB installed) and, if "
    "needed, Python 3.11. OCR needs Tesseract's language data and page screenshots need "
    "Chromium on the machine; without them those two features do not work, and the rest does."
)


def bundle_manifest(tools: dict[str, Any]) -> dict[str, Any]:
    """The MCPB ``manifest.json`` of the aggregate server, its tools from ``tools``.

    A ``uv`` server (MCPB manifest 0.4): the bundle is this workspace's tracked tree
    (``make bundle``) and holds no environment; the host installs the locked dependencies with
    uv and runs :data:`BUNDLE_ENTRY_POINT` over stdio. ``mcp_config`` says the same as a command
    line for hosts that use it (``uv run --directory ${__dirname} --frozen --no-dev ...``) and
    carries the environment every host passes: the API key (sensitive) as ``MEMORY_API_KEY``,
    the data directory as ``MEMORY_DATA_DIR``, the optional database URL (sensitive; empty: the
    embedded PostgreSQL in the data directory) as ``MEMORY_DATABASE_URL``.
    """
    aggregate = next(s for s in tools["servers"] if s["name"] == "mcp-scraper")
    return {
        "manifest_version": MCPB_MANIFEST_VERSION,
        "name": "image-memory",
        "display_name": "Image memory",
        "version": version("scraper-mcp"),
        "description": "Save, organise and find images again; scrape images from web pages.",
        "long_description": (
            "The aggregate MCP server of the image memory: the memory tools (save images by "
            "URL or base64, organise them in vaults, projects and folders, find them by words "
            "or by a similar image) and the scraper tools. It runs locally over stdio as the "
            "identity of your API key (create one with `memory-server admin create-key`), on "
            "the embedded PostgreSQL in its data directory unless you give a database URL.\n\n"
            + BUNDLE_REQUIREMENTS
        ),
        "author": {"name": "Image memory contributors"},
        "keywords": ["images", "memory", "search", "scraper", "mcp"],
        "server": {
            "type": "uv",
            "entry_point": BUNDLE_ENTRY_POINT,
            "mcp_config": {
                "command": "uv",
                "args": [
                    "run",
                    "--directory",
                    "${__dirname}",
                    "--frozen",
                    "--no-dev",
                    BUNDLE_ENTRY_POINT,
                ],
                # UV_FROZEN, UV_NO_DEV: the same as the flags above, for a host that runs
                # `uv run ENTRY_POINT` itself with this environment: the locked versions, and
                # not the workspace's dev tools (about 800 MB more).
                "env": {
                    "UV_FROZEN": "1",
                    "UV_NO_DEV": "1",
                    "MEMORY_API_KEY": "${user_config.api_key}",
                    "MEMORY_DATA_DIR": "${user_config.data_directory}",
                    "MEMORY_DATABASE_URL": "${user_config.database_url}",
                },
            },
        },
        "user_config": {
            "api_key": {
                "type": "string",
                "title": "API key",
                "description": "Your image memory API key (mk_...); the server acts as its "
                "identity. Make one with `memory-server admin create-key`.",
                "sensitive": True,
                "required": True,
            },
            "data_directory": {
                "type": "directory",
                "title": "Data directory",
                "description": "Where images and the embedded database live (MEMORY_DATA_DIR); "
                "the default is the memory-server command's.",
                "required": False,
                "default": BUNDLE_DEFAULT_DATA_DIR,
            },
            "database_url": {
                "type": "string",
                "title": "Database URL",
                "description": "MEMORY_DATABASE_URL of a PostgreSQL with pgvector; leave empty "
                "for the embedded database in the data directory.",
                "sensitive": True,
                "required": False,
                "default": "",
            },
        },
        "tools": [
            {"name": tool["name"], "description": tool.get("description", "")}
            for tool in aggregate["tools"]
        ],
        "tools_generated": False,
        "compatibility": {"platforms": ["darwin", "linux"], "runtimes": {"python": ">=3.11,<3.12"}},
    }


def render(document: dict[str, Any]) -> str:
    """A manifest as committed: JSON with sorted keys, two-space indents, a final newline."""
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


async def rendered_manifests() -> dict[Path, str]:
    """Every generated file, by its path in the repository, as ``make manifest`` writes it."""
    tools = await tool_manifest()
    return {
        TOOL_MANIFEST_PATH: render(tools),
        BUNDLE_MANIFEST_PATH: render(bundle_manifest(tools)),
    }
