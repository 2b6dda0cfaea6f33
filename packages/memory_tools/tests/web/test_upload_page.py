"""The Upload page and its session endpoints over real HTTP: the signed upload flow without an
API key in the page, waiting for the embedding, saving by URL, and every refusal."""

from __future__ import annotations

import hashlib
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from sqlalchemy import text

from memory_db import Database, MemorySettings
from memory_db.embedding import LocalEmbedder
from memory_db.storage import LocalAssetObjectStore, UrlSigner
from memory_tools import MemoryServices
from memory_tools.access import authenticate
from memory_tools.ingest import AddressPolicy, FetchPolicy, MappedResolver, SafeFetcher
from memory_tools.operations import admin
from memory_tools.serving.job_worker import job_worker
from memory_tools.testing.web import Reply, WebServer
from memory_tools.testing.web_app import WebApp, WebClient, serve_web_app
from memory_tools.workflows import projects

from ..pictures import picture
from ..state_waits import record_waits
from ..web_routes import ALLOWED_NAMES, HOSTS


async def _start(client: WebClient, data: bytes, **extra: Any) -> httpx.Response:
    return await client.call(
        "POST",
        "/app/uploads",
        json={"contentType": "image/png", "contentLength": len(data), **extra},
    )


async def _upload(client: WebClient, data: bytes, **extra: Any) -> dict[str, Any]:
    """Start, PUT and complete one upload as upload.js does; the saved asset."""
    started = await _start(client, data, **extra)
    assert started.status_code == 201, started.text
    ticket = started.json()
    # A local-store link is a path on this server: it works whatever host the page was opened
    # at, and passes the page's connect-src 'self'.
    assert ticket["url"].startswith("/objects/") and "signature=" in ticket["url"]
    assert ticket["completeUrl"] == f"/app/uploads/{ticket['uploadId']}/complete"
    headers = {k: v for k, v in ticket["headers"].items() if k.lower() != "content-length"}
    put = await client.http.put(ticket["url"], content=data, headers=headers)
    assert put.status_code == 200, put.text
    done = await client.call("POST", ticket["completeUrl"], json={})
    assert done.status_code == 200, done.text
    return done.json()


async def _project_and_folder(webapp: WebApp, key: str) -> tuple[str, str]:
    services = webapp.services
    async with services.database.unit_of_work() as uow:
        caller = await authenticate(uow, key)
        project = await projects.create_project(
            uow, caller, services, vault="Library", name="Trips", description=None
        )
        folder = await projects.create_folder(
            uow,
            caller,
            services,
            vault="Library",
            project_id=project.project_id,
            parent_id=None,
            name="2026",
        )
    return project.project_id, folder.folder_id


async def test_the_page_offers_the_target_from_the_query_and_loads_its_script(
    signed_in: WebClient, webapp: WebApp, make_person: Callable[..., Any]
) -> None:
    alice = await make_person("alice@example.com")
    project_id, folder_id = await _project_and_folder(webapp, alice.key)
    page = await signed_in.get(f"/upload?vault=Library&projectId={project_id}&folderId={folder_id}")
    assert page.status_code == 200, page.text
    assert f'<option value="{project_id}" selected>Trips</option>' in page.text
    assert f'<option value="{folder_id}" selected>/2026</option>' in page.text
    assert 'data-max-bytes="' + str(webapp.services.settings.asset_max_bytes) in page.text
    nonce = page.headers["content-security-policy"].split("'nonce-")[1].split("'")[0]
    assert f'<script nonce="{nonce}" src="/static/upload.js?v=' in page.text
    plain = await signed_in.get("/upload")
    assert '<option value="" selected>' not in plain.text  # no project chosen: "No project"
    assert "Library" in plain.text and "Choose a project first" in plain.text
    # Without scripts nothing can be sent, and the page says so instead of doing nothing.
    assert "<noscript>" in plain.text and "Uploading needs JavaScript" in plain.text
    script = await signed_in.get("/static/upload.js")
    assert script.status_code == 200 and "XMLHttpRequest" in script.text


