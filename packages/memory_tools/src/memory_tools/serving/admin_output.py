"""How the operator commands print: tables for people, JSON for scripts, progress on stderr.

Tables are drawn with rich up to :data:`RICH_TABLE_ROWS` rows and printed as plain aligned
columns beyond; every cell is escaped so stored text (a key's label) can neither be read as rich
markup nor drive the terminal. :class:`Progress` draws a bar on a terminal and writes plain
lines otherwise.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import Any

# --- output ------------------------------------------------------------------------------------


def when(value: datetime | None) -> str | None:
    """ISO 8601 with its offset, or None."""
    return None if value is None else value.isoformat()


def print_json(document: dict[str, Any]) -> None:
    """One JSON object on stdout."""
    print(json.dumps(document, indent=2, ensure_ascii=False))


def print_report(
    document: dict[str, Any],
    *,
    as_json: bool,
    title: str,
    columns: Sequence[str],
    row: Sequence[object],
    notes: Sequence[str] = (),
) -> None:
    """What an operator command did: ``document`` as JSON for scripts, or a one-row table.

    ``notes``: sentences for a person, printed under the table (the JSON carries their facts).
    """
    if as_json:
        print_json(document)
        return
    print_table(title, columns, [row], empty="")
    for note in notes:
        print(note)


# Above this many rows a table is printed as plain aligned columns: rich lays out every cell
# of a table before printing it, which took 6 s of CPU for 10,000 identities (the query 0.1 s).
RICH_TABLE_ROWS = 1000


def print_table(
    title: str, columns: Sequence[str], rows: Sequence[Sequence[object]], *, empty: str
) -> None:
    """A table on stdout, or the sentence ``empty`` when there are no rows."""
    if not rows:
        print(shown(empty))
        return
    cells = [["" if cell is None else shown(str(cell)) for cell in row] for row in rows]
    if len(cells) > RICH_TABLE_ROWS:
        widths = [
            max(len(line[i]) for line in [list(columns), *cells]) for i in range(len(columns))
        ]
        print(f"{title} ({len(cells)} rows)")
        for line in [list(columns), *cells]:
            padded = (cell.ljust(width) for cell, width in zip(line, widths, strict=True))
            print("  ".join(padded).rstrip())
        return
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    # Not a terminal (a pipe, a file): wide enough that e-mail addresses never wrap.
    console = Console(width=None if sys.stdout.isatty() else 200)
    # The title on a line of its own, never wrapped: as a table title rich wrapped it to the
    # table's width, and a long path in it ("backup in <path>") came out in pieces.
    # Text, not str: rich would read "[...]" in a key's label as markup (and fail on "[/]").
    console.print(Text(shown(title)), soft_wrap=True)
    table = Table()
    for column in columns:
        table.add_column(column, overflow="fold")
    for line in cells:
        table.add_row(*(Text(cell) for cell in line))
    console.print(table)


def shown(value: str) -> str:
    """``value`` with control and invisible characters escaped, so it cannot drive a terminal.

    A key label stored before labels were checked may hold an escape sequence.
    """
    return "".join(
        ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in value
    )


def human_bytes(value: int) -> str:
    """Exact bytes and a readable size: ``1048576 (1.0 MiB)``."""
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{value}" if unit == "B" else f"{value} ({size:.1f} {unit})"
        size /= 1024
    raise AssertionError("unreachable")


# --- progress ----------------------------------------------------------------------------------


class Progress:
    """Progress of a long command on stderr: a rich bar on a terminal, plain lines otherwise.

    Plain lines are what a log or a CI job keeps; a bar would fill them with redraws.
    """

    def __init__(self, description: str, *, terminal: bool | None = None) -> None:
        self._description = description
        self._terminal = sys.stderr.isatty() if terminal is None else terminal
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> Progress:
        if self._terminal:
            from rich.console import Console
            from rich.progress import Progress as Bar

            self._bar = Bar(console=Console(stderr=True, force_terminal=True), transient=False)
            self._bar.__enter__()
            self._task = self._bar.add_task(self._description, total=None)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)

    def advance(self, done: int, total: int, detail: str = "") -> None:
        """``done`` of ``total`` steps are finished."""
        if self._bar is not None:
            self._bar.update(self._task, completed=done, total=total)
        else:
            suffix = f" {detail}" if detail else ""
            print(f"{self._description}: {done}/{total}{suffix}", file=sys.stderr, flush=True)
