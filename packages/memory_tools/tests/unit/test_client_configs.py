"""Each client's configuration as ``connect`` writes it, parsed back, and how a file is merged.

The shapes asserted here are the clients' own (memory_tools.serving.client_configs names the
documentation each follows): a file is parsed with ``json`` or ``tomllib``, a command line with
``shlex`` as a POSIX shell splits it.
"""

from __future__ import annotations

import json
import shlex
import stat
import tomllib
from pathlib import Path
from typing import Any

import pytest

from memory_tools.errors import InvalidInputFailure
from memory_tools.serving.client_configs import (
    CLIENTS,
    Connection,
    Places,
    Scope,
    Transport,
    client_setup,
    unsupported,
)
from memory_tools.serving.config_files import merged_text, read_config, write_config
from memory_tools.serving.connect_command import key_label, mcp_endpoint

KEY = "mk_secretsecretsecret"
URL = "http://127.0.0.1:8765/mcp"
STDIO = ("/opt/memory/.venv/bin/memory-server", "serve", "--transport", "stdio")
DATA = {"MEMORY_DATA_DIR": "/srv/memory"}


def _places(tmp_path: Path, platform: str = "linux", **environ: str) -> Places:
    return Places(tmp_path / "home", tmp_path / "project", platform, environ)


def _setup(
    tmp_path: Path,
    client: str,
    transport: Transport = "http",
    scope: Scope = "user",
    name: str = "image-memory",
) -> Any:
    connection = Connection(name, URL, KEY, STDIO, DATA, transport, scope)
    return client_setup(client, connection, _places(tmp_path))


def _parsed(setup: Any) -> dict[str, Any]:
    text = setup.snippet()
    return tomllib.loads(text) if setup.file_format == "toml" else json.loads(text)


# --- each client's shape ----------------------------------------------------------------------


def test_claude_code_user_file_and_command(tmp_path: Path) -> None:
    setup = _setup(tmp_path, "claude-code")
    assert setup.path == tmp_path / "home" / ".claude.json"
    assert _parsed(setup) == {
        "mcpServers": {
            "image-memory": {
                "type": "http",
                "url": URL,
                "headers": {"Authorization": f"Bearer {KEY}"},
            }
        }
    }
    assert setup.holds_secret and not setup.variables
    assert shlex.split(setup.command_line()) == [
        "claude", "mcp", "add", "--transport", "http", "--scope", "user", "image-memory", URL,
        "--header", f"Authorization: Bearer {KEY}",
    ]  # fmt: skip


def test_claude_code_project_file_names_the_variable_never_the_key(tmp_path: Path) -> None:
    setup = _setup(tmp_path, "claude-code", scope="project")
    assert setup.path == tmp_path / "project" / ".mcp.json"
    entry = _parsed(setup)["mcpServers"]["image-memory"]
    assert entry["headers"] == {"Authorization": "Bearer ${IMAGE_MEMORY_API_KEY}"}
    assert KEY not in setup.snippet() and KEY not in setup.command_line()
    assert setup.variables == {"IMAGE_MEMORY_API_KEY": KEY} and not setup.holds_secret
    # Single-quoted: the shell passes the reference through for Claude Code to expand.
    assert shlex.split(setup.command_line())[-1] == "Authorization: Bearer ${IMAGE_MEMORY_API_KEY}"


def test_claude_code_stdio_command(tmp_path: Path) -> None:
    setup = _setup(tmp_path, "claude-code", transport="stdio")
    assert _parsed(setup)["mcpServers"]["image-memory"] == {
        "type": "stdio",
        "command": STDIO[0],
        "args": list(STDIO[1:]),
        "env": {"MEMORY_API_KEY": KEY, **DATA},
    }
    assert shlex.split(setup.command_line()) == [
        "claude", "mcp", "add", "--scope", "user", "image-memory",
        f"--env=MEMORY_API_KEY={KEY}", "--env=MEMORY_DATA_DIR=/srv/memory", "--", *STDIO,
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("platform", "environ", "folder"),
    [
        ("linux", {}, "home/.config/Claude"),
        ("darwin", {}, "home/Library/Application Support/Claude"),
        ("win32", {"APPDATA": "APPDATA-DIR"}, "APPDATA-DIR/Claude"),
    ],
)
def test_claude_desktop_is_stdio_in_its_platform_folder(
    tmp_path: Path, platform: str, environ: dict[str, str], folder: str
) -> None:
    environ = {k: str(tmp_path / v) for k, v in environ.items()}
    connection = Connection("image-memory", URL, KEY, STDIO, DATA, "stdio")
    setup = client_setup("claude-desktop", connection, _places(tmp_path, platform, **environ))
    assert setup.path == tmp_path / folder / "claude_desktop_config.json"
    assert _parsed(setup) == {
        "mcpServers": {
            "image-memory": {
                "command": STDIO[0],
                "args": list(STDIO[1:]),
                "env": {"MEMORY_API_KEY": KEY, **DATA},
            }
        }
    }
    assert setup.holds_secret and setup.command is None


