"""``memory-server connect`` as a person runs it, and the key it makes used as the client would.

Each command is a real process on a migrated data directory, with ``HOME`` in the test's
temporary directory (no real client file is ever touched). The person and the listing of their
keys are made and read in-process (``memory_tools.testing.keys``): not the subject here. Bad
usage is parsed through the CLI's own ``main`` in-process, case by case, and once as a process. The configuration it writes is read
back and used exactly: the URL and the header of the file (its ``${env:...}`` filled from the
variable the output says to set) against a real ``memory-server serve``, and the command,
arguments and environment of Claude Desktop's stdio entry started the way a client starts it,
both through the official MCP SDK client.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from memory_server.cli import main
from memory_tools.testing.keys import list_keys, new_identity
from memory_tools.testing.mcp_http import free_port
from memory_tools.testing.processes import serving_http

pytestmark = pytest.mark.slow

SERVER = [sys.executable, "-m", "memory_server"]
OWNER = "agent@example.com"
# Generous: each command starts (and stops) the embedded PostgreSQL on a shared, loaded machine.
TIMEOUT = 120


@pytest.fixture
def shell(tmp_path: Path) -> dict[str, str]:
    """An operator's shell: HOME in the test's directory, a data directory there."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("ASSET_", "MEMORY_", "JINA_"))}
    home = tmp_path / "home"
    home.mkdir()
    return {
        **base,
        "HOME": str(home),
        "MEMORY_DATA_DIR": str(tmp_path / "data"),
        "ASSET_OCR": "off",
    }


@pytest.fixture
def env(shell: dict[str, str], embedded_data_dir: Path) -> dict[str, str]:
    """``shell`` with a migrated database and the identity ``OWNER``."""
    environment = {**shell, "MEMORY_DATA_DIR": str(embedded_data_dir)}
    new_identity(environment, OWNER)
    return environment


def _cli(
    env: dict[str, str], *args: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SERVER, *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        stdin=subprocess.DEVNULL,
    )


def _exported(stdout: str, variable: str) -> str:
    found = re.findall(rf"^  export {variable}=(mk_\S+)$", stdout, flags=re.MULTILINE)
    assert len(found) == 1, stdout
    return found[0]


def _key_id(stdout: str) -> str:
    found = re.match(r"key (akey_\w+) created for ", stdout)
    assert found is not None, stdout
    return found.group(1)


def _keys(env: dict[str, str]) -> list[dict[str, Any]]:
    """``OWNER``'s keys as ``admin list-keys --json`` lists them: label, scopes, revokedAt."""
    return [
        {"label": k.label, "scopes": list(k.scopes), "revokedAt": k.revoked_at}
        for k in list_keys(env, OWNER)
    ]


@contextmanager
def _serving(env: dict[str, str], tmp_path: Path, port: int) -> Iterator[None]:
    """``memory-server serve`` over HTTP on ``port`` until the block ends."""
    # TIMEOUT: its start, on a loaded machine.
    with serving_http(SERVER, env, port=port, seconds=TIMEOUT, log=tmp_path / "server.log"):
        yield


