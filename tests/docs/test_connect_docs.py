"""The README's and docs/connect.md's client configurations are what ``connect`` writes.

docs/connect.md shows each client's entry as written with the defaults; the README's table
names one command per client. Both are checked against the code, so a change of a client's
format shows up here as a stale page.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from memory_tools.serving.client_configs import (
    CLIENTS,
    TRANSPORTS,
    Connection,
    Places,
    client_setup,
)

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
CONNECT = (ROOT / "docs" / "connect.md").read_text(encoding="utf-8")
# The connection docs/connect.md is written for: the defaults, placeholders for the rest.
DOCUMENTED = Connection(
    "image-memory",
    "http://127.0.0.1:8765/mcp",
    "mk_...",
    ("/path/to/checkout/.venv/bin/memory-server", "serve", "--transport", "stdio"),
    {"MEMORY_DATA_DIR": "/home/you/.local/share/mcp-memory"},
)
PLACES = Places(Path("/home/you"), Path("/home/you/project"), "linux", {})


@pytest.mark.parametrize("client", [c for c in CLIENTS if c != "generic"])
def test_connect_md_shows_each_entry_as_written(client: str) -> None:
    connection = replace(DOCUMENTED, transport=TRANSPORTS[client][0])
    setup = client_setup(client, connection, PLACES)
    assert f"```{setup.file_format}\n{setup.snippet()}```" in CONNECT
    if setup.command_line() is not None:
        assert f"```bash\n{setup.command_line()}\n```" in CONNECT


def test_the_readme_table_has_one_command_per_client() -> None:
    section = README.split("## Connect your MCP client", 1)[1].split("\n## ", 1)[0]
    table = [line for line in section.splitlines() if line.startswith("| ")]
    commands = [re.search(r"`make connect CLIENT=([a-z-]+) ", row) for row in table]
    assert [m.group(1) for m in commands if m] == list(CLIENTS)
    assert "docs/connect.md" in section


def test_make_help_lists_connect() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^connect:.*## ", makefile, flags=re.MULTILINE)
