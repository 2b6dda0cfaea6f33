"""Progress notifications over HTTP, read by the official MCP SDK client: a save by URL and a
recursive folder deletion report their steps when the request asks for progress, and work
exactly the same when it does not."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import pytest

from memory_db.embedding import LocalEmbedder
from memory_tools import MemoryServices
from memory_tools.serving import build_http_server, json_answers
from memory_tools.testing.web import Reply, WebServer

from ..pictures import b64, picture

Reports = list[tuple[float, float | None, str | None]]


@pytest.fixture
def progress_services(saving: MemoryServices) -> MemoryServices:
    return replace(saving, embedder=LocalEmbedder())


async def _session_calls(
    url: str, key: str, calls: Sequence[tuple[str, dict[str, Any], Reports | None]]
) -> list[dict[str, Any]]:
    """Run ``calls`` in one official SDK session; a list collects that call's progress."""
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    answers: list[dict[str, Any]] = []
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        for tool, arguments, reports in calls:
            callback = None
            if reports is not None:
                sink = reports

                async def collect(
                    progress: float, total: float | None, message: str | None, sink: Reports = sink
                ) -> None:
                    sink.append((progress, total, message))

                callback = collect
            result = await session.call_tool(tool, arguments, progress_callback=callback)
            assert not result.is_error, result.content
            assert result.structured_content is not None
            answers.append(result.structured_content)
    return answers


async def test_a_url_save_reports_its_steps_when_asked(
    progress_services: MemoryServices,
    make_person: Callable[..., Any],
    web: WebServer,
    serve_http: Any,
) -> None:
    person = await make_person("progress@example.com")
    web.routes["/p1.png"] = Reply(body=picture(31), headers={"Content-Type": "image/png"})
    web.routes["/p2.png"] = Reply(body=picture(32), headers={"Content-Type": "image/png"})
    reports: Reports = []
    async with serve_http(build_http_server(progress_services)) as url:
        asked, unasked = await _session_calls(
            url,
            person.key,
            [
                ("image_asset_save", {"sourceUrl": web.url("/p1.png", host="img.test")}, reports),
                ("image_asset_save", {"sourceUrl": web.url("/p2.png", host="img.test")}, None),
            ],
        )
    assert [(done, total) for done, total, _ in reports] == [(0, 3), (1, 3), (2, 3), (3, 3)]
    messages = [message or "" for _, _, message in reports]
    assert messages[0] == "fetching the image" and messages[1].startswith("checking the image")
    assert messages[-1] == "saved"
    # Without a progress token the save works the same and nothing is sent.
    assert asked["embeddingStatus"] == unasked["embeddingStatus"] == "pending"
    assert asked["assetId"] != unasked["assetId"]


async def test_a_recursive_folder_deletion_reports_as_it_deletes(
    progress_services: MemoryServices, make_person: Callable[..., Any], serve_http: Any
) -> None:
    person = await make_person("deleter@example.com")
    async with serve_http(build_http_server(progress_services)) as url:
        (project,) = await _session_calls(
            url, person.key, [("image_project_create", {"name": "Trip"}, None)]
        )
        pid = project["projectId"]
        folders = await _session_calls(
            url,
            person.key,
            [
                ("image_folder_create", {"projectId": pid, "name": "Old"}, None),
                ("image_folder_create", {"projectId": pid, "name": "Keep"}, None),
            ],
        )
        old, keep = folders[0]["folderId"], folders[1]["folderId"]
        saves = [
            (
                "image_asset_save",
                {
                    "imageBase64": base64.b64encode(picture(60 + i)).decode(),
                    "projectId": pid,
                    "folderId": old if i < 3 else keep,
                },
                None,
            )
            for i in range(5)
        ]
        await _session_calls(url, person.key, saves)
        reports: Reports = []
        dry_reports: Reports = []
        target = {"projectId": pid, "folderId": old, "recursive": True}
        (dry,) = await _session_calls(
            url, person.key, [("image_folder_delete", target, dry_reports)]
        )
        (deleted,) = await _session_calls(
            url,
            person.key,
            [("image_folder_delete", {**target, "confirm": dry["confirm"]}, reports)],
        )
        # Without a progress token the same deletion works; the reports go nowhere.
        other = {"projectId": pid, "folderId": keep, "recursive": True}
        (other_dry,) = await _session_calls(url, person.key, [("image_folder_delete", other, None)])
        (other_deleted,) = await _session_calls(
            url,
            person.key,
            [("image_folder_delete", {**other, "confirm": other_dry["confirm"]}, None)],
        )
    assert dry_reports == []  # a dry run deletes nothing and reports nothing
    assert dry["deleted"] is False and deleted["deleted"] is True and deleted["assets"] == 3
    assert [(done, total) for done, total, _ in reports] == [(0, 3), (1, 3), (2, 3), (3, 3)]
    assert reports[0][2] == "deleting 3 image(s) in 1 folder(s)"
    assert reports[-1][2] == "deleting images: 3 of 3 done"
    assert other_deleted["deleted"] is True and other_deleted["assets"] == 2


