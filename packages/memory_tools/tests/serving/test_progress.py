"""Progress notifications over HTTP, read by the official MCP SDK client: a save by URL and a
recursive folder deletion report their steps when the request asks for progress, and work
exactly the same when it does not."""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import pytest

from memory_db.embedding import LocalEmbedder
from memory_tools import MemoryServices
from memory_tools.serving import build_http_server
from memory_tools.testing.web import Reply, WebServer

from ..pictures import picture

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