def test_cursor_refers_to_the_environment(tmp_path: Path) -> None:
    setup = _setup(tmp_path, "cursor")
    assert setup.path == tmp_path / "home" / ".cursor" / "mcp.json"
    assert _parsed(setup) == {
        "mcpServers": {
            "image-memory": {
                "url": URL,
                "headers": {"Authorization": "Bearer ${env:IMAGE_MEMORY_API_KEY}"},
            }
        }
    }
    assert setup.variables == {"IMAGE_MEMORY_API_KEY": KEY} and not setup.holds_secret
    project = _setup(tmp_path, "cursor", scope="project", transport="stdio")
    assert project.path == tmp_path / "project" / ".cursor" / "mcp.json"
    assert _parsed(project)["mcpServers"]["image-memory"]["env"] == {
        "MEMORY_API_KEY": "${env:IMAGE_MEMORY_API_KEY}",
        **DATA,
    }


def test_vscode_asks_for_the_key_through_an_input(tmp_path: Path) -> None:
    setup = _setup(tmp_path, "vscode")
    assert setup.path == tmp_path / "home" / ".config" / "Code" / "User" / "mcp.json"
    assert _parsed(setup) == {
        "servers": {
            "image-memory": {
                "type": "http",
                "url": URL,
                "headers": {"Authorization": "Bearer ${input:image-memory-api-key}"},
            }
        },
        "inputs": [
            {
                "type": "promptString",
                "id": "image-memory-api-key",
                "description": "API key of image-memory (mk_...)",
                "password": True,
            }
        ],
    }
    argv = shlex.split(setup.command_line())
    assert argv[:2] == ["code", "--add-mcp"]
    assert json.loads(argv[2]) == {
        "name": "image-memory",
        "type": "http",
        "url": URL,
        "headers": {"Authorization": f"Bearer {KEY}"},
    }
    assert _setup(tmp_path, "vscode", scope="project").path == (
        tmp_path / "project" / ".vscode" / "mcp.json"
    )


def test_codex_reads_the_bearer_token_from_a_variable(tmp_path: Path) -> None:
    setup = _setup(tmp_path, "codex")
    assert setup.path == tmp_path / "home" / ".codex" / "config.toml"
    assert _parsed(setup) == {
        "mcp_servers": {
            "image-memory": {"url": URL, "bearer_token_env_var": "IMAGE_MEMORY_API_KEY"}
        }
    }
    assert KEY not in setup.snippet() and setup.variables == {"IMAGE_MEMORY_API_KEY": KEY}
    assert shlex.split(setup.command_line()) == [
        "codex", "mcp", "add", "image-memory", "--url", URL,
        "--bearer-token-env-var", "IMAGE_MEMORY_API_KEY",
    ]  # fmt: skip
    home = tmp_path / "codex-home"
    moved = client_setup(
        "codex",
        Connection("image-memory", URL, KEY, STDIO),
        _places(tmp_path, CODEX_HOME=str(home)),
    )
    assert moved.path == home / "config.toml"


def test_codex_stdio_tables(tmp_path: Path) -> None:
    setup = _setup(tmp_path, "codex", transport="stdio")
    assert _parsed(setup) == {
        "mcp_servers": {
            "image-memory": {
                "command": STDIO[0],
                "args": list(STDIO[1:]),
                "env": {"MEMORY_API_KEY": KEY, **DATA},
            }
        }
    }
    assert setup.holds_secret
    argv = shlex.split(setup.command_line())
    assert argv[argv.index("--") + 1 :] == list(STDIO)


def test_windsurf_uses_server_url(tmp_path: Path) -> None:
    setup = _setup(tmp_path, "windsurf")
    assert setup.path == tmp_path / "home" / ".codeium" / "windsurf" / "mcp_config.json"
    assert _parsed(setup) == {
        "mcpServers": {
            "image-memory": {
                "serverUrl": URL,
                "headers": {"Authorization": "Bearer ${env:IMAGE_MEMORY_API_KEY}"},
            }
        }
    }


def test_generic_prints_the_facts(tmp_path: Path) -> None:
    setup = _setup(tmp_path, "generic")
    assert setup.path is None and setup.command is None
    assert f"HTTP (streamable): {URL}" in setup.notes
    assert f"header: Authorization: Bearer {KEY}" in setup.notes
    stdio = next(note for note in setup.notes if note.startswith("stdio: "))
    assert shlex.split(stdio.removeprefix("stdio: ")) == [
        f"MEMORY_API_KEY={KEY}",
        "MEMORY_DATA_DIR=/srv/memory",
        *STDIO,
    ]