async def _raw_call(
    url: str, key: str, params: dict[str, Any], *, read_timeout: float = 30.0
) -> tuple[str, list[Any], str]:
    """A ``tools/call`` POSTed as a handshake-era client sends it: the answer's content type,
    its JSON-RPC messages (one JSON body, or every event of a stream) and its text."""
    import json

    import httpx

    headers = {
        "Authorization": f"Bearer {key}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": "2025-11-25",
    }
    body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}
    async with httpx.AsyncClient(timeout=httpx.Timeout(30.0, read=read_timeout)) as http:
        answer = await http.post(url, json=body, headers=headers)
    assert answer.status_code == 200, answer.text
    kind = answer.headers["content-type"].split(";")[0]
    if kind == "text/event-stream":
        events = [line[5:] for line in answer.text.splitlines() if line.startswith("data:")]
        return kind, [json.loads(event) for event in events if event.strip()], answer.text
    return kind, [answer.json()], answer.text


async def test_a_call_without_a_progress_token_is_answered_as_json(
    progress_services: MemoryServices,
    make_person: Callable[..., Any],
    web: WebServer,
    serve_http: Any,
) -> None:
    """An event stream only when the call may send progress: a call without a token gets its
    answer as one JSON body (cheaper); with a token, its reports and answer as a stream."""
    person = await make_person("forms@example.com")
    web.routes["/p3.png"] = Reply(body=picture(33), headers={"Content-Type": "image/png"})
    web.routes["/p4.png"] = Reply(body=picture(34), headers={"Content-Type": "image/png"})
    async with serve_http(build_http_server(progress_services), stateless=True) as url:
        listed = await _raw_call(url, person.key, {"name": "image_asset_list", "arguments": {}})
        silent = await _raw_call(
            url,
            person.key,
            {
                "name": "image_asset_save",
                "arguments": {"sourceUrl": web.url("/p3.png", host="img.test")},
            },
        )
        asked = await _raw_call(
            url,
            person.key,
            {
                "name": "image_asset_save",
                "arguments": {"sourceUrl": web.url("/p4.png", host="img.test")},
                "_meta": {"progressToken": "t-1"},
            },
        )
    for kind, messages, _text in (listed, silent):
        assert kind == "application/json"
        (answer,) = messages
        assert answer["id"] == 7 and not answer["result"]["isError"], answer
    assert silent[1][0]["result"]["structuredContent"]["assetId"]
    kind, messages, _text = asked
    assert kind == "text/event-stream"
    progress = [m for m in messages if m.get("method") == "notifications/progress"]
    assert [p["params"]["progressToken"] for p in progress] == ["t-1"] * 4
    assert messages[-1]["id"] == 7 and messages[-1]["result"]["structuredContent"]["assetId"]


