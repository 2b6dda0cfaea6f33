"""The stylesheet stays well-formed: page groups append their blocks to one file, and a block
left open (as a merge once did) silently swallows every rule after it."""

from __future__ import annotations

import re
from importlib import resources

CSS = resources.files("memory_tools.web").joinpath("static", "app.css").read_text("utf-8")


def test_every_block_is_closed_and_every_group_starts_at_the_top_level() -> None:
    depth = 0
    groups: list[str] = []
    for number, line in enumerate(CSS.splitlines(), start=1):
        group = re.fullmatch(r"/\* ([a-z]+) \*/", line.strip())
        if group:
            assert depth == 0, f"line {number}: /* {group.group(1)} */ starts inside a block"
            groups.append(group.group(1))
        depth += line.count("{") - line.count("}")
        assert depth >= 0, f"line {number}: a block is closed twice"
    assert depth == 0, "a block is left open at the end of the file"
    assert {"library", "asset", "upload", "search", "trash", "usage", "sharing", "jobs"} <= set(
        groups
    )
