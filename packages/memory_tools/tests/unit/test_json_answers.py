"""Which HTTP calls keep an event stream: only those whose request may ask for progress."""

from __future__ import annotations

import json
from collections.abc import Mapping

import pytest

from memory_tools.serving.json_answers import may_be_notified


def _body(params: Mapping[str, object], *, ascii_only: bool = False) -> bytes:
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    return json.dumps(message, ensure_ascii=ascii_only).encode()


@pytest.mark.parametrize(
    "params",
    [
        {"name": "image_asset_list", "arguments": {}},
        {"name": "image_asset_search", "arguments": {"query": "red fox"}},
        {"name": "image_asset_search", "arguments": {"query": "renard roux é"}},
        {"name": "image_asset_list", "arguments": {}, "_meta": {"traceparent": "00-ab"}},
    ],
)
def test_a_request_without_a_progress_token_is_silent(params: dict[str, object]) -> None:
    assert not may_be_notified(_body(params))
    assert not may_be_notified(_body(params, ascii_only=True))  # escapes: parsed instead


def test_a_progress_token_is_found_however_it_is_written() -> None:
    params = {"name": "image_asset_save", "arguments": {}, "_meta": {"progressToken": 3}}
    assert may_be_notified(_body(params))
    assert may_be_notified(_body({**params, "arguments": {"title": "é"}}, ascii_only=True))
    # The key spelled with escapes hides from the byte search; the parse finds it.
    hidden = _body(params).replace(b'"progressToken"', b'"progress\\u0054oken"')
    assert b"progressToken" not in hidden
    assert may_be_notified(hidden)


def test_what_cannot_be_read_keeps_the_stream() -> None:
    # The SDK answers these with its own errors; the form is not ours to change.
    assert may_be_notified(b'{"jsonrpc": "2.0", "id": 1, "method": "x", "params": "\\u00e9"')
    assert may_be_notified(b'["\\u00e9"]')


def test_installing_checks_the_sdk_it_replaces(monkeypatch: pytest.MonkeyPatch) -> None:
    from mcp.server import streamable_http_manager

    from memory_tools.serving import json_answers

    json_answers.install()
    json_answers.install()  # idempotent
    installed = getattr(streamable_http_manager, "StreamableHTTPServerTransport")  # noqa: B009
    assert installed.__name__ == "_JsonWhenSilent"
    # An SDK that builds its transports otherwise: refused, not patched over.
    monkeypatch.setattr(streamable_http_manager, "StreamableHTTPServerTransport", object)
    with pytest.raises(RuntimeError, match="json_answers needs updating"):
        json_answers.install()
