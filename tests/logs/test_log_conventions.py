"""Every log call in the project's code follows the logging conventions of ``memory_db.logs``.

Read from the source (``ast``), so a new log line is checked the day it is written:

- the event name is one snake_case ``<subject>_<what happened>`` (``asset_saved``,
  ``worker_job_failed``), never dotted or free text; it is a literal at the call, or, in the
  shared provider client, a field of ``self._events``: a ``ProviderEvents`` that every provider
  declares with literal names (checked below where it is declared);
- a warning, error or critical log written while handling an exception carries the exception
  (``exc_info``), or is ``log.exception``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from memory_db.logs import EVENT_NAME

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted(
    [*ROOT.glob("packages/*/src/**/*.py"), *ROOT.glob("apps/*/src/**/*.py")],
    key=lambda path: str(path),
)
LEVELS = {"debug", "info", "warning", "error", "exception", "critical"}
FAILURE_LEVELS = {"warning", "error", "critical"}


def _log_calls(tree: ast.AST) -> Iterator[tuple[ast.Call, str, bool]]:
    """``(call, level, inside an except block)`` for every ``log.<level>(...)`` call."""

    def visit(node: ast.AST, in_handler: bool) -> Iterator[tuple[ast.Call, str, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                yield from visit(child, False)  # a function defined in a handler runs later
                continue
            if (
                isinstance(child, ast.Call)
                and isinstance(child.func, ast.Attribute)
                and isinstance(child.func.value, ast.Name)
                and child.func.value.id in {"log", "logger"}
                and child.func.attr in LEVELS
            ):
                yield child, child.func.attr, in_handler
            yield from visit(child, in_handler or isinstance(child, ast.ExceptHandler))

    yield from visit(tree, False)


def _where(path: Path, call: ast.Call) -> str:
    return f"{path.relative_to(ROOT)}:{call.lineno}"


def test_the_sources_have_log_calls() -> None:
    calls = [c for p in SOURCES for c in _log_calls(ast.parse(p.read_text()))]
    assert len(calls) > 20  # the scan finds the project's log lines


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_event_names_follow_one_scheme(path: Path) -> None:
    wrong: list[str] = []
    for call, _level, _in_handler in _log_calls(ast.parse(path.read_text())):
        first = call.args[0] if call.args else None
        if _provider_event(first):
            continue  # declared with literal names: test_provider_events_are_literal_names
        if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
            wrong.append(f"{_where(path, call)}: the event is not a literal name")
        elif not EVENT_NAME.fullmatch(first.value):
            wrong.append(f"{_where(path, call)}: {first.value!r}")
    assert wrong == []


def _provider_event(node: ast.expr | None) -> bool:
    """``self._events.<name>``: an event a provider declared (``ProviderEvents``)."""
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "_events"
        and isinstance(node.value.value, ast.Name)
        and node.value.value.id == "self"
    )


def _provider_events(tree: ast.AST) -> Iterator[ast.Call]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and (
            (isinstance(node.func, ast.Name) and node.func.id == "ProviderEvents")
            or (isinstance(node.func, ast.Attribute) and node.func.attr == "ProviderEvents")
        ):
            yield node


def test_provider_events_are_literal_names() -> None:
    declared = [(p, c) for p in SOURCES for c in _provider_events(ast.parse(p.read_text()))]
    assert len(declared) >= 2  # the describe endpoint and Jina
    wrong = [
        f"{_where(path, call)}: {keyword.arg}"
        for path, call in declared
        for keyword in call.keywords
        if not (
            isinstance(keyword.value, ast.Constant)
            and isinstance(keyword.value.value, str)
            and EVENT_NAME.fullmatch(keyword.value.value)
        )
    ]
    assert wrong == []
    assert all(not call.args for _path, call in declared)  # by keyword: each name says its role


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_failure_logs_in_exception_handlers_carry_the_exception(path: Path) -> None:
    missing = [
        _where(path, call)
        for call, level, in_handler in _log_calls(ast.parse(path.read_text()))
        if in_handler
        and level in FAILURE_LEVELS
        and not any(keyword.arg == "exc_info" for keyword in call.keywords)
    ]
    assert missing == []


def test_the_scheme_itself() -> None:
    for good in ("asset_saved", "worker_job_failed", "embedded_postgres_started"):
        assert EVENT_NAME.fullmatch(good)
    for bad in ("worker.job_failed", "asset.fetch.done", "saved", "Asset_saved", "jina-retry"):
        assert not EVENT_NAME.fullmatch(bad)