async def test_another_owners_vault_project_or_folder_is_not_found(
    signed_in: WebClient, webapp: WebApp, make_person: Callable[..., Any]
) -> None:
    bob = await make_person("bob@example.com")
    project_id, folder_id = await _project_and_folder(webapp, bob.key)
    for query in (
        "vault=bob@example.com/Library",
        f"projectId={project_id}",
        f"projectId={project_id}&folderId={folder_id}",
        "projectId=apr_missing",
    ):
        page = await signed_in.get(f"/upload?{query}")
        assert page.status_code == 404, (query, page.status_code)
        assert "not_found" in page.text and "Trips" not in page.text


async def test_three_files_upload_through_the_session_and_each_becomes_ready(
    signed_in: WebClient,
    webapp: WebApp,
    make_person: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    alice = await make_person("alice@example.com")
    project_id, folder_id = await _project_and_folder(webapp, alice.key)
    saved = [
        await _upload(
            signed_in, picture(seed), projectId=project_id, folderId=folder_id, tags=["harbour"]
        )
        for seed in (1, 2, 3)
    ]
    assert [s["embeddingStatus"] for s in saved] == ["pending"] * 3
    assert len({s["assetId"] for s in saved}) == 3
    # Each row waits with a long request that the worker's notification ends early.
    answers: dict[str, dict[str, Any]] = {}

    async def wait(asset_id: str) -> None:
        answer = await signed_in.call("GET", f"/app/assets/{asset_id}/state?waitSeconds=20")
        assert answer.status_code == 200, answer.text
        answers[asset_id] = answer.json()

    waits = record_waits(monkeypatch)
    async with anyio.create_task_group() as group:
        for item in saved:
            group.start_soon(wait, item["assetId"])
        with anyio.fail_after(30):  # a hang guard: every row's request is waiting
            while waits.entered < len(saved):
                await anyio.sleep(0.02)
        await job_worker(webapp.services).drain()
    # Every wait was ended by the worker's notifications, none by the 20 s deadline.
    assert waits.ended and set(waits.ended) == {"notified"}, waits.ended
    for item in saved:
        state = answers[item["assetId"]]
        assert state["embeddingStatus"] == "ready" and state["status"] == "ready"
        assert state["failureCode"] is None
    listed = await signed_in.get(f"/assets/{saved[0]['assetId']}")
    assert listed.status_code in (200, 404)  # the asset page is another page group's


async def test_the_bearer_routes_still_work_beside_the_session_routes(
    signed_in: WebClient, webapp: WebApp, make_person: Callable[..., Any]
) -> None:
    alice = await make_person("alice@example.com")
    data = picture(9)
    async with httpx.AsyncClient(base_url=webapp.base_url) as http:
        started = await http.post(
            "/uploads",
            json={"contentType": "image/png", "contentLength": len(data)},
            headers={"Authorization": f"Bearer {alice.key}"},
        )
        assert started.status_code == 201, started.text
        ticket = started.json()
        assert ticket["completeUrl"] == f"{webapp.base_url}/uploads/{ticket['uploadId']}/complete"
        headers = {k: v for k, v in ticket["headers"].items() if k.lower() != "content-length"}
        assert (await http.put(ticket["url"], content=data, headers=headers)).status_code == 200
        done = await http.post(
            ticket["completeUrl"], json={}, headers={"Authorization": f"Bearer {alice.key}"}
        )
        assert done.status_code == 200, done.text
        # The session's complete route finishes only its own caller's uploads, by either route.
        again = await signed_in.call("POST", f"/app/uploads/{ticket['uploadId']}/complete", json={})
        assert again.status_code == 200 and again.json()["assetId"] == done.json()["assetId"]


@pytest.mark.parametrize(
    ("body", "status", "code", "words"),
    [
        ({"contentType": "image/svg+xml", "contentLength": 10}, 422, "invalid_input", "image/gif"),
        ({"contentType": "image/png", "contentLength": 10**12}, 422, "invalid_input", "between 1"),
        ({"contentType": "image/png", "contentLength": 0}, 422, "invalid_input", "contentLength"),
        ({"contentType": "image/png", "contentLength": 10, "x": 1}, 422, "invalid_input", "x"),
        ({"contentType": "image/png", "content_length": 10}, 422, "invalid_input", "did you mean"),
        (
            {"contentType": "image/png", "contentLength": 10, "vault": "bob@example.com/Library"},
            404,
            "not_found",
            "not found",
        ),
        ({"contentType": "image/png", "contentLength": 5_000_000}, 507, "quota_exceeded", "quota"),
    ],
)
async def test_refused_starts_say_why_and_reserve_nothing(
    browser_for: Callable[[], WebClient],
    make_person: Callable[..., Any],
    database: Database,
    body: dict[str, Any],
    status: int,
    code: str,
    words: str,
) -> None:
    await admin.create_identity(database, "small@example.com", 1_000_000)
    small = await make_person("small@example.com")
    await make_person("bob@example.com")
    async with browser_for() as client:
        await client.sign_in(small.key)
        answer = await client.call("POST", "/app/uploads", json=body)
        assert answer.status_code == status, answer.text
        error = answer.json()["error"]
        assert error["code"] == code and words in error["message"], error
        async with database.engine.connect() as conn:
            reserved = (
                await conn.execute(
                    text(
                        "SELECT coalesce(sum(reserved_bytes), 0) FROM mem_asset_namespaces "
                        "WHERE owner_identity = 'small@example.com'"
                    )
                )
            ).scalar_one()
        assert reserved == 0


async def test_without_a_session_or_csrf_nothing_is_started(
    browser_for: Callable[[], WebClient], make_person: Callable[..., Any], webapp: WebApp
) -> None:
    alice = await make_person("alice@example.com")
    body = {"contentType": "image/png", "contentLength": 10}
    async with WebClient(webapp.base_url) as anonymous:
        answer = await anonymous.call("POST", "/app/uploads", json=body)
        assert answer.status_code == 401 and answer.json()["error"]["code"] == "unauthenticated"
        state = await anonymous.call("GET", "/app/assets/ast_x/state")
        assert state.status_code == 401
        page = await anonymous.get("/upload")
        assert page.status_code == 303 and page.headers["location"].startswith("/sign-in")
    async with browser_for() as client:
        await client.sign_in(alice.key)
        no_token = await client.call(
            "POST", "/app/uploads", json=body, headers={"X-CSRF-Token": ""}
        )
        assert no_token.status_code == 403 and no_token.json()["error"]["code"] == "forbidden"
        wrong_site = await client.call(
            "POST", "/app/uploads", json=body, headers={"Origin": "https://evil.example"}
        )
        assert wrong_site.status_code == 403
        by_url = await client.call(
            "POST",
            "/app/uploads/url",
            json={"sourceUrl": "https://example.com/a.png"},
            headers={"X-CSRF-Token": "wrong"},
        )
        assert by_url.status_code == 403


async def test_another_owners_upload_and_asset_are_not_found(
    browser_for: Callable[[], WebClient], make_person: Callable[..., Any]
) -> None:
    alice = await make_person("alice@example.com")
    bob = await make_person("bob@example.com")
    async with browser_for() as mine, browser_for() as theirs:
        await mine.sign_in(alice.key)
        await theirs.sign_in(bob.key)
        data = picture(4)
        started = (await _start(mine, data)).json()
        stolen = await theirs.call("POST", started["completeUrl"], json={})
        assert stolen.status_code == 404 and stolen.json()["error"]["code"] == "not_found"
        saved = await _upload(mine, picture(5))
        peek = await theirs.call("GET", f"/app/assets/{saved['assetId']}/state")
        missing = await theirs.call("GET", "/app/assets/ast_missing/state")
        assert peek.status_code == missing.status_code == 404
        assert peek.json()["error"] == missing.json()["error"] | {"message": "asset not found"}
        early = await mine.call("POST", started["completeUrl"], json={})
        assert (
            early.status_code == 422 and "nothing was uploaded" in early.json()["error"]["message"]
        )
        bad_wait = await mine.call("GET", f"/app/assets/{saved['assetId']}/state?waitSeconds=99")
        assert bad_wait.status_code == 422 and "waitSeconds" in bad_wait.json()["error"]["message"]


async def test_a_lying_file_is_refused_as_invalid_image_on_completion(signed_in: WebClient) -> None:
    jpeg = picture(6)  # PNG bytes declared as JPEG
    started = await signed_in.call(
        "POST", "/app/uploads", json={"contentType": "image/jpeg", "contentLength": len(jpeg)}
    )
    ticket = started.json()
    put = await signed_in.http.put(
        ticket["url"], content=jpeg, headers={"Content-Type": "image/jpeg"}
    )
    assert put.status_code == 200
    done = await signed_in.call("POST", ticket["completeUrl"], json={})
    assert done.status_code == 422 and done.json()["error"]["code"] == "invalid_image"


# --- saving by URL --------------------------------------------------------------------------


@pytest.fixture
async def fetching_app(database: Database, tmp_path: Path, web: WebServer) -> AsyncIterator[WebApp]:
    """The web app with an SSRF-safe fetcher that may reach only img.test (the test server)."""
    web.routes["/photo.png"] = Reply(body=picture(7), headers={"Content-Type": "image/png"})
    policy = FetchPolicy(
        max_bytes=1_000_000,
        allow_http=True,
        allowed_ports=frozenset({80, 443, web.port}),
        addresses=AddressPolicy(loopback_names=ALLOWED_NAMES),
    )
    fetcher = SafeFetcher(policy, resolver=MappedResolver(HOSTS))

    def make(base_url: str) -> MemoryServices:
        store = LocalAssetObjectStore(
            tmp_path / "objects", UrlSigner(hashlib.sha256(b"u").digest()), base_url
        )
        return MemoryServices(
            database=database,
            store=store,
            settings=MemorySettings(memory_data_dir=tmp_path / "data"),
            embedder=LocalEmbedder(),
            fetcher=fetcher,
            public_base_url=base_url,
        )

    async with serve_web_app(make) as app:
        yield app
    await fetcher.aclose()


async def test_an_image_url_is_saved_like_the_save_tool_and_unsafe_ones_are_refused(
    fetching_app: WebApp, web: WebServer, make_person: Callable[..., Any]
) -> None:
    alice = await make_person("alice@example.com")
    async with WebClient(fetching_app.base_url) as client:
        await client.sign_in(alice.key)
        saved = await client.call(
            "POST",
            "/app/uploads/url",
            json={"sourceUrl": web.url("/photo.png", host="img.test"), "tags": ["found"]},
        )
        assert saved.status_code == 201, saved.text
        asset = saved.json()
        assert asset["embeddingStatus"] == "pending" and asset["mimeType"] == "image/png"
        assert "/photo.png" in web.requested
        inside = await client.call(
            "POST", "/app/uploads/url", json={"sourceUrl": web.url("/photo.png")}
        )
        assert inside.status_code == 422 and inside.json()["error"]["code"] == "unsafe_url"
        typo = await client.call("POST", "/app/uploads/url", json={"imageUrl": "https://x.test"})
        assert typo.status_code == 422 and typo.json()["error"]["code"] == "invalid_input"


async def test_three_uploads_at_once_as_the_page_sends_them(signed_in: WebClient) -> None:
    saved: list[dict[str, Any]] = []

    async def one(seed: int) -> None:
        saved.append(await _upload(signed_in, picture(seed), tags=["harbour", "evening"]))

    async with anyio.create_task_group() as group:
        for seed in (11, 12, 13):
            group.start_soon(one, seed)
    assert len({item["assetId"] for item in saved}) == 3


async def test_an_empty_folder_of_the_library_links_to_uploading_there(
    signed_in: WebClient, webapp: WebApp, make_person: Callable[..., Any]
) -> None:
    alice = await make_person("alice@example.com")
    project_id, folder_id = await _project_and_folder(webapp, alice.key)
    library = await signed_in.get(f"/library?vault=Library&project={project_id}&folder={folder_id}")
    assert library.status_code == 200, library.text
    found = re.search(
        r'<a class="button primary" href="(/upload\?[^"]+)">Upload images here', library.text
    )
    assert found is not None, library.text
    link = found.group(1).replace("&amp;", "&")
    assert link == f"/upload?vault=Library&projectId={project_id}&folderId={folder_id}"
    page = await signed_in.get(link)
    assert f'<option value="{folder_id}" selected>/2026</option>' in page.text
