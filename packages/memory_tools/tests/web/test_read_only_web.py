"""A server started with --read-only changes nothing through its web app either.

The MCP tools of such a server are only the read-only ones; the web app reaches every workflow,
so each workflow that changes something refuses on a read-only server itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from fastmcp import Client

from memory_tools import MemoryServices, build_memory_server
from memory_tools.testing.web_app import WebApp, WebClient, serve_web_app

from ..pictures import b64, picture

_OTHER = "ast_" + "z" * 26  # a group's second image (the refusal comes before any lookup)


async def _seed(webapp: WebApp, key: str) -> tuple[str, str]:
    """A project and an image in it, made over MCP on the writable server."""
    async with Client(build_memory_server(replace(webapp.services, default_api_key=key))) as mcp:
        project = (await mcp.call_tool("image_project_create", {"name": "Trips"})).data
        saved = await mcp.call_tool(
            "image_asset_save",
            {
                "imageBase64": b64(picture(1)),
                "title": "Harbour",
                "projectId": project.projectId,
            },
        )
        deleted = await mcp.call_tool(
            "image_asset_save",
            {"imageBase64": b64(picture(7)), "title": "Gone"},
        )
        await mcp.call_tool("image_asset_delete", {"assetId": deleted.data.assetId})
    return project.projectId, saved.data.assetId


async def test_every_change_is_refused_on_a_read_only_server(
    webapp: WebApp, make_person: Callable[..., Any]
) -> None:
    alice = await make_person("alice@example.com")
    second = await make_person("alice@example.com")  # another key of alice's, to pause
    await make_person("bob@example.com")
    project_id, asset_id = await _seed(webapp, alice.key)

    def read_only(base_url: str) -> MemoryServices:
        return replace(webapp.services, read_only=True, public_base_url=base_url)

    async with serve_web_app(read_only) as frozen, WebClient(frozen.base_url) as browser:
        assert (await browser.sign_in(alice.key)).status_code == 303  # reading is allowed
        changes = [
            ("/library/projects", {"vault": "Library", "name": "New", "back": "/library"}),
            ("/library/folders", {"vault": "Library", "project": project_id, "name": "Inbox"}),
            (f"/assets/{asset_id}/edit", {"title": "Renamed", "back": f"/assets/{asset_id}"}),
            (f"/assets/{asset_id}/move", {"place": "", "back": f"/assets/{asset_id}"}),
            (f"/assets/{asset_id}/delete", {"back": f"/assets/{asset_id}"}),
            ("/sharing/grant", {"vault": "Library", "grantee": "bob@example.com"}),
            ("/keys/create", {"label": "new", "scopes": "read", "back": "/keys"}),
            ("/keys/pause", {"key": second.key_id, "back": "/keys"}),
            ("/duplicates/keep", {"asset": [asset_id, _OTHER], "keep": asset_id}),
            ("/duplicates/dismiss", {"asset": [asset_id, _OTHER], "vault": "Library"}),
        ]
        for path, form in changes:
            answer = await browser.submit(path, form)
            # A refused form goes back with the reason shown once on the page it returns to.
            location = answer.headers.get("location")
            shown = (await browser.get(location)).text if location else answer.text
            assert "read-only" in shown, path
        saved_by_url = await browser.call(
            "POST", "/app/uploads/url", json={"sourceUrl": "https://img.test/a.png"}
        )
        assert saved_by_url.status_code == 403 and "read-only" in saved_by_url.text
        started = await browser.call(
            "POST", "/app/uploads", json={"contentType": "image/png", "contentLength": 10}
        )
        assert started.status_code == 403 and "read-only" in started.text

    # Nothing changed: the image kept its title and place, no project or grant was added.
    async with Client(
        build_memory_server(replace(webapp.services, default_api_key=alice.key))
    ) as mcp:
        got = (await mcp.call_tool("image_asset_get", {"assetId": asset_id})).structured_content
        assert got is not None and got["title"] == "Harbour" and got["projectId"] == project_id
        projects = (await mcp.call_tool("image_project_list", {})).structured_content
        assert projects is not None and [p["name"] for p in projects["projects"]] == ["Trips"]
        vaults = (await mcp.call_tool("image_vault_list", {})).structured_content
        assert vaults is not None
        assert all(not v.get("sharedWith") for v in vaults["vaults"]), vaults


async def test_a_key_that_cannot_change_anything_is_shown_no_forms_that_would_be_refused(
    webapp: WebApp, make_person: Callable[..., Any]
) -> None:
    writer = await make_person("alice@example.com")
    reader = await make_person("alice@example.com", ("read",))  # the same person, a read key
    _project_id, asset_id = await _seed(webapp, writer.key)
    async with WebClient(webapp.base_url) as mine, WebClient(webapp.base_url) as theirs:
        await mine.sign_in(writer.key)
        await theirs.sign_in(reader.key)
        for client, forms in ((mine, True), (theirs, False)):
            library = (await client.get("/library")).text
            assert ('action="/library/projects"' in library) is forms
            page = (await client.get(f"/assets/{asset_id}")).text
            assert (f'action="/assets/{asset_id}/edit"' in page) is forms
            assert (f'action="/assets/{asset_id}/move"' in page) is forms
            upload = (await client.get("/upload")).text
            assert ('id="upload-form"' in upload) is forms
            assert ("This key cannot upload" in upload) is not forms
        assert "needs a key with the <code>write</code> scope" in (await theirs.get("/upload")).text
