"""Folder trees are presented depth-first with paths; validation messages are readable."""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from memory_db import FolderRecord
from memory_tools.wire import describe
from memory_tools.workflows.projects import folder_tree

NOW = datetime.now(UTC)


def _folder(fid: str, parent: str | None, name: str) -> FolderRecord:
    return FolderRecord(fid, "o", "v", "apr_p", parent, name, NOW, NOW)


def test_tree_is_depth_first_with_paths() -> None:
    folders = [
        _folder("afl_2", None, "beta"),
        _folder("afl_1", None, "Alpha"),
        _folder("afl_3", "afl_1", "zeta"),
        _folder("afl_4", "afl_1", "eta"),
        _folder("afl_5", "afl_4", "deep"),
    ]
    tree = folder_tree(folders, "Library")
    assert [(f.path, f.depth) for f in tree] == [
        ("/Alpha", 1),
        ("/Alpha/eta", 2),
        ("/Alpha/eta/deep", 3),
        ("/Alpha/zeta", 2),
        ("/beta", 1),
    ]


def test_empty_tree() -> None:
    assert folder_tree([], "Library") == []


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(max_length=3)


def test_validation_messages_do_not_echo_input() -> None:
    try:
        _Model.model_validate({"name": "secret-value", "extra": "other-secret"})
    except ValidationError as exc:
        text = describe(exc)
    assert "name: String should have at most 3 characters" in text
    assert "extra" in text
    assert "secret" not in text