async def test_a_late_answer_comes_as_a_stream_within_a_short_read_timeout(
    progress_services: MemoryServices,
    make_person: Callable[..., Any],
    serve_http: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A JSON answer would send its headers only at the end: a call still running after the
    deferral gets a stream at once, kept alive, so a client whose read timeout is shorter
    than the call still gets its answer."""
    monkeypatch.setattr(json_answers, "DEFER_SECONDS", 0.2)
    monkeypatch.setattr(json_answers, "PING_SECONDS", 0.4)
    person = await make_person("late@example.com")
    async with serve_http(build_http_server(progress_services), stateless=True) as url:
        saved = await _raw_call(
            url,
            person.key,
            {"name": "image_asset_save", "arguments": {"imageBase64": b64(picture(35))}},
        )
        asset_id = saved[1][0]["result"]["structuredContent"]["assetId"]
        # No worker runs here: the image stays pending and the call waits its 2 s out.
        kind, messages, raw = await _raw_call(
            url,
            person.key,
            {"name": "image_asset_get", "arguments": {"assetId": asset_id, "waitSeconds": 2}},
            read_timeout=1.0,
        )
    assert kind == "text/event-stream"
    assert raw.count(": ping") >= 2  # kept alive under the client's read timeout
    (answer,) = messages
    assert answer["id"] == 7 and not answer["result"]["isError"], answer
    assert answer["result"]["structuredContent"]["embeddingStatus"] == "pending"


def test_the_answer_of_a_stream_is_one_event() -> None:
    body = b'{"jsonrpc":"2.0","id":1,"result":{}}'
    assert json_answers.stream_event(body) == b"event: message\r\ndata: " + body + b"\r\n\r\n"
    # Lines of a message each get their data field (JSON from the SDK has none; a guard).
    assert json_answers.stream_event(b"{\n}") == b"event: message\r\ndata: {\r\ndata: }\r\n\r\n"


async def test_the_sdk_still_decides_what_is_not_a_quick_request(
    progress_services: MemoryServices, make_person: Callable[..., Any], serve_http: Any
) -> None:
    """A client that takes no stream is refused as before (a late answer could not reach it),
    and a notification is acknowledged, as the SDK does."""
    import httpx

    person = await make_person("forms2@example.com")
    headers = {
        "Authorization": f"Bearer {person.key}",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": "2025-11-25",
    }
    params: dict[str, Any] = {"name": "image_asset_list", "arguments": {}}
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    both = {**headers, "Accept": "application/json, text/event-stream"}
    async with (
        serve_http(build_http_server(progress_services), stateless=True) as url,
        httpx.AsyncClient(timeout=30) as http,
    ):
        json_only = await http.post(
            url, json=call, headers={**headers, "Accept": "application/json"}
        )
        noted = await http.post(url, json=note, headers=both)
    assert json_only.status_code == 406
    assert noted.status_code == 202


async def test_a_large_body_keeps_the_stream(
    progress_services: MemoryServices,
    make_person: Callable[..., Any],
    serve_http: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A body over the bytes searched for a progress token (an image as base64) is answered
    as the SDK answers it, as a stream."""
    monkeypatch.setattr(json_answers, "SEARCHED_BODY_BYTES", 300)
    person = await make_person("large@example.com")
    async with serve_http(build_http_server(progress_services), stateless=True) as url:
        small = await _raw_call(url, person.key, {"name": "image_asset_list", "arguments": {}})
        large = await _raw_call(
            url, person.key, {"name": "image_asset_list", "arguments": {"tags": ["t" * 40] * 8}}
        )
    assert small[0] == "application/json" and large[0] == "text/event-stream"
    assert not large[1][-1]["result"]["isError"]


async def test_a_client_gone_before_its_body_is_whole_is_not_an_error(
    progress_services: MemoryServices,
    make_person: Callable[..., Any],
    serve_http: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A client that leaves while its body is sent ran nothing and is no server error."""
    import logging
    from urllib.parse import urlsplit

    person = await make_person("gone@example.com")
    async with serve_http(build_http_server(progress_services), stateless=True) as url:
        where = urlsplit(url)
        reader, writer = await asyncio.open_connection(where.hostname, where.port)
        head = (
            f"POST {where.path} HTTP/1.1\r\nHost: {where.netloc}\r\n"
            f"Authorization: Bearer {person.key}\r\nContent-Type: application/json\r\n"
            "Accept: application/json, text/event-stream\r\nContent-Length: 5000\r\n\r\n"
        )
        with caplog.at_level(logging.ERROR):
            writer.write(head.encode() + b'{"jsonrpc": "2.0", "id": 1,')
            await writer.drain()
            await asyncio.sleep(0.3)
            writer.close()
            await asyncio.sleep(0.5)
            listed = await _raw_call(url, person.key, {"name": "image_asset_list", "arguments": {}})
        del reader
    assert listed[0] == "application/json"
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
