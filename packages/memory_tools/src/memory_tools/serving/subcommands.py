"""One way to declare a subcommand and one way to run it, for every app's command line.

A subcommand is a :class:`Subcommand`: its name and help, the arguments it adds, what it
:class:`Opens` before its handler runs (the settings alone, the database, the migrated database
or the whole runtime) and the handler, which receives what was opened and the parsed arguments.
A :class:`CommandGroup` (``admin``, ``models``) holds subcommands of its own. An app lists its
subcommands in a :class:`CommandLine`, whose ``main`` parses the arguments and runs the chosen
command inside :func:`run_command` (settings, logging, exit statuses), the same for every
command::

    COMMAND_LINE = CommandLine(PROG, "Image memory MCP server.", (MIGRATE, ADMIN, ...))
    main = COMMAND_LINE.main

What a command opens is closed when its handler returns or fails, the same way for every
command: the database pool, then the embedded PostgreSQL it started (``Runtime.close`` first
closes the embedder and the store).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from memory_db import Database, MemorySettings, Runtime, open_database, open_runtime
from memory_db.garbage_collection import collection_paused
from memory_tools.serving.commands import run_command

if TYPE_CHECKING:
    from memory_tools.services import MemoryServices

Subparsers = Any  # argparse's _SubParsersAction, which it does not export
# What a handler returns: the work to run in the event loop, or (a command that runs no event
# loop of its own, like the ``--processes`` supervisor) its exit status.
Outcome = Coroutine[Any, Any, None] | int
# The address an operator command's object store signs links for: it hands none out.
OPERATOR_BASE_URL = "http://127.0.0.1"
# The attribute of the parsed arguments that holds the chosen subcommand's declaration.
_DECLARED = "subcommand"


@dataclass(frozen=True)
class OpenedDatabase:
    """What a command that opens the database gets: the pool and the settings it came from."""

    settings: MemorySettings
    database: Database


# What a command's opener hands its handler: the settings, the database or the runtime.
Opened = TypeVar("Opened")


class Opens(ABC, Generic[Opened]):
    """What a subcommand needs before its handler runs, and how it is opened and closed."""

    @abstractmethod
    def start(self, settings: MemorySettings, handler: Callable[[Opened], Outcome]) -> Outcome:
        """Open what the handler needs on ``settings`` and hand it over; close it afterwards."""


class _SettingsOnly(Opens[MemorySettings]):
    # Nothing to open or close: the handler's outcome is the command's (it may be a status).
    def start(
        self, settings: MemorySettings, handler: Callable[[MemorySettings], Outcome]
    ) -> Outcome:
        return handler(settings)


class _Opening(Opens[Opened]):
    def __init__(
        self,
        what: str,
        opening: Callable[[MemorySettings], contextlib.AbstractAsyncContextManager[Opened]],
    ) -> None:
        self._what = what
        self._opening = opening

    def start(self, settings: MemorySettings, handler: Callable[[Opened], Outcome]) -> Outcome:
        return self._inside(settings, handler)

    async def _inside(self, settings: MemorySettings, handler: Callable[[Opened], Outcome]) -> None:
        async with self._opening(settings) as opened:
            outcome = handler(opened)
            if isinstance(outcome, int):
                # Only a command that opens nothing may run without the event loop.
                raise TypeError(f"a command that opens the {self._what} cannot return a status")
            await outcome

    def __repr__(self) -> str:
        return f"Opens({self._what})"


@contextlib.asynccontextmanager
async def _database(settings: MemorySettings, *, migrate: bool) -> AsyncGenerator[OpenedDatabase]:
    database, embedded = await open_database(settings, migrate=migrate)
    try:
        yield OpenedDatabase(settings, database)
    finally:
        await database.close()
        if embedded is not None:
            embedded.stop()


@contextlib.asynccontextmanager
async def _runtime(settings: MemorySettings) -> AsyncGenerator[Runtime]:
    runtime = await open_runtime(settings, public_base_url=OPERATOR_BASE_URL)
    try:
        yield runtime
    finally:
        await runtime.close()


SETTINGS: Opens[MemorySettings] = _SettingsOnly()
"""The settings alone: the handler opens what it needs itself (a server, a restore)."""
DATABASE: Opens[OpenedDatabase] = _Opening(
    "database", lambda settings: _database(settings, migrate=False)
)
"""The database at the build's schema revision (refused otherwise); no object store."""
MIGRATED_DATABASE: Opens[OpenedDatabase] = _Opening(
    "migrated database", lambda settings: _database(settings, migrate=True)
)
"""The database after applying every migration (``migrate``)."""
RUNTIME: Opens[Runtime] = _Opening("runtime", _runtime)
"""The database, object store, signer and configured embedder (vault-wide operator work)."""


