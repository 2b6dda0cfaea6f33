"""The committed tool manifest and MCPB bundle are what the servers list now, and valid.

``docs/mcp-tool-manifest.generated.json`` and ``bundle/manifest.json`` are regenerated here,
in-process, exactly as ``make manifest`` writes them; a difference fails with the command that
brings them up to date. The bundle is validated by the official MCPB CLI (``mcpb validate``,
pinned in tools/mcpb and installed by ``make deps-node``).
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from memory_tools.mcp.tools import tools as memory_registry
from scraper_mcp.manifest import (
    BUNDLE_MANIFEST_PATH,
    TOOL_MANIFEST_PATH,
    bundle_manifest,
    render,
    rendered_manifests,
    tool_manifest,
)

ROOT = Path(__file__).resolve().parents[2]
MCPB = ROOT / "tools" / "mcpb" / "node_modules" / ".bin" / "mcpb"


async def test_the_committed_manifests_are_what_the_servers_list_now() -> None:
    rendered = await rendered_manifests()
    assert set(rendered) == {TOOL_MANIFEST_PATH, BUNDLE_MANIFEST_PATH}
    for path, text in rendered.items():
        committed = (ROOT / path).read_text(encoding="utf-8")
        assert committed == text, f"{path} is stale: run `make manifest` and commit the result"


async def test_the_manifest_holds_each_servers_listing() -> None:
    manifest = await tool_manifest()
    servers = {server["name"]: server for server in manifest["servers"]}
    memory, aggregate = servers["image-memory"], servers["mcp-scraper"]
    assert memory["toolsets"] == ["memory"] and aggregate["toolsets"] == ["memory", "scraper"]
    names = [tool["name"] for tool in memory["tools"]]
    assert names == sorted(spec.name for spec in memory_registry.specs)
    for tool in memory["tools"]:
        assert {"name", "title", "description", "inputSchema", "outputSchema"} <= tool.keys()
        # All four hints, and the title once: the tool's own (not again in its annotations).
        hints = {"readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"}
        assert hints == tool["annotations"].keys()
        assert "fastmcp" not in tool.get("_meta", {})
    # The aggregate lists every memory tool as the memory server does.
    listed = {tool["name"]: tool for tool in aggregate["tools"]}
    assert all(listed[tool["name"]] == tool for tool in memory["tools"])


def _validate(manifest: dict[str, Any], directory: Path) -> subprocess.CompletedProcess[str]:
    if not MCPB.exists():
        raise RuntimeError("the MCPB validator is missing: run `make deps-node`")
    if shutil.which("node") is None:
        raise RuntimeError("the MCPB validator needs Node.js on PATH")
    path = directory / "manifest.json"
    path.write_text(render(manifest), encoding="utf-8")
    return subprocess.run(
        [str(MCPB), "validate", str(path)], capture_output=True, text=True, timeout=60
    )


@pytest.mark.mcpb
async def test_the_bundle_is_valid_for_the_official_validator(tmp_path: Path) -> None:
    committed = json.loads((ROOT / BUNDLE_MANIFEST_PATH).read_text(encoding="utf-8"))
    done = _validate(committed, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Manifest schema validation passes!" in done.stdout


@pytest.mark.mcpb
@pytest.mark.parametrize(
    ("field", "value"),
    [("server.type", "uvx"), ("user_config.api_key.sensitive", "yes"), ("author", None)],
)
async def test_the_validator_refuses_a_broken_bundle(
    tmp_path: Path, field: str, value: object
) -> None:
    # The check above can fail: the same validator refuses these mutations of the bundle.
    broken = copy.deepcopy(bundle_manifest(await tool_manifest()))
    *parents, last = field.split(".")
    target = broken
    for part in parents:
        target = target[part]
    if value is None:
        del target[last]
    else:
        target[last] = value
    done = _validate(broken, tmp_path)
    assert done.returncode != 0 and "validation failed" in done.stdout, done.stdout


async def test_the_bundle_runs_the_aggregate_server_as_the_configured_key() -> None:
    tools = await tool_manifest()
    bundle = bundle_manifest(tools)
    server = bundle["server"]
    assert server["type"] == "uv" and (ROOT / server["entry_point"]).is_file()
    config = server["mcp_config"]
    assert config["command"] == "uv"
    assert config["args"][:3] == ["run", "--directory", "${__dirname}"]
    assert config["args"][-1] == server["entry_point"]
    # The same for a host that runs `uv run ENTRY_POINT` itself: locked, no dev tools.
    assert {"UV_FROZEN": "1", "UV_NO_DEV": "1"}.items() <= config["env"].items()
    assert config["env"]["MEMORY_API_KEY"] == "${user_config.api_key}"
    assert config["env"]["MEMORY_DATA_DIR"] == "${user_config.data_directory}"
    assert config["env"]["MEMORY_DATABASE_URL"] == "${user_config.database_url}"
    options = bundle["user_config"]
    assert options["api_key"]["sensitive"] is True and options["api_key"]["required"] is True
    assert options["database_url"]["sensitive"] is True and options["database_url"]["default"] == ""
    # The data directory's default is the memory-server command's (without XDG_DATA_HOME).
    data = options["data_directory"]
    assert data["type"] == "directory" and not data["required"]
    assert data["default"] == "${HOME}/.local/share/mcp-memory"
    # Its tool list is the aggregate server's, as the generated manifest lists it.
    aggregate = next(s for s in tools["servers"] if s["name"] == "mcp-scraper")
    assert bundle["tools"] == [
        {"name": tool["name"], "description": tool["description"]} for tool in aggregate["tools"]
    ]
