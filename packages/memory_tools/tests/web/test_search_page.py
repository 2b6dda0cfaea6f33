"""The Search page over real HTTP: words (a linkable GET), an image (a multipart POST with the
CSRF token), both, the tool's filters, the verdict in plain words, and every refusal."""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from typing import Any

from memory_tools.access import Caller
from memory_tools.ingest.save import AssetSaver, SaveRequest
from memory_tools.serving.job_worker import job_worker
from memory_tools.testing.web_app import WebApp, WebClient
from memory_tools.workflows import projects

from ..pictures import picture

TITLES = {1: "Harbour at dawn", 2: "Mountain bicycle race", 3: "Birthday cake with candles"}


async def _library(webapp: WebApp, owner: str = "alice@example.com") -> dict[int, str]:
    caller = Caller(owner, "k", frozenset({"read", "write"}))
    saver = AssetSaver(webapp.services)
    ids: dict[int, str] = {}
    for seed, title in TITLES.items():
        request = SaveRequest(
            image_base64=base64.b64encode(picture(seed)).decode(),
            title=title,
            tags=["even" if seed % 2 == 0 else "odd"],
        )
        ids[seed] = (await saver.save(caller, request)).asset_id
    await job_worker(webapp.services).drain()
    return ids


def _hits(html: str) -> list[str]:
    return re.findall(r'class="search-hit-title" href="/assets/(ast_[^"]+)"', html)


async def test_a_text_search_is_a_link_with_scores_matches_and_previews(
    signed_in: WebClient, webapp: WebApp
) -> None:
    ids = await _library(webapp)
    page = await signed_in.get("/search?query=bicycle+race")
    assert page.status_code == 200, page.text
    assert _hits(page.text) == [ids[2]]
    assert "1 result, best first." in page.text
    score = re.search(r'<dt>Score</dt><dd class="search-score">(\d\.\d{3})</dd>', page.text)
    assert score is not None and 0 < float(score.group(1)) <= 1
    # What matched, in words: the title's words and the picture with them; not the picture
    # alone (a text query against an image-only vector is 0.0 for local-hash-v1).
    assert 'data-kind="metadata" title="the query' in page.text and ">words</span>" in page.text
    assert 'data-kind="fused"' in page.text and 'data-kind="visual"' not in page.text
    assert re.search(r'<dt>Similarity</dt><dd class="search-similarity">0\.\d{3}</dd>', page.text)
    # The preview route redirects to a signed link on this server, as a path (the page's
    # own origin).
    assert f'<img src="/app/previews/{ids[2]}"' in page.text
    redirect = await signed_in.http.get(f"/app/previews/{ids[2]}")
    link = redirect.headers["location"]
    assert redirect.status_code == 303 and link.startswith("/objects/") and "signature=" in link
    image = await signed_in.http.get(link)
    assert image.status_code == 200 and image.headers["content-type"] == "image/webp"
    # Without a query the page is the empty form; no search runs.
    empty = await signed_in.get("/search")
    assert empty.status_code == 200 and "results-heading" not in empty.text
    assert 'id="search-form"' in empty.text and 'name="csrf"' in empty.text


async def test_nothing_good_is_said_plainly_with_a_direct_action(
    signed_in: WebClient, webapp: WebApp
) -> None:
    await _library(webapp)
    nothing = await signed_in.get("/search?query=volcano")
    assert nothing.status_code == 200
    assert "Nothing found: the closest image had a similarity of" in nothing.text
    assert 'href="/upload">Upload images</a>' in nothing.text
    filtered = await signed_in.get("/search?query=volcano&tags=odd")
    assert (
        "Search without filters</a>" in filtered.text
        and '<details class="search-filters" open' in filtered.text
    )


async def test_filters_of_the_tool_narrow_the_results(
    signed_in: WebClient, webapp: WebApp, make_person: Callable[..., Any]
) -> None:
    ids = await _library(webapp)
    odd = await signed_in.get("/search?query=harbour+bicycle+cake&tags=odd")
    assert set(_hits(odd.text)) == {ids[1], ids[3]}
    png = await signed_in.get("/search?query=harbour&mimeTypes=image/jpeg")
    assert _hits(png.text) == []
    uploads = await signed_in.get("/search?query=harbour&sourceKinds=upload&vault=Library")
    assert _hits(uploads.text) == [ids[1]]
    future = await signed_in.get("/search?query=harbour&createdFrom=2999-01-01")
    assert _hits(future.text) == []
    today = await signed_in.get("/search?query=harbour&createdUntil=2999-01-01&limit=20")
    assert _hits(today.text) == [ids[1]]
    alice = await make_person("alice@example.com")
    async with webapp.services.database.unit_of_work() as uow:
        from memory_tools.access import authenticate

        caller = await authenticate(uow, alice.key)
        project = await projects.create_project(
            uow, caller, webapp.services, vault="Library", name="Empty", description=None
        )
    # A project chosen under "All vaults" is searched in its own vault.
    in_project = await signed_in.get(f"/search?query=harbour&projectId={project.project_id}")
    assert in_project.status_code == 200, in_project.text
    assert _hits(in_project.text) == [] and "Nothing found" in in_project.text