def operator_services(runtime: Runtime, **extra: Any) -> MemoryServices:
    """The services an operator command runs a workflow with, on the runtime it opened.

    ``extra``: what that workflow needs beyond the database, store and settings (an embedder,
    a describer).
    """
    from memory_tools.services import MemoryServices

    return MemoryServices(
        database=runtime.database, store=runtime.store, settings=runtime.settings, **extra
    )


def _no_arguments(_parser: argparse.ArgumentParser) -> None:
    pass


@dataclass(frozen=True, kw_only=True)
class Subcommand(Generic[Opened]):
    """One command of an app's command line: how it is parsed, what it opens, what it runs.

    ``run`` gets what ``opens`` opened and the parsed arguments. ``operator``: a command a
    person runs and reads (plain text on stderr; see :func:`run_command`); ``False`` for
    servers and workers, which log. ``usage``: a check of the arguments before anything
    else, returning the problem to report as a usage error (exit status 2). ``check``: a
    check that needs neither the database nor the store, run once the settings are loaded and
    before anything is opened, so that its refusal is immediate.
    """

    name: str
    help: str
    opens: Opens[Opened]
    run: Callable[[Opened, argparse.Namespace], Outcome]
    arguments: Callable[[argparse.ArgumentParser], None] = _no_arguments
    operator: bool = True
    usage: Callable[[argparse.Namespace], str | None] | None = None
    check: Callable[[argparse.Namespace], None] | None = None

    def add_to(self, commands: Subparsers) -> None:
        """Add this command's parser to ``commands``, remembering the declaration."""
        parser: argparse.ArgumentParser = commands.add_parser(self.name, help=self.help)
        self.arguments(parser)
        parser.set_defaults(**{_DECLARED: self})

    def start(self, settings: MemorySettings, args: argparse.Namespace) -> Outcome:
        """Check, open what the command needs and run it: what :func:`run_command` runs."""
        if self.check is not None:
            self.check(args)
        return self.opens.start(settings, lambda opened: self.run(opened, args))


@dataclass(frozen=True, kw_only=True)
class CommandGroup:
    """A command whose own subcommands do the work (``admin create-key``, ``models list``).

    ``dest``: the attribute naming the chosen subcommand.
    """

    name: str
    help: str
    dest: str
    commands: Sequence[Subcommand[Any]]

    def add_to(self, commands: Subparsers) -> None:
        """Add the group and each of its subcommands to ``commands``."""
        parser: argparse.ArgumentParser = commands.add_parser(self.name, help=self.help)
        add_commands(parser.add_subparsers(dest=self.dest, required=True), self.commands)


Command = Subcommand[Any] | CommandGroup


def add_commands(subparsers: Subparsers, commands: Sequence[Command]) -> None:
    """Add every declared command (and group) to ``subparsers``."""
    for command in commands:
        command.add_to(subparsers)


@dataclass(frozen=True)
class CommandLine:
    """An app's whole command line: ``prog`` with one required subcommand of ``commands``."""

    prog: str
    description: str
    commands: Sequence[Command]

    def parser(self) -> argparse.ArgumentParser:
        """The parser of every declared command (and group)."""
        parser = argparse.ArgumentParser(prog=self.prog, description=self.description)
        add_commands(parser.add_subparsers(dest="command", required=True), self.commands)
        return parser

    def main(self, argv: Sequence[str] | None = None) -> int:
        """Parse ``argv`` and run the chosen command; the exit status.

        0 success, 1 a refused operation, 2 invalid usage or configuration, 130 Ctrl+C.
        """
        # The process's start, imports of what the command runs included (a usage check may load
        # the tools), without the cyclic collector; what it built stays out of later collections.
        with collection_paused(freeze=True):
            args = self.parser().parse_args(argv)
            command = declared(args)
            problem = None if command.usage is None else command.usage(args)
        if problem is not None:
            print(f"{self.prog}: error: {problem}", file=sys.stderr)
            return 2
        return run_command(
            lambda settings: command.start(settings, args), operator=command.operator
        )


def declared(args: argparse.Namespace) -> Subcommand[Any]:
    """The declaration of the subcommand that parsed ``args``."""
    return getattr(args, _DECLARED)


async def run_in_loop(settings: MemorySettings, args: argparse.Namespace) -> None:
    """Run a parsed command that works in the event loop inside the caller's loop (tests).

    What :meth:`CommandLine.main` does in a loop of its own, without its settings, logging and exit
    statuses: a failure is raised.
    """
    outcome = declared(args).start(settings, args)
    if isinstance(outcome, int):
        raise TypeError(f"{declared(args).name} runs no event loop: run it with main")
    await outcome


def add_json_option(parser: argparse.ArgumentParser, help: str) -> None:
    """``--json``: print one JSON object for scripts instead of what people read."""
    parser.add_argument("--json", action="store_true", help=help)
