"""The app's own 404 page for an address no route serves, over real HTTP: for a browser only, and
never in place of an answer a route gave itself."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from memory_tools.testing.web_app import WebClient

BROWSER = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}


@pytest.mark.parametrize(
    "path", ["/no/such/page", "/librar", "/assets", "/static-not", "/%3Cscript%3Ex%3C%2Fscript%3E"]
)
async def test_an_unknown_address_answers_the_apps_404_page(
    browser_for: Callable[[], WebClient], path: str
) -> None:
    async with browser_for() as client:
        answer = await client.http.get(path, headers=BROWSER)
    assert answer.status_code == 404
    assert answer.headers["content-type"].startswith("text/html")
    page = answer.text
    assert "<h1" in page and "Page not found" in page
    assert 'href="/static/app.css' in page  # the app's own layout and stylesheet
    assert '<a class="button primary" href="/">Go to the start page</a>' in page
    assert "<script>x</script>" not in page  # the address is shown as text
    assert "default-src 'none'" in answer.headers["content-security-policy"]
    assert answer.headers["x-frame-options"] == "DENY"


async def test_signed_in_the_404_page_has_the_navigation(signed_in: WebClient) -> None:
    answer = await signed_in.get("/library/nothing-here", headers=BROWSER)
    assert answer.status_code == 404
    assert 'aria-label="Main"' in answer.text and "Sign out" in answer.text
    assert '<a class="button primary" href="/">Go to the library</a>' in answer.text


async def test_what_is_not_a_browsers_page_load_keeps_its_answer(
    browser_for: Callable[[], WebClient], signed_in: WebClient
) -> None:
    async with browser_for() as client:
        # An API client, or a request of another method: Starlette's plain answer.
        plain = await client.http.get("/no/such/page", headers={"Accept": "*/*"})
        assert (plain.status_code, plain.text) == (404, "Not Found")
        posted = await client.http.post("/no/such/page", headers=BROWSER)
        assert (posted.status_code, posted.text) == (404, "Not Found")
        # A route that exists for other methods is still a 405, not a missing page.
        upload = await client.http.get("/uploads", headers=BROWSER)
        assert upload.status_code == 405
        # A trailing slash still redirects to the page without it.
        slash = await client.http.get("/sign-in/", headers=BROWSER)
        assert slash.status_code in (307, 308) and slash.headers["location"].endswith("/sign-in")
        # A signed link that names no object answers its own plain 404.
        signed = await client.http.get("/objects/nothing?expires=1&signature=x", headers=BROWSER)
        assert signed.status_code in (403, 404) and "Page not found" not in signed.text
    # A route's own "not found" (an image that does not exist) is its page, not this one.
    asset = await signed_in.get("/assets/ast_00000000000000000000000000", headers=BROWSER)
    assert asset.status_code == 404
    assert "Not found" in asset.text and "Page not found" not in asset.text
    state = await signed_in.get("/app/assets/ast_00000000000000000000000000/state")
    assert state.status_code == 404 and state.json()["error"]["code"] == "not_found"
