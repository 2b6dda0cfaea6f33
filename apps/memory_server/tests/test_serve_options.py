"""``memory-server serve --toolsets/--read-only``: parsed by the shared serve parser."""

from __future__ import annotations

import pytest

from memory_server.cli import build_parser
from memory_tools.mcp.toolsets import MEMORY, MEMORY_READ


def test_the_default_is_every_memory_tool_and_read_only_is_a_switch() -> None:
    default = build_parser().parse_args(["serve"])
    assert default.toolsets == (MEMORY,) and default.read_only is False
    chosen = build_parser().parse_args(["serve", "--toolsets", "memory-read", "--read-only"])
    assert chosen.toolsets == (MEMORY_READ,) and chosen.read_only is True


def test_scraper_is_refused_on_the_memory_server(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["serve", "--toolsets", "memory,scraper"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "argument --toolsets: 'scraper': memory-server serves no scraper tools" in err
    assert "(scraper-mcp-server does)" in err