async def test_an_image_search_is_a_multipart_post_with_the_csrf_token(
    signed_in: WebClient, webapp: WebApp
) -> None:
    ids = await _library(webapp)
    files = {"image": ("query.png", picture(3), "image/png")}
    found = await signed_in.http.post(
        "/search",
        data={"csrf": signed_in.csrf, "limit": "10"},
        files=files,
        headers={"Origin": signed_in.base_url},
    )
    assert found.status_code == 200, found.text
    assert _hits(found.text)[0] == ids[3]
    assert "Like the image query.png" in found.text
    both = await signed_in.http.post(
        "/search",
        data={"csrf": signed_in.csrf, "query": "birthday"},
        files=files,
        headers={"Origin": signed_in.base_url},
    )
    assert _hits(both.text)[0] == ids[3] and 'value="birthday"' in both.text
    forged = await signed_in.http.post(
        "/search", data={"csrf": "nope"}, files=files, headers={"Origin": signed_in.base_url}
    )
    assert forged.status_code == 403 and ids[3] not in forged.text
    # A stored image, by a link (the asset page's "Find similar").
    similar = await signed_in.get(f"/search?assetId={ids[1]}")
    assert _hits(similar.text)[0] == ids[1]


async def test_refused_searches_show_the_workflows_message_and_keep_the_form(
    signed_in: WebClient, webapp: WebApp, make_person: Callable[..., Any]
) -> None:
    await make_person("bob@example.com")
    long = await signed_in.get("/search?query=" + "x" * 2001)
    assert long.status_code == 422 and "query: at most 2000 characters" in long.text
    bad = await signed_in.get("/search?query=cat&mimeTypes=image/svg%2Bxml")
    assert bad.status_code == 422 and "mimeTypes: &#39;image/svg+xml&#39; is not one of" in bad.text
    assert 'value="cat"' in bad.text
    day = await signed_in.get("/search?query=cat&createdFrom=yesterday")
    assert day.status_code == 422 and "createdFrom: give a date as YYYY-MM-DD" in day.text
    theirs = await signed_in.get("/search?query=cat&vault=bob@example.com/Library")
    missing = await signed_in.get("/search?query=cat&vault=Nope")
    assert theirs.status_code == missing.status_code == 404
    assert "not_found" in theirs.text
    limit = webapp.services.settings.asset_max_bytes
    empty = await signed_in.http.post(
        "/search",
        data={"csrf": signed_in.csrf},
        files={"image": ("blank.png", b"", "image/png")},
        headers={"Origin": signed_in.base_url},
    )
    assert empty.status_code == 422 and "image: the file is empty" in empty.text
    text_file = await signed_in.http.post(
        "/search",
        data={"csrf": signed_in.csrf},
        files={"image": ("notes.txt", b"just words", "text/plain")},
        headers={"Origin": signed_in.base_url},
    )
    assert text_file.status_code == 422 and "invalid_image" in text_file.text
    huge = await signed_in.http.post(
        "/search",
        data={"csrf": signed_in.csrf},
        files={"image": ("huge.png", b"\x89PNG" + b"x" * (limit + 10), "image/png")},
        headers={"Origin": signed_in.base_url},
    )
    assert huge.status_code == 422 and f"ASSET_MAX_BYTES limit of {limit} bytes" in huge.text


async def test_without_a_session_no_search_runs(webapp: WebApp) -> None:
    async with WebClient(webapp.base_url) as anonymous:
        page = await anonymous.get("/search?query=harbour")
        assert page.status_code == 303
        assert page.headers["location"] == "/sign-in?next=/search%3Fquery%3Dharbour"
        post = await anonymous.http.post(
            "/search",
            data={"csrf": "x", "query": "harbour"},
            headers={"Origin": webapp.base_url},
        )
        assert post.status_code == 303 and post.headers["location"].startswith("/sign-in")
