"""Every code a failure can carry is exported in ``CODES`` and named in the server instructions."""

from __future__ import annotations

import gc
import importlib
import pkgutil
import re

import pytest
from structlog.testing import capture_logs

import memory_tools
from memory_db import NotFound
from memory_db.errors import MemoryDbError
from memory_tools import CODES, ToolFailure
from memory_tools.errors import NotFoundFailure, map_failures, translate
from memory_tools.mcp import INSTRUCTIONS


def _every_failure_class() -> list[type[ToolFailure]]:
    """ToolFailure and all its subclasses, after importing every memory_tools module."""
    for module in pkgutil.walk_packages(memory_tools.__path__, "memory_tools."):
        importlib.import_module(module.name)
    found: list[type[ToolFailure]] = [ToolFailure]
    for cls in found:  # grows while walking: subclasses of subclasses too
        found.extend(cls.__subclasses__())
    return found


def _listed(instructions: str) -> set[str]:
    """The codes the instructions list: "Errors start with a stable code (a, b, c)"."""
    match = re.search(r"stable code \(([^)]*)\)", instructions)
    assert match is not None, "the instructions no longer list the error codes"
    return {code.strip() for code in match[1].split(",")}


def _missing(codes: tuple[str, ...], instructions: str) -> list[str]:
    """Failure codes that ``codes`` or the code list of ``instructions`` do not name."""
    listed = _listed(instructions)
    missing: list[str] = []
    for cls in _every_failure_class():
        if cls.code not in codes:
            missing.append(f"{cls.__name__}.code {cls.code!r} is not in CODES")
        if cls.code not in listed:
            missing.append(f"{cls.__name__}.code {cls.code!r} is not in the instructions")
    return missing


def test_every_failure_code_is_exported_and_in_the_instructions() -> None:
    assert _missing(CODES, INSTRUCTIONS) == []
    # The three codes that were missing before.
    assert {"busy", "embedding_unavailable", "embedding_failed"} <= set(CODES)


def test_codes_are_unique() -> None:
    assert len(CODES) == len(set(CODES))


def test_a_new_failure_code_without_an_entry_is_reported() -> None:
    class Throttled(ToolFailure):
        """A deliberately undeclared code."""

        code = "throttled"

    try:
        assert _missing(CODES, INSTRUCTIONS) == [
            "Throttled.code 'throttled' is not in CODES",
            "Throttled.code 'throttled' is not in the instructions",
        ]
    finally:
        del Throttled  # drop the class so later walks do not see it
        gc.collect()


def test_the_old_lists_are_reported() -> None:
    # CODES and the instructions as they were before the codes were checked.
    old_codes = tuple(code for code in CODES if not code.startswith("embedding_"))
    old_instructions = (
        "Errors start with a stable code (not_found, forbidden, conflict, invalid_input, "
        "unauthenticated, feature_disabled, unavailable, busy)"
    )
    missing = _missing(old_codes, old_instructions)
    assert "EmbeddingFailed.code 'embedding_failed' is not in CODES" in missing
    assert "QuotaExceeded.code 'quota_exceeded' is not in the instructions" in missing


def test_what_no_workflow_expected_is_answered_internal_and_repository_answers_translated() -> None:
    """Nothing escapes the boundary without a code: the docs promise ``internal``."""
    with pytest.raises(ToolFailure) as internal, map_failures():
        raise RuntimeError("a bug, with details the caller must not see")
    assert internal.value.code == "internal"
    assert "details" not in str(internal.value)
    with pytest.raises(NotFoundFailure, match="folder not found"), map_failures():
        raise NotFound("folder")


def test_an_untranslatable_repository_error_is_logged_with_its_cause() -> None:
    """A workflow raises ``translate(exc) from None``: the log is the only trace of ``exc``."""

    class Unforeseen(MemoryDbError):
        """A repository error no failure class answers."""

    with capture_logs() as logs, pytest.raises(ToolFailure) as internal, map_failures():
        try:
            raise Unforeseen("the index moved under us")
        except MemoryDbError as exc:
            raise translate(exc) from None
    assert internal.value.code == "internal"
    assert "moved" not in str(internal.value)
    logged = [entry for entry in logs if entry["event"] == "unexpected_failure"]
    assert [entry["error"] for entry in logged] == ["Unforeseen"]
    assert logged[0]["log_level"] == "error"
    assert isinstance(logged[0]["exc_info"], Unforeseen)
