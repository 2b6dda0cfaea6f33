"""The gate of generated image context: one JSON document, the schema, the image binding."""

from __future__ import annotations

import copy
import hashlib
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from memory_db.describing import (
    ANSWER_MAX_CHARS,
    KINDS,
    ImageContext,
    bind,
    context_schema,
    extract_document,
    gate_answer,
)
from memory_db.errors import ContextRefused

VALID: dict[str, Any] = {
    "caption": "A pricing table with three plans.",
    "visibleText": "Basic 9 EUR  Pro 29 EUR  Team 99 EUR",
    "subjects": ["pricing table", "plans"],
    "setting": "a software vendor's web page",
    "kind": "screenshot",
    "language": "en",
    "safety": {"adult": False, "violence": False, "medical": False, "personalData": False},
}
DOC = json.dumps(VALID)
SHA = hashlib.sha256(b"rendition bytes").hexdigest()


def _refused(answer: str) -> str:
    with pytest.raises(ContextRefused) as caught:
        gate_answer(answer)
    return caught.value.code


def test_whole_document_and_one_fenced_block_are_accepted() -> None:
    assert gate_answer(DOC).caption == VALID["caption"]
    assert gate_answer(f"  \n{DOC}\n ").subjects == ("pricing table", "plans")
    fenced = gate_answer(f"```json\n{json.dumps(VALID, indent=2)}\n```")
    assert fenced.to_json() == VALID
    assert gate_answer(f"```JSON\n{DOC}```").kind == "screenshot"


@pytest.mark.parametrize(
    "answer",
    [
        "",
        "   ",
        f"Here is the JSON you asked for:\n{DOC}",  # prose before
        f"{DOC}\nHope this helps!",  # prose after
        f"Sure.\n```json\n{DOC}\n```",  # prose around a block
        f"```json\n{DOC}\n```\nDone.",
        f"```json\n{DOC}\n```\n```json\n{DOC}\n```",  # two blocks
        f"```\n{DOC}\n```",  # a fence not marked json
        f"```python\n{DOC}\n```",
        f"noise {{{DOC[1:-1]}}} noise",  # only brace-guessing would find it
        f"{DOC}{DOC}",  # two documents
        '```json\n{"caption": \n```',  # a block that is not JSON
        DOC.replace("false", "NaN", 1),  # not JSON (a constant)
        '{"caption": "a", "caption": "b"}',  # duplicate keys: which one would win?
        DOC[:-5],  # truncated (max_tokens)
    ],
)
def test_anything_but_one_json_document_is_refused_as_not_json(answer: str) -> None:
    assert _refused(answer) == "context_not_json"


def test_an_oversized_answer_is_refused_before_parsing() -> None:
    padded = DOC[:-1] + "," + " " * ANSWER_MAX_CHARS + "}"
    assert _refused(padded) == "context_too_large"


def _variant(path: list[str | int], value: Any, *, delete: bool = False) -> str:
    doc = copy.deepcopy(VALID)
    target: Any = doc
    for step in path[:-1]:
        target = target[step]
    if delete:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return json.dumps(doc)


@pytest.mark.parametrize(
    ("path", "value", "delete"),
    [
        (["instructions"], "obey me", False),  # unknown field
        (["safety", "weapons"], True, False),  # unknown nested field
        (["caption"], None, True),  # missing field
        (["safety", "adult"], None, True),
        (["caption"], "", False),  # empty caption
        (["caption"], "x" * 301, False),  # every string bounded
        (["visibleText"], "x" * 2001, False),
        (["setting"], "x" * 201, False),
        (["subjects"], [f"s{i}" for i in range(13)], False),  # every list bounded
        (["subjects"], ["x" * 61], False),
        (["subjects"], ["same", "same"], False),
        (["subjects"], "a string", False),
        (["kind"], "selfie", False),  # the kind enum
        (["language"], "English", False),
        (["language"], "e" * 40, False),
        (["safety", "adult"], "no", False),
        (["caption"], "nul\u0000inside", False),  # control characters
        (["subjects"], ["line\nbreak"], False),
    ],
)
def test_schema_violations_are_refused(path: list[str | int], value: Any, delete: bool) -> None:
    assert _refused(_variant(path, value, delete=delete)) == "context_schema"


@pytest.mark.parametrize("document", ["[]", '"a caption"', "42", "null"])
def test_a_document_that_is_not_an_object_is_a_schema_refusal(document: str) -> None:
    assert _refused(document) == "context_schema"


def test_the_schema_is_closed_and_bounded_everywhere() -> None:
    schema = context_schema()

    def walk(node: Any, where: str) -> None:
        if not isinstance(node, dict):
            return
        if node.get("type") == "object":
            assert node.get("additionalProperties") is False, where
            assert set(node["required"]) == set(node["properties"]), where
        types = node.get("type")
        types = types if isinstance(types, list) else [types]
        if "string" in types:
            assert isinstance(node.get("maxLength"), int), where
        if "array" in types:
            assert isinstance(node.get("maxItems"), int), where
        for name, child in (node.get("properties") or {}).items():
            walk(child, f"{where}/{name}")
        walk(node.get("items"), f"{where}[]")

    walk(schema, "")
    assert tuple(schema["properties"]["kind"]["enum"]) == KINDS


def test_the_schema_error_does_not_echo_model_text() -> None:
    with pytest.raises(ContextRefused) as caught:
        gate_answer(_variant(["kind"], "SECRET-MODEL-TEXT"))
    assert "SECRET-MODEL-TEXT" not in str(caught.value)


def test_a_bound_context_is_stale_once_the_bytes_differ() -> None:
    bound = bind(DOC, source_sha256=SHA, model="m", generated_at=datetime.now(UTC))
    assert isinstance(bound.require_current(SHA), ImageContext)
    with pytest.raises(ContextRefused) as caught:
        bound.require_current(hashlib.sha256(b"other bytes").hexdigest())
    assert caught.value.code == "context_stale"
    with pytest.raises(ValueError, match="SHA-256"):
        bind(DOC, source_sha256="not-a-digest", model="m", generated_at=datetime.now(UTC))


def test_extract_document_returns_the_parsed_value() -> None:
    assert extract_document('```json\n{"a": 1}\n```') == {"a": 1}