def test_what_a_client_does_not_have_is_refused() -> None:
    assert unsupported("claude-desktop", "http", "user") is not None
    assert "--transport stdio" in (unsupported("claude-desktop", "http", "user") or "")
    assert unsupported("windsurf", "http", "project") is not None
    assert unsupported("claude-desktop", "stdio", "project") is not None
    assert "one of: claude-code" in (unsupported("zed", "http", "user") or "")
    assert all(
        unsupported(client, "stdio", "user") is None for client in CLIENTS
    )  # every client can start the server itself


def test_the_key_variable_and_label_follow_the_server_name(tmp_path: Path) -> None:
    setup = _setup(tmp_path, "cursor", name="work-images")
    assert setup.variables == {"WORK_IMAGES_API_KEY": KEY}
    assert Connection("2nd", URL, KEY, STDIO).key_variable == "MCP_2ND_API_KEY"
    assert key_label("cursor", "image-memory", "laptop") == "cursor@laptop"
    assert key_label("cursor", "work-images", "laptop") == "cursor@laptop/work-images"
    assert len(key_label("claude-desktop", "x" * 64, "h" * 300)) <= 120


@pytest.mark.parametrize(
    ("given", "endpoint"),
    [
        ("http://127.0.0.1:8765", "http://127.0.0.1:8765/mcp"),
        ("https://memory.example.com/", "https://memory.example.com/mcp"),
        ("https://example.com/memory", "https://example.com/memory/mcp"),
        ("http://127.0.0.1:8765/mcp", "http://127.0.0.1:8765/mcp"),
        ("http://127.0.0.1:8765/mcp/", "http://127.0.0.1:8765/mcp"),
    ],
)
def test_the_endpoint_is_mcp_under_the_base_url(given: str, endpoint: str) -> None:
    assert mcp_endpoint(given) == endpoint


# --- merging into a file ------------------------------------------------------------------------


def test_merge_keeps_other_servers_and_keys_and_writes_a_backup(tmp_path: Path) -> None:
    setup = _setup(tmp_path, "claude-desktop", transport="stdio")
    path = setup.path
    path.parent.mkdir(parents=True)
    before = {
        "globalShortcut": "Ctrl+Space",
        "mcpServers": {
            "files": {"command": "npx", "args": ["files"]},
            "image-memory": {"command": "old"},
        },
    }
    path.write_text(json.dumps(before), encoding="utf-8")
    path.chmod(0o644)
    existing = read_config(setup, path)
    written = write_config(existing, merged_text(setup, existing), holds_secret=True)
    after = json.loads(path.read_text(encoding="utf-8"))
    assert after["globalShortcut"] == "Ctrl+Space"
    assert after["mcpServers"]["files"] == {"command": "npx", "args": ["files"]}
    assert after["mcpServers"]["image-memory"] == setup.entry
    assert written.backup is not None
    assert json.loads(written.backup.read_text(encoding="utf-8")) == before
    # The file and its backup hold a key now (the backup: the earlier one): owner only.
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(written.backup.stat().st_mode) == 0o600
    # No temporary file is left beside it.
    assert sorted(p.name for p in path.parent.iterdir()) == sorted([path.name, written.backup.name])


def test_a_second_run_with_the_same_entry_changes_nothing(tmp_path: Path) -> None:
    setup = _setup(tmp_path, "cursor")
    first = read_config(setup, setup.path)
    assert first.text is None
    written = write_config(first, merged_text(setup, first), holds_secret=False)
    assert written.changed and written.backup is None  # no earlier file: nothing to back up
    text = setup.path.read_text(encoding="utf-8")
    again = read_config(setup, setup.path)
    second = write_config(again, merged_text(setup, again), holds_secret=False)
    assert not second.changed and second.backup is None
    assert setup.path.read_text(encoding="utf-8") == text
    assert list(setup.path.parent.iterdir()) == [setup.path]


def test_vscode_inputs_are_replaced_by_id_and_others_kept(tmp_path: Path) -> None:
    setup = _setup(tmp_path, "vscode", scope="project")
    setup.path.parent.mkdir(parents=True)
    other = {"type": "promptString", "id": "github-token", "password": True}
    setup.path.write_text(
        json.dumps({"servers": {}, "inputs": [other, {"id": "image-memory-api-key"}]}),
        encoding="utf-8",
    )
    existing = read_config(setup, setup.path)
    write_config(existing, merged_text(setup, existing), holds_secret=False)
    inputs = json.loads(setup.path.read_text(encoding="utf-8"))["inputs"]
    assert inputs == [other, *setup.inputs]


