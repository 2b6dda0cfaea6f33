"""The desktop bundle installs and serves as a desktop host runs it.

The ``.mcpb`` is built as ``make bundle`` builds it (``scripts/stage_bundle.py``, then
``mcpb pack``) and opened into a clean directory by the official ``mcpb unpack``. Then the server
is started the two ways a host may start a ``uv`` bundle, with the manifest's environment after
substituting ``${__dirname}``, ``${HOME}`` and ``${user_config.*}`` as a host does (the user
gives only the API key; the data directory and database URL keep their defaults):

- the manifest's ``mcp_config`` command line (``uv run --directory ${__dirname} ...``);
- ``uv run ENTRY_POINT`` in the bundle's directory and nothing else, as a host that manages uv
  itself and ignores that command line does (the MCPB spec leaves it to the host).

The official MCP SDK client talks to it over stdio: it lists the manifest's tools, saves an
image and gets it, and the second start finds it again. The key is made beforehand by
``memory-server admin create-key`` with nothing but the same ``HOME``: the bundle's default data
directory must be the command's, or that key is unknown to the bundle's server. That ``HOME``
serves the module: its default data directory starts as a copy of the worker's migrated one
(initdb and the migrations are not the subject), and its person is made in-process.

Hermetic: its own ``HOME``; uv offline (``UV_OFFLINE``) from the cache ``make install`` filled,
with the Python running the tests (``UV_PYTHON``), so nothing is downloaded. Measured on the
shared 2-core machine under a load of 7-8: 94-105 s of wall time for the file, 27 s of CPU; by
hand, the first start (uv installs the locked runtime dependencies from its cache into a new
environment, the embedded PostgreSQL is created) answered ``initialize`` after 6 s.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from base64 import b64encode
from pathlib import Path
from typing import Any

import anyio
import pytest
import pyvips
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from memory_db.testing import copy_data_directory
from memory_tools.testing.keys import new_identity

pytestmark = [pytest.mark.slow, pytest.mark.mcpb]

ROOT = Path(__file__).resolve().parents[2]
MCPB = ROOT / "tools" / "mcpb" / "node_modules" / ".bin" / "mcpb"
OWNER = "desk@example.com"
# Generous: the first start installs the locked dependencies into a new environment and creates
# an embedded PostgreSQL, on a shared and loaded machine.
START_SECONDS = 300
# What a host's environment would not have: our settings, and uv's (a developer's UV_* would
# change how the bundle's uv behaves; the test sets what it needs).
DROPPED = ("ASSET_", "MEMORY_", "JINA_", "SCRAPER_", "UV_", "VIRTUAL_ENV", "XDG_DATA_HOME")


def _uv() -> str:
    """The uv the Makefile would use: on PATH, or the one `make uv` installs into the checkout."""
    found = shutil.which("uv") or str(ROOT / ".cache" / "tools" / "bin" / "uv")
    if not Path(found).exists():
        pytest.fail("no uv: `make test` installs it (make uv); put it on PATH to run this test")
    return found


def _run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False, **kwargs)
    assert done.returncode == 0, f"{argv}: {done.stdout}{done.stderr}"
    return done


def _substituted(value: str, variables: dict[str, str]) -> str:
    """``value`` with each ``${name}`` of ``variables`` replaced; an unknown one fails."""

    def replace(match: re.Match[str]) -> str:
        assert match.group(1) in variables, f"a host cannot substitute {match.group(0)}"
        return variables[match.group(1)]

    return re.sub(r"\$\{([^}]+)\}", replace, value)


def _host_variables(
    manifest: dict[str, Any], dirname: Path, home: Path, answers: dict[str, str]
) -> dict[str, str]:
    """What a host substitutes: ``__dirname``, ``HOME``, each user_config value or default."""
    variables = {"__dirname": str(dirname), "HOME": str(home)}
    for key, option in manifest["user_config"].items():
        if key in answers:
            value = answers[key]
        else:
            assert not option.get("required"), f"the host would ask for {key}"
            value = _substituted(str(option.get("default", "")), variables)
        variables[f"user_config.{key}"] = value
    return variables


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundle as ``make bundle`` packs it, unpacked into a clean directory by ``mcpb``."""
    if not MCPB.exists():
        pytest.fail("the MCPB CLI is missing: run `make deps-node`")
    work = tmp_path_factory.mktemp("bundle")
    _run([sys.executable, str(ROOT / "scripts" / "stage_bundle.py"), str(work / "stage")])
    packed = work / "image-memory.mcpb"
    _run([str(MCPB), "pack", str(work / "stage"), str(packed)])
    _run([str(MCPB), "unpack", str(packed), str(work / "installed")])
    return work / "installed"