async def _vaults_over_http(url: str, headers: dict[str, str]) -> list[str]:
    async with (
        httpx2.AsyncClient(headers=headers, timeout=60) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        answer = await session.call_tool("image_vault_list", {})
        assert not answer.is_error, answer.content
        assert answer.structured_content is not None
        return [vault["vault"] for vault in answer.structured_content["vaults"]]


async def test_cursor_written_twice_then_used_by_an_mcp_client(
    env: dict[str, str], tmp_path: Path
) -> None:
    config = Path(env["HOME"]) / ".cursor" / "mcp.json"
    config.parent.mkdir()
    theirs = {"theme": "dark", "mcpServers": {"docs": {"url": "https://docs.example/mcp"}}}
    config.write_text(json.dumps(theirs), encoding="utf-8")
    port = free_port()
    url = f"http://127.0.0.1:{port}"

    # The server runs throughout, as when a person connects a client to their running server:
    # each command attaches to its database (starting the embedded PostgreSQL when no server
    # runs is what the other tests here do).
    with _serving(env, tmp_path, port):
        first = _cli(env, "connect", "cursor", "--owner", OWNER, "--write", "--url", url)
        assert first.returncode == 0, first.stderr
        written = json.loads(config.read_text(encoding="utf-8"))
        assert written == {
            "theme": "dark",
            "mcpServers": {
                "docs": {"url": "https://docs.example/mcp"},
                "image-memory": {
                    "url": f"{url}/mcp",
                    "headers": {"Authorization": "Bearer ${env:IMAGE_MEMORY_API_KEY}"},
                },
            },
        }
        backups = list(config.parent.glob("mcp.json.bak-*"))
        assert [json.loads(b.read_text(encoding="utf-8")) for b in backups] == [theirs]
        assert f"backup of the previous file: ~/.cursor/{backups[0].name}" in first.stdout
        first_key = _exported(first.stdout, "IMAGE_MEMORY_API_KEY")

        # A second run: the same file (it names the variable, not the key), a new key, and the
        # first key named as still working.
        second = _cli(env, "connect", "cursor", "--owner", OWNER, "--write", "--url", url)
        assert second.returncode == 0, second.stderr
        assert json.loads(config.read_text(encoding="utf-8")) == written
        assert len(list(config.parent.glob("mcp.json.bak-*"))) == 1  # unchanged: not rewritten
        key = _exported(second.stdout, "IMAGE_MEMORY_API_KEY")
        assert key != first_key
        assert "earlier keys labelled cursor@" in second.stdout
        assert _key_id(first.stdout) in second.stdout
        labels = {k["label"] for k in _keys(env)}
        assert len(labels) == 1 and labels.pop().startswith("cursor@")

        entry = written["mcpServers"]["image-memory"]
        headers = {
            name: value.replace("${env:IMAGE_MEMORY_API_KEY}", key)
            for name, value in entry["headers"].items()
        }
        assert await _vaults_over_http(entry["url"], headers) == ["Library"]

        # A third run revokes the earlier keys (with the running server's database): the
        # first key is refused from then on, the newest works.
        third = _cli(
            env, "connect", "cursor", "--owner", OWNER, "--write", "--url", url,
            "--revoke-previous", "--read-only",
        )  # fmt: skip
        assert third.returncode == 0, third.stderr
        assert "revoked the earlier keys labelled cursor@" in third.stdout
        newest = _exported(third.stdout, "IMAGE_MEMORY_API_KEY")
        refused = httpx.post(
            entry["url"], json={}, headers={"Authorization": f"Bearer {key}"}, timeout=30
        )
        assert refused.status_code == 401
        newest_headers = {"Authorization": f"Bearer {newest}"}
        assert await _vaults_over_http(entry["url"], newest_headers) == ["Library"]
        active = [k for k in _keys(env) if k["revokedAt"] is None]
        assert [k["scopes"] for k in active] == [["read"]]


async def test_claude_desktop_entry_starts_the_server_over_stdio(
    env: dict[str, str], tmp_path: Path
) -> None:
    done = _cli(env, "connect", "claude-desktop", "--owner", OWNER, "--write")
    assert done.returncode == 0, done.stderr
    config = Path(env["HOME"]) / ".config" / "Claude" / "claude_desktop_config.json"
    assert (config.stat().st_mode & 0o777) == 0o600
    assert "is not shown here" in done.stdout and "mk_" not in done.stdout
    entry = json.loads(config.read_text(encoding="utf-8"))["mcpServers"]["image-memory"]
    assert set(entry) == {"command", "args", "env"}
    assert entry["args"] == ["serve", "--transport", "stdio"]
    assert entry["env"]["MEMORY_DATA_DIR"] == env["MEMORY_DATA_DIR"]
    # As a desktop client starts it: from elsewhere, with its own small environment plus the
    # entry's (the SDK's default environment is what Claude Desktop passes too).
    parameters = StdioServerParameters(
        command=entry["command"], args=entry["args"], env={**entry["env"], "ASSET_OCR": "off"},
        cwd=str(tmp_path),
    )  # fmt: skip
    async with stdio_client(parameters) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        answer = await session.call_tool("image_vault_list", {})
        assert not answer.is_error, answer.content
        assert answer.structured_content is not None
        assert [v["vault"] for v in answer.structured_content["vaults"]] == ["Library"]


def test_a_file_that_is_not_json_is_refused_and_no_key_is_made(
    env: dict[str, str], tmp_path: Path
) -> None:
    config = tmp_path / "broken.json"
    config.write_text('{"mcpServers": {"docs": {}},}', encoding="utf-8")
    done = _cli(env, "connect", "windsurf", "--owner", OWNER, "--write", "--path", str(config))
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "not valid JSON" in lines[0] and "nothing was changed" in lines[0]
    assert config.read_text(encoding="utf-8") == '{"mcpServers": {"docs": {}},}'
    assert list(tmp_path.glob("broken.json*")) == [config]
    assert _keys(env) == []


def test_codex_project_file_in_the_current_directory(env: dict[str, str], tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    done = _cli(
        env, "connect", "codex", "--owner", OWNER, "--write", "--scope", "project", cwd=project
    )
    assert done.returncode == 0, done.stderr
    written = tomllib.loads((project / ".codex" / "config.toml").read_text(encoding="utf-8"))
    assert written == {
        "mcp_servers": {
            "image-memory": {
                "url": "http://127.0.0.1:8765/mcp",
                "bearer_token_env_var": "IMAGE_MEMORY_API_KEY",
            }
        }
    }
    assert not (Path(env["HOME"]) / ".codex").exists()


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["connect", "zed", "--owner", OWNER], "invalid choice: 'zed'"),
        (["connect", "claude-desktop", "--owner", OWNER, "--transport", "http"], "stdio only"),
        (["connect", "windsurf", "--owner", OWNER, "--scope", "project"], "--scope user"),
        (["connect", "generic", "--owner", OWNER, "--write"], "no configuration file"),
        (["connect", "cursor", "--owner", OWNER, "--url", "ftp://x"], "--url: an http(s) URL"),
        (["connect", "cursor", "--owner", OWNER, "--url", "http://u:p@x"], "credentials"),
        (["connect", "cursor", "--owner", OWNER, "--name", "a b"], "--name: 1 to 64"),
        (["connect", "cursor", "--owner", OWNER, "--path", "x.json"], "add --write"),
    ],
)
def test_bad_usage_is_one_error_and_changes_nothing(
    shell: dict[str, str], argv: list[str], says: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    # The CLI's own entry, in-process: the parsing and usage checks a process runs, without
    # a second of interpreter start per case (one real process below).
    for name in [name for name in os.environ if name.startswith(("ASSET_", "MEMORY_", "JINA_"))]:
        monkeypatch.delenv(name)
    for name in ("HOME", "MEMORY_DATA_DIR"):
        monkeypatch.setenv(name, shell[name])
    try:
        status = main(argv)
    except SystemExit as exited:  # argparse's own refusals
        status = exited.code
    said = capsys.readouterr()
    assert status == 2, said.err
    assert says in said.err
    assert said.out == ""
    assert list(Path(shell["HOME"]).iterdir()) == []
    assert not Path(shell["MEMORY_DATA_DIR"]).exists()  # refused before anything was opened


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        # argparse's refusal, then the command's own usage check.
        (["connect", "zed", "--owner", OWNER], "invalid choice: 'zed'"),
        (["connect", "cursor", "--owner", OWNER, "--url", "ftp://x"], "--url: an http(s) URL"),
    ],
)
def test_bad_usage_as_a_process_is_one_error_and_changes_nothing(
    shell: dict[str, str], argv: list[str], says: str
) -> None:
    done = _cli(shell, *argv)
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("memory-server") and says in last
    assert done.stdout == ""
    assert list(Path(shell["HOME"]).iterdir()) == []
    assert not Path(shell["MEMORY_DATA_DIR"]).exists()


def test_an_unknown_owner_is_refused_with_the_command_that_creates_it(
    env: dict[str, str],
) -> None:
    done = _cli(env, "connect", "cursor", "--owner", "nobody@example.com", "--write")
    assert done.returncode == 1
    assert "memory-server admin create-identity --owner nobody@example.com" in done.stderr
    assert list(Path(env["HOME"]).iterdir()) == []