def test_codex_toml_keeps_comments_and_other_tables(tmp_path: Path) -> None:
    setup = _setup(tmp_path, "codex")
    setup.path.parent.mkdir(parents=True)
    original = (
        '# my settings\nmodel = "gpt-5"\n\n[mcp_servers.docs]\nurl = "https://docs.example/mcp"\n'
        '\n[mcp_servers.image-memory]\nurl = "http://old/mcp"\nbearer_token_env_var = "OLD"\n'
    )
    setup.path.write_text(original, encoding="utf-8")
    existing = read_config(setup, setup.path)
    write_config(existing, merged_text(setup, existing), holds_secret=False)
    text = setup.path.read_text(encoding="utf-8")
    assert text.startswith("# my settings\n")
    parsed = tomllib.loads(text)
    assert parsed["model"] == "gpt-5"
    assert parsed["mcp_servers"] == {
        "docs": {"url": "https://docs.example/mcp"},
        "image-memory": {"url": URL, "bearer_token_env_var": "IMAGE_MEMORY_API_KEY"},
    }


def test_codex_toml_with_dotted_keys_keeps_every_key_in_its_table(tmp_path: Path) -> None:
    """A key after the servers stays where it was (appending a table must not capture it)."""
    setup = _setup(tmp_path, "codex")
    setup.path.parent.mkdir(parents=True)
    setup.path.write_text('mcp_servers.docs.url = "u"\nmodel = "m"\n', encoding="utf-8")
    for _ in range(2):  # the second run gives the same text
        existing = read_config(setup, setup.path)
        write_config(existing, merged_text(setup, existing), holds_secret=False)
        text = setup.path.read_text(encoding="utf-8")
        assert tomllib.loads(text) == {
            "model": "m",
            "mcp_servers": {"docs": {"url": "u"}, "image-memory": setup.entry},
        }
    assert len(list(setup.path.parent.glob("config.toml.bak-*"))) == 1


@pytest.mark.parametrize(
    ("client", "text", "says"),
    [
        ("cursor", '{"mcpServers": {},}', "not valid JSON"),
        ("vscode", '// mine\n{"servers": {}}', "not valid JSON"),
        ("cursor", "[1, 2]", "not a JSON object"),
        ("cursor", '{"mcpServers": []}', "is not a table of servers"),
        ("vscode", '{"servers": {}, "inputs": {}}', "'inputs' is not a list"),
        ("codex", "[mcp_servers\nurl = 1", "not valid TOML"),
        ("codex", "mcp_servers = 3\n", "is not a table of servers"),
        ("codex", 'mcp_servers = { docs = { url = "u" } }\n', "cannot take a [mcp_servers."),
    ],
)
def test_a_file_that_cannot_be_merged_is_refused_and_left_alone(
    tmp_path: Path, client: str, text: str, says: str
) -> None:
    setup = _setup(tmp_path, client)
    setup.path.parent.mkdir(parents=True)
    setup.path.write_text(text, encoding="utf-8")
    with pytest.raises(InvalidInputFailure) as refused:
        merged_text(setup, read_config(setup, setup.path))
    message = str(refused.value)
    assert says in message and "nothing was changed" in message and "\n" not in message
    assert message.startswith("invalid_input: ")
    assert setup.path.read_text(encoding="utf-8") == text
    assert list(setup.path.parent.iterdir()) == [setup.path]


def test_a_symlinked_file_is_written_through_its_link(tmp_path: Path) -> None:
    setup = _setup(tmp_path, "windsurf")
    dotfiles = tmp_path / "dotfiles" / "mcp_config.json"
    dotfiles.parent.mkdir()
    dotfiles.write_text('{"mcpServers": {"other": {"serverUrl": "https://o/mcp"}}}')
    setup.path.parent.mkdir(parents=True)
    setup.path.symlink_to(dotfiles)
    existing = read_config(setup, setup.path)
    written = write_config(existing, merged_text(setup, existing), holds_secret=False)
    assert setup.path.is_symlink()
    assert set(json.loads(dotfiles.read_text())["mcpServers"]) == {"other", "image-memory"}
    assert written.backup is not None and written.backup.parent == dotfiles.parent


def test_an_empty_file_is_an_empty_configuration(tmp_path: Path) -> None:
    setup = _setup(tmp_path, "claude-code")
    setup.path.parent.mkdir(parents=True)
    setup.path.write_text("\n")
    existing = read_config(setup, setup.path)
    write_config(existing, merged_text(setup, existing), holds_secret=True)
    assert json.loads(setup.path.read_text()) == {"mcpServers": {"image-memory": setup.entry}}