def test_the_packed_bundle_holds_a_uv_project_and_no_environment(unpacked: Path) -> None:
    manifest = json.loads((unpacked / "manifest.json").read_text(encoding="utf-8"))
    server = manifest["server"]
    assert server["type"] == "uv"
    # What the MCPB spec requires of a uv bundle: the project uv installs, no bundled packages.
    for needed in ("pyproject.toml", "uv.lock", server["entry_point"]):
        assert (unpacked / needed).is_file(), needed
    for forbidden in (".venv", "server/lib", "server/venv", "tests", "tools", "benchmarks"):
        assert not (unpacked / forbidden).exists(), forbidden
    assert not list(unpacked.rglob("__pycache__"))
    done = _run([str(MCPB), "validate", str(unpacked / "manifest.json")])
    assert "Manifest schema validation passes!" in done.stdout


async def _serve(
    parameters: StdioServerParameters, errlog: Path, image: bytes | None = None
) -> dict[str, Any]:
    """Start the bundle, list its tools, save ``image`` if given; what was seen."""
    seen: dict[str, Any] = {}
    with errlog.open("w") as err, anyio.fail_after(START_SECONDS):
        async with (
            stdio_client(parameters, errlog=err) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            seen["tools"] = sorted(tool.name for tool in (await session.list_tools()).tools)
            listed = await session.call_tool("image_asset_list", {})
            assert not listed.is_error and listed.structured_content is not None
            seen["assets"] = listed.structured_content["items"]
            if image is not None:
                saved = await session.call_tool(
                    "image_asset_save",
                    {"imageBase64": b64encode(image).decode(), "title": "From the desktop"},
                )
                assert not saved.is_error and saved.structured_content is not None
                asset_id = saved.structured_content["assetId"]
                got = await session.call_tool("image_asset_get", {"assetId": asset_id})
                assert not got.is_error and got.structured_content is not None
                seen["saved"] = got.structured_content
    return seen


def _machine_env() -> dict[str, str]:
    """The environment a desktop host has: ours without our settings and this test's venv."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(DROPPED)}
    ours = str(Path(sys.prefix) / "bin")
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != ours)
    return env


def _host(
    manifest: dict[str, Any], unpacked: Path, home: Path, api_key: str
) -> tuple[dict[str, str], dict[str, str]]:
    """The variables a host substitutes and the environment it starts the server with.

    The user gave only the API key. The environment is the manifest's, substituted, over the
    machine's (without our settings), with the test's HOME, and uv held offline on the cache
    `make install` filled, with the Python running the tests standing for the host's.
    """
    base = _machine_env()
    mine = {k: v for k, v in os.environ.items() if k in ("UV_CACHE_DIR", "XDG_CACHE_HOME")}
    cache = _run([_uv(), "cache", "dir"], env={**base, **mine}).stdout.strip()
    variables = _host_variables(manifest, unpacked, home, {"api_key": api_key})
    configured = manifest["server"]["mcp_config"]["env"]
    return variables, {
        **base,
        "HOME": str(home),
        "UV_CACHE_DIR": cache,
        "UV_OFFLINE": "1",
        "UV_PYTHON": sys._base_executable,
        "UV_PYTHON_DOWNLOADS": "never",
        **{k: _substituted(v, variables) for k, v in configured.items()},
    }


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory, migrated_pgdata: Path) -> Path:
    """A user's ``HOME`` whose default data directory holds a migrated database and ``OWNER``."""
    home = tmp_path_factory.mktemp("desk") / "home"
    data = home / ".local" / "share" / "mcp-memory"
    data.parent.mkdir(parents=True)
    data.mkdir(mode=0o700)
    copy_data_directory(migrated_pgdata, data / "postgres")
    new_identity({"MEMORY_DATA_DIR": str(data)}, OWNER)
    return home


def _key(home: Path) -> str:
    """A read-write key made as the docs say, with nothing but the same HOME."""
    cli = [sys.executable, "-m", "memory_server", "admin"]
    env = {**_machine_env(), "HOME": str(home)}
    made = _run([*cli, "create-key", "--owner", OWNER, "--scopes", "read,write"], env=env)
    return made.stdout.strip().splitlines()[-1]


async def test_the_unpacked_bundle_serves_mcp_over_stdio_as_a_host_starts_it(
    unpacked: Path, home: Path, tmp_path: Path
) -> None:
    manifest = json.loads((unpacked / "manifest.json").read_text(encoding="utf-8"))
    variables, host_env = _host(manifest, unpacked, home, _key(home))
    config = manifest["server"]["mcp_config"]
    assert config["command"] == "uv"  # the host's own uv stands for it
    by_command_line = StdioServerParameters(
        command=_uv(), args=[_substituted(arg, variables) for arg in config["args"]], env=host_env
    )
    first = await _serve(by_command_line, tmp_path / "first.log", image=_image())

    listed = sorted(tool["name"] for tool in manifest["tools"])
    assert first["tools"] == listed
    assert first["assets"] == []
    saved = first["saved"]
    assert saved["title"] == "From the desktop" and saved["mimeType"] == "image/png"
    # Its data went where the manifest's default says, in the embedded PostgreSQL.
    data = home / ".local" / "share" / "mcp-memory"
    assert (data / "postgres").is_dir() and any((data / "objects").rglob("*"))
    said = (tmp_path / "first.log").read_text(encoding="utf-8")
    assert f"data directory {data} (database: embedded PostgreSQL)" in said

    # A host that runs the entry point itself, in the bundle's directory, with the same env.
    by_entry_point = StdioServerParameters(
        command=_uv(),
        args=["run", manifest["server"]["entry_point"]],
        env=host_env,
        cwd=unpacked,
    )
    second = await _serve(by_entry_point, tmp_path / "second.log")
    assert second["tools"] == listed
    assert [asset["assetId"] for asset in second["assets"]] == [saved["assetId"]]
    # UV_NO_DEV held: the workspace's dev tools were not installed into the bundle.
    site = next((unpacked / ".venv" / "lib").glob("python*/site-packages"))
    assert list(site.glob("aggregate_server-*.dist-info")) and not (site / "pytest").exists()


async def test_a_key_the_database_does_not_know_stops_the_start_naming_the_setting(
    unpacked: Path, home: Path
) -> None:
    manifest = json.loads((unpacked / "manifest.json").read_text(encoding="utf-8"))
    variables, env = _host(manifest, unpacked, home, "mk_" + "x" * 40)
    config = manifest["server"]["mcp_config"]
    done = subprocess.run(
        [_uv(), *(_substituted(arg, variables) for arg in config["args"])],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=START_SECONDS,
        check=False,
    )
    # What the host's log shows: one line naming the setting, and nothing on the protocol.
    assert done.returncode == 2, done.stderr
    assert "MEMORY_API_KEY:" in done.stderr
    assert done.stdout == ""


def _image() -> bytes:
    xyz = pyvips.Image.xyz(64, 48)
    red = ((xyz[0] * 4) % 256).cast("uchar")
    green = ((xyz[1] * 5) % 256).cast("uchar")
    return red.bandjoin([green, red]).copy(interpretation="srgb").pngsave_buffer()
