"""Running one command of a server app: settings, logging, notices, signals and exit statuses.

Every app's ``main`` parses its arguments and hands the command to :func:`run_command`, so
``memory-server`` and ``scraper-mcp-server`` end the same way: 0 success (and SIGTERM), 1 a
refused operation, 2 invalid configuration, 130 Ctrl+C.

Two kinds of command, two kinds of stderr. A server or worker (``operator=False``) logs at
``MEMORY_LOG_LEVEL``, and with the JSON renderer its notices are log events too, so stderr
carries JSON only. An operator command (``operator=True``: ``admin``, ``migrate``, ``backup``,
``import`` ...) prints its results on stdout and its progress and refusals on stderr as plain
text for the person who typed it, unredacted (the refusal names the address they typed); only
its log lines at ``MEMORY_CLI_LOG_LEVEL`` (warnings, by default) join them, redacted as ever.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import AsyncGenerator, Callable, Coroutine
from typing import Any

from memory_db import (
    ConfigurationError,
    MemorySettings,
    configure_logging,
    get_logger,
    load_settings,
)
from memory_tools.errors import ToolFailure


class Terminated(SystemExit):
    """SIGTERM arrived: unwind so the database pool and embedded server close cleanly.

    Not an ``Exception``: the worker's loops survive ordinary errors with ``except Exception``,
    and must not survive this. A ``SystemExit`` (like ``KeyboardInterrupt`` for Ctrl+C) because
    the signal may land while asyncio runs a callback (a socket closing, say), and asyncio logs
    and drops any other ``BaseException`` raised there: the process then ignored SIGTERM.
    """


def _raise_terminated(_signum: int, _frame: object) -> None:
    raise Terminated


def install_sigterm_handler() -> None:
    """Turn SIGTERM into ``Terminated`` so shutdown unwinds through every ``finally``.

    uvicorn restores this handler after its graceful shutdown and re-raises the signal into it;
    raising (instead of dying) lets the runtime close and the embedded server stop.
    """
    signal.signal(signal.SIGTERM, _raise_terminated)


@contextlib.asynccontextmanager
async def sigterm_cancels() -> AsyncGenerator[None]:
    """Within this block SIGTERM cancels the current task, then ``Terminated`` leaves it.

    For a command with no uvicorn server of its own in the foreground (the worker): there the
    signal handler of :func:`install_sigterm_handler` would raise wherever the signal lands,
    and raised between two bytecodes of a loop or driver callback (asyncpg's protocol, a
    socket closing) it can leave a waiter that is never woken; the shutdown that follows (a
    shielded UNLISTEN, the pool's close) then waits for it forever. Seen: two idle
    ``memory-server worker`` processes ignored SIGTERM for 30 s in one CI run. Through the
    loop, the stop arrives at an ``await``, where every ``finally`` runs as written.

    Not for the HTTP servers: uvicorn captures SIGTERM while it serves, shuts down gracefully
    and raises the signal again afterwards, at a clean point; a cancel on top of that would
    cut its graceful shutdown short.
    """
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    terminated = False

    def on_sigterm() -> None:
        nonlocal terminated
        terminated = True
        if task is not None:
            task.cancel()

    loop.add_signal_handler(signal.SIGTERM, on_sigterm)
    try:
        yield
    except BaseException as stopped:
        # A task group (the worker's, anyio's) may wrap the cancellation in a group.
        if terminated and _only_cancellation(stopped):
            raise Terminated from None
        raise
    finally:
        # remove_signal_handler puts back the default action (exit at once): the rest of the
        # shutdown, outside this block, still unwinds through ``Terminated``.
        loop.remove_signal_handler(signal.SIGTERM)
        install_sigterm_handler()
    if terminated:  # the block finished on its own as the signal came
        raise Terminated


log = get_logger(__name__)
# Set once a server's logging is configured: with the JSON renderer, notices are log events too,
# so stderr carries JSON only. Never for an operator command: its notices are for a person.
_notices_as_json = False


def notice(message: str) -> None:
    """Tell the operator on stderr: plain text, or a log event once a server logs JSON."""
    if not _notices_as_json:
        print(message, file=sys.stderr, flush=True)
    elif message.startswith("error: "):
        log.error("command_failed", message=message.removeprefix("error: "))
    else:
        log.info("command_notice", message=message)


def run_command(
    command: Callable[[MemorySettings], Coroutine[Any, Any, None] | int],
    *,
    operator: bool = False,
) -> int:
    """Load settings, configure logging, run ``command``; map failures to exit codes.

    0 success (and SIGTERM), 1 a refused operation, 2 invalid configuration, 130 Ctrl+C.
    A ``command`` that runs no event loop (the ``--processes`` parent) returns its status.
    ``operator``: a command a person runs and reads (see the module's docstring).
    """
    install_sigterm_handler()
    global _notices_as_json
    _notices_as_json = False  # a refused setting is reported before logging is configured
    try:
        settings = load_settings()
        level = settings.memory_cli_log_level if operator else settings.memory_log_level
        renders_json = configure_logging(settings.memory_log_format, level)
        _notices_as_json = renders_json and not operator
        outcome = command(settings)
        if isinstance(outcome, int):
            return outcome
        asyncio.run(outcome)
    except ConfigurationError as exc:
        notice(f"error: {exc}")
        return 2
    except ToolFailure as failure:
        notice(f"error: {failure}")
        return 1
    except Terminated:
        return 0
    except KeyboardInterrupt:
        return 130
    except BaseExceptionGroup as group:
        # The in-process worker runs in a task group, which wraps what ends the server.
        if group.subgroup(Terminated) is not None and group.subgroup(_unexpected) is None:
            return 0
        if group.subgroup(KeyboardInterrupt) is not None and group.subgroup(_unexpected) is None:
            return 130
        raise
    return 0


def _only_cancellation(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        group: BaseExceptionGroup[BaseException] = exc
        return group.subgroup(lambda leaf: not _only_cancellation(leaf)) is None
    return isinstance(exc, asyncio.CancelledError)


def _unexpected(exc: BaseException) -> bool:
    # subgroup() also asks about the groups themselves: judge only the leaves.
    if isinstance(exc, BaseExceptionGroup):
        return False
    return not isinstance(exc, Terminated | KeyboardInterrupt | asyncio.CancelledError)
