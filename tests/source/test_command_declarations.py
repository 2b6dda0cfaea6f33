"""Every command of every app is declared one way: its arguments, what it opens, its handler.

``memory_tools.serving.subcommands`` is the one command style: an app's ``cli.py`` lists
declarations in a ``CommandLine``, whose ``main`` runs the chosen one. A subcommand added to a parser by hand (an
``add_parser`` with an ``if args.command == ...`` beside it) carries no declaration, and this
walk over each app's real parser names it. The apps are found on disk, so an app added later
is walked without editing this test.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from memory_tools.serving.subcommands import (
    DATABASE,
    MIGRATED_DATABASE,
    RUNTIME,
    SETTINGS,
    Subcommand,
)

ROOT = Path(__file__).resolve().parents[2]
APPS = sorted(path.parent.name for path in ROOT.glob("apps/*/src/*/cli.py"))
OPENERS = (SETTINGS, DATABASE, MIGRATED_DATABASE, RUNTIME)


def leaves(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Each command that runs something (``admin create-key``, not ``admin``), with its path."""
    groups = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]  # pyright: ignore[reportPrivateUsage]
    if not groups:
        yield path, parser
    for group in groups:
        choices: dict[str, argparse.ArgumentParser] = group.choices  # pyright: ignore[reportUnknownMemberType]
        for name, sub in choices.items():
            yield from leaves(sub, (*path, name))


def commands_of(app: str) -> dict[tuple[str, ...], object]:
    """The declaration each command of ``app``'s parser carries (None: none)."""
    parser: argparse.ArgumentParser = importlib.import_module(f"{app}.cli").build_parser()
    return {path: leaf.get_default("subcommand") for path, leaf in leaves(parser)}


def test_the_apps_are_found() -> None:
    assert APPS == ["aggregate_server", "memory_server"]


@pytest.mark.parametrize("app", APPS)
def test_every_command_declares_its_handler_and_what_it_opens(app: str) -> None:
    for path, declared in commands_of(app).items():
        shown = " ".join(path)
        assert isinstance(declared, Subcommand), f"{app}: `{shown}` is not a declared Subcommand"
        command: Subcommand[object] = declared
        assert command.name == path[-1], shown
        assert command.opens in OPENERS, shown


def test_the_walk_reaches_nested_commands() -> None:
    # The rule above holds for what the walk finds: it must find the groups' commands too.
    found = commands_of("memory_server")
    assert {("serve",), ("migrate",), ("admin", "create-key"), ("models", "list")} <= set(found)
    assert ("admin",) not in found
