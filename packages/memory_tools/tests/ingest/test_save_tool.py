"""``image_asset_save`` over MCP: strict input, camelCase output, stable error codes."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import pytest
from fastmcp import Client

from memory_tools import MemoryServices

from ..pictures import picture


async def test_save_answers_in_camel_case(
    client_as: Callable[[str], Client[Any]], alice: Any
) -> None:
    async with client_as(alice.key) as client:
        result = await client.call_tool(
            "image_asset_save",
            {
                "imageBase64": base64.b64encode(picture(21)).decode(),
                "title": "A gradient",
                "tags": ["Test"],
                "idempotencyKey": "tool-1",
            },
        )
    data = result.structured_content
    assert data is not None
    assert data["assetId"].startswith("ast_") and data["objectId"].startswith("aob_")
    assert data["embeddingStatus"] == "pending" and data["status"] == "processing"
    assert data["vault"] == "Library" and data["deduplicated"] is False
    assert len(data["jobIds"]) == 2 and data["mimeType"] == "image/png"


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({}, "invalid_input: give exactly one of sourceUrl, artifactId, imageBase64"),
        (
            {"imageBase64": "AAAA", "sourceUrl": "https://a.example/x.png"},
            "invalid_input: give exactly one",
        ),
        ({"sourceUrl": "http://127.0.0.1/x.png"}, "unsafe_url: "),
        (
            {"imageBase64": base64.b64encode(b"<svg></svg>").decode()},
            "invalid_image: the bytes are SVG",
        ),
        ({"imageBase64": "AAAA", "unknownField": 1}, "invalid_input: unknownField"),
        ({"artifactId": "art_123"}, "not_found: artifact not found"),
        (
            {"imageBase64": base64.b64encode(picture(31)).decode(), "title": "a\x00b"},
            "invalid_input: title: must not contain a NUL character",
        ),
        (
            {"imageBase64": base64.b64encode(picture(32)).decode(), "tags": ["ok", "a\x00b"]},
            "invalid_input: tags: must not contain a NUL character",
        ),
        (
            {"imageBase64": base64.b64encode(picture(33)).decode(), "altText": "\x00"},
            "invalid_input: altText: must not contain a NUL character",
        ),
        (
            {"image_base64": base64.b64encode(picture(34)).decode()},
            "invalid_input: image_base64: is not a known field; did you mean `imageBase64`?",
        ),
        (
            {"imageBase64": "AAAA", "project_identifier": "x"},
            "invalid_input: project_identifier: is not a known field",
        ),
    ],
)
async def test_save_errors_have_stable_codes(
    client_as: Callable[[str], Client[Any]], alice: Any, arguments: dict[str, Any], expected: str
) -> None:
    async with client_as(alice.key) as client:
        result = await client.call_tool("image_asset_save", arguments, raise_on_error=False)
    assert result.is_error
    assert result.content[0].text.startswith(expected)  # type: ignore[union-attr]


async def test_a_read_only_key_cannot_save(
    client_as: Callable[[str], Client[Any]], make_person: Callable[..., Any]
) -> None:
    reader = await make_person("reader@example.com", scopes=("read",))
    async with client_as(reader.key) as client:
        result = await client.call_tool(
            "image_asset_save",
            {"imageBase64": base64.b64encode(picture(22)).decode()},
            raise_on_error=False,
        )
    assert result.is_error and result.content[0].text.startswith("forbidden: ")  # type: ignore[union-attr]


async def test_save_by_url_over_mcp_becomes_ready(
    client_as: Callable[[str], Client[Any]], alice: Any, saving: MemoryServices, web: Any
) -> None:
    from memory_tools.serving.job_worker import job_worker
    from memory_tools.testing.web import Reply

    web.routes["/cat.png"] = Reply(body=picture(23), headers={"Content-Type": "image/png"})
    arguments = {
        "sourceUrl": web.url("/cat.png", host="img.test"),
        "altText": "a gradient",
        "idempotencyKey": "url-1",
    }
    async with client_as(alice.key) as client:
        first = (await client.call_tool("image_asset_save", arguments)).structured_content
        assert first is not None and first["embeddingStatus"] == "pending"
        await job_worker(saving).drain()
        again = (await client.call_tool("image_asset_save", arguments)).structured_content
    assert again is not None
    assert again["assetId"] == first["assetId"] and again["replayed"] is True
    assert (again["status"], again["embeddingStatus"]) == ("ready", "ready")


@pytest.mark.parametrize("scheme", ["data", "mailto", "javascript"])
async def test_a_save_redirected_to_a_non_web_scheme_is_unsafe_url_without_a_traceback(
    client_as: Callable[[str], Client[Any]],
    alice: Any,
    saving: MemoryServices,
    web: Any,
    scheme: str,
) -> None:
    """httpx cannot represent these redirects: the save failed as ``internal``, with an
    error-level traceback in the log."""
    from structlog.testing import capture_logs

    from memory_tools.testing.web import Reply

    location = {"data": "data:image/png;base64,iVBORw0KGgo=", "mailto": "mailto:a@example.com"}
    web.routes["/away"] = Reply(
        status=302, headers={"Location": location.get(scheme, "javascript:alert(1)")}
    )
    with capture_logs() as logs:
        async with client_as(alice.key) as client:
            result = await client.call_tool(
                "image_asset_save",
                {"sourceUrl": web.url("/away", host="img.test")},
                raise_on_error=False,
            )
    assert result.is_error
    assert result.content[0].text == (  # type: ignore[union-attr]
        f"unsafe_url: the server redirected to a {scheme}: URL; only http(s) is followed"
    )
    assert [entry for entry in logs if entry["log_level"] in ("error", "critical")] == []
    assert [entry for entry in logs if entry.get("exc_info")] == []


@pytest.mark.parametrize(
    ("file_name", "kept", "title"),
    [
        ("C:\\Users\\alice\\Pictures\\IMG_0423.JPG", "IMG_0423.JPG", "IMG_0423"),
        ("../../etc/\x1b[31mred\x07 kite.png", "[31mred kite.png", "[31mred kite"),
        ("", None, "Image PNG 48x48"),
        ("n" * 300 + ".webp", "n" * 250 + ".webp", "n" * 240),
    ],
)
async def test_the_file_name_is_kept_and_titles_an_untitled_save(
    client_as: Callable[[str], Client[Any]],
    alice: Any,
    file_name: str,
    kept: str | None,
    title: str,
) -> None:
    async with client_as(alice.key) as client:
        saved = await client.call_tool(
            "image_asset_save",
            {"imageBase64": base64.b64encode(picture(41)).decode(), "fileName": file_name},
        )
        assert saved.structured_content is not None
        got = await client.call_tool(
            "image_asset_get", {"assetId": saved.structured_content["assetId"]}
        )
    view = got.structured_content
    assert view is not None
    assert (view["originalFileName"], view["title"]) == (kept, title)
    # Not the caller's words: the file name makes no fused vector.
    assert [r["representation"] for r in view["representations"]] == ["visual"]


async def test_a_file_name_with_nul_or_too_long_is_refused_and_saves_nothing(
    client_as: Callable[[str], Client[Any]], alice: Any
) -> None:
    async with client_as(alice.key) as client:
        for name, expected in (
            ("a\x00.png", "invalid_input: fileName: must not contain a NUL character"),
            ("p" * 4097, "invalid_input: fileName: "),
        ):
            refused = await client.call_tool(
                "image_asset_save",
                {"imageBase64": base64.b64encode(picture(42)).decode(), "fileName": name},
                raise_on_error=False,
            )
            assert refused.is_error
            assert refused.content[0].text.startswith(expected)  # type: ignore[union-attr]
        listed = await client.call_tool("image_asset_list", {})
    assert listed.structured_content is not None and listed.structured_content["items"] == []
