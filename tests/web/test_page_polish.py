"""Smaller things on the pages, in a real browser (issue 30): the app's own 404 page, the delete
dialog's focus, the asset page's Project and File name rows, the library's filters folded on a
phone, no word broken across lines, labels that line up, the search page's image picker, and
an upload that keeps its file name."""

from __future__ import annotations

import asyncio
import base64
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from fastmcp import Client
from playwright.sync_api import FloatRect, Locator, Page, ViewportSize, expect

from memory_tools.testing.keys import new_key as make_key

from ..e2e.test_processes import _png
from .conftest import (
    DESKTOP,
    MOBILE,
    ResponseLog,
    RunningServer,
    check_accessibility,
    screenshot,
)

pytestmark = pytest.mark.slow

# The narrowest phone layout the pages must hold: WCAG's reflow width (1.4.10), 320 CSS px.
NARROW: ViewportSize = {"width": 320, "height": 640}

# Every word (a run of non-space characters) of the visible text under a selector that the
# browser laid out on more than one line: a word broken in the middle (by `overflow-wrap`, or at
# a hyphen of a date). A word that fits nowhere whole would be split too, so the texts these
# tests use are ordinary dates, sizes and names.
BROKEN_WORDS = """(selector) => {
  const broken = [];
  const walker = document.createTreeWalker(document.querySelector(selector), NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const parent = node.parentElement;
    if (!parent || parent.getClientRects().length === 0) continue;
    for (const match of node.textContent.matchAll(/\\S+/g)) {
      const range = document.createRange();
      range.setStart(node, match.index);
      range.setEnd(node, match.index + match[0].length);
      const lines = new Set(
        [...range.getClientRects()].filter((r) => r.width > 0).map((r) => Math.round(r.top))
      );
      if (lines.size > 1) broken.push(`${parent.className || parent.tagName}: ${match[0]}`);
    }
  }
  return broken;
}"""


@pytest.fixture(scope="module")
def visitor(web_server: RunningServer) -> str:
    """One person's key for the tests that only look at pages (each key costs two CLI runs)."""
    return make_key(web_server.env, "polish-visitor@example.com")


def _tools(server: RunningServer, key: str, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    """MCP tool calls over HTTP as ``key``, in a thread (the browser's driver owns this one)."""

    async def run() -> list[Any]:
        async with Client(server.url + "/mcp", auth=key) as client:
            answers: list[Any] = []
            for name, arguments in calls:
                # Later calls may name what earlier ones made: "$0.projectId" is answer 0's.
                for field, value in list(arguments.items()):
                    if isinstance(value, str) and value.startswith("$"):
                        index, _, name_of = value[1:].partition(".")
                        arguments[field] = answers[int(index)][name_of]
                answers.append((await client.call_tool(name, arguments)).structured_content)
            return answers

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, run()).result(timeout=120)


def _image(seed: int, **arguments: Any) -> tuple[str, dict[str, Any]]:
    return ("image_asset_save", {"imageBase64": base64.b64encode(_png(seed)).decode(), **arguments})


def _box(locator: Locator) -> FloatRect:
    box = locator.bounding_box()
    assert box is not None, f"{locator} is not shown"
    return box


def _same(values: list[float], what: str) -> None:
    assert max(values) - min(values) <= 1, f"{what} do not line up: {values}"


def test_an_unknown_address_shows_the_apps_404_page(
    open_page: Callable[..., Page], visitor: str, response_logs: dict[Page, ResponseLog]
) -> None:
    page = open_page(None)
    response_logs[page].allow(404, r"/no/such/page$")  # the 404 is what this test asks for
    answer = page.goto("/no/such/page")
    assert answer is not None and answer.status == 404
    expect(page).to_have_title("Page not found · Image memory")
    expect(page.get_by_role("heading", name="Page not found", level=1)).to_be_visible()
    expect(page.locator("main")).to_contain_text("/no/such/page")
    # The app's stylesheet applies (the page is centred like the other error pages).
    expect(page.locator(".error-state")).to_have_css("text-align", "center")
    expect(page.get_by_role("link", name="Go to the start page")).to_have_attribute("href", "/")
    check_accessibility(page)

    signed_in = open_page(visitor)
    response_logs[signed_in].allow(404, r"/library/old-bookmark$")
    answer = signed_in.goto("/library/old-bookmark")
    assert answer is not None and answer.status == 404
    expect(signed_in.get_by_role("navigation", name="Main")).to_be_visible()
    check_accessibility(signed_in)
    screenshot(signed_in, "not-found-desktop")
    signed_in.get_by_role("link", name="Go to the library").click()
    expect(signed_in).to_have_url(re.compile(r"/library$"))


def test_the_asset_page_names_its_project_and_file_and_the_delete_dialog_focuses_cancel(
    open_page: Callable[..., Page], new_key: Callable[..., str], web_server: RunningServer
) -> None:
    key = new_key("details")
    answers = _tools(
        web_server,
        key,
        [
            ("image_project_create", {"name": "Trips"}),
            ("image_folder_create", {"projectId": "$0.projectId", "name": "Norway"}),
            _image(31, fileName="DCIM/IMG_0031.JPG", projectId="$0.projectId"),
            _image(32, title="Loose", folderId="$1.folderId", projectId="$0.projectId"),
            _image(33, title="Unfiled one"),
        ],
    )
    project_id, folder_id = answers[0]["projectId"], answers[1]["folderId"]
    page = open_page(key)
    facts = page.locator(".asset-facts").first
    project = facts.locator("dt:text-is('Project') + dd")
    # The Project row: the project (and folder) as a link to that place in the library.
    page.goto(f"/assets/{answers[3]['assetId']}")
    expect(project.get_by_role("link", name="Trips/Norway")).to_have_attribute(
        "href", f"/library?vault=Library&project={project_id}&folder={folder_id}"
    )
    expect(facts.locator("dt", has_text="File name")).to_have_count(0)  # none was given
    page.goto(f"/assets/{answers[2]['assetId']}")
    expect(project.get_by_role("link", name="Trips")).to_have_attribute(
        "href", f"/library?vault=Library&project={project_id}"
    )
    # Titled after its file name (no title was given), which it shows in its own row.
    expect(page.get_by_role("heading", name="IMG_0031", level=1)).to_be_visible()
    expect(facts.locator("dt:text-is('File name') + dd")).to_have_text("IMG_0031.JPG")
    page.goto(f"/assets/{answers[4]['assetId']}")
    expect(project).to_have_text("No project (Unfiled)")

    # Delete… asks first, and the safe choice has the focus: Enter keeps the image.
    page.get_by_role("link", name="Delete…").click()
    dialog = page.locator("#asset-delete-dialog")
    expect(dialog).to_be_visible()
    expect(dialog.get_by_role("link", name="Cancel")).to_be_focused()
    check_accessibility(page)
    screenshot(page, "asset-delete-dialog")
    page.keyboard.press("Enter")
    expect(dialog).to_be_hidden()
    expect(page).to_have_url(re.compile(rf"/assets/{answers[4]['assetId']}$"))
    expect(page.get_by_role("heading", name="Unfiled one", level=1)).to_be_visible()


def test_an_upload_keeps_its_file_name_as_title_and_shows_it(
    open_page: Callable[..., Page], visitor: str, tmp_path: Path
) -> None:
    picked = tmp_path / "Pier in fog.png"
    picked.write_bytes(_png(34))
    page = open_page(visitor)
    page.goto("/upload")
    page.get_by_label("Choose images").set_input_files(str(picked))
    row = page.locator(".upload-row", has_text="Pier in fog.png")
    row.get_by_role("link", name="Open").click()
    expect(page.get_by_role("heading", name="Pier in fog", level=1)).to_be_visible()
    expect(page.locator(".asset-facts dt:text-is('File name') + dd")).to_have_text(
        "Pier in fog.png"
    )


def test_the_phone_library_folds_its_filters_so_the_first_image_shows(
    open_page: Callable[..., Page], new_key: Callable[..., str], web_server: RunningServer
) -> None:
    key = new_key("phone-library")
    # A library as people have one: a few projects in the tree, a couple of images.
    _tools(
        web_server,
        key,
        [
            *(("image_project_create", {"name": name}) for name in ("Coast", "Family", "Work")),
            _image(35, title="Harbour"),
            _image(36, title="Dunes"),
        ],
    )
    page = open_page(key, MOBILE)
    page.goto("/library")
    first = page.locator(".library-grid > li").first
    expect(first).to_contain_text("Dunes")
    # The whole first card is on the first screen, without scrolling.
    card = _box(first)
    assert card["y"] >= 0 and card["y"] + card["height"] <= MOBILE["height"], card
    filters = page.locator("details.library-filters")
    expect(filters).not_to_have_attribute("open", "")
    expect(page.get_by_label("Tags")).to_be_hidden()
    check_accessibility(page)
    screenshot(page, "library-folded-filters-mobile")
    # Unfolded, the filters work as before.
    filters.locator("summary").click()
    page.get_by_label("Tags").fill("beach")
    page.get_by_role("button", name="Apply").click()
    expect(page).to_have_url(re.compile(r"tags=beach"))
    expect(filters.locator("summary")).to_contain_text("1 active")
    # At desktop width the toolbar is open and its summary hidden.
    page.set_viewport_size(DESKTOP)
    expect(page.get_by_label("Tags")).to_be_visible()
    expect(filters.locator("summary")).to_be_hidden()


def test_no_word_is_broken_across_lines_in_the_trash_and_usage_on_phones(
    open_page: Callable[..., Page], new_key: Callable[..., str], web_server: RunningServer
) -> None:
    key = new_key("narrow-words")
    answers = _tools(
        web_server,
        key,
        [
            ("image_project_create", {"name": "Coast"}),
            _image(37, title="Kept", projectId="$0.projectId"),
            _image(38, title="Thrown away"),
        ],
    )
    _tools(web_server, key, [("image_asset_delete", {"assetId": answers[2]["assetId"]})])
    for viewport in (NARROW, MOBILE):
        page = open_page(key, viewport)
        for path in ("/trash", "/usage"):
            page.goto(path)
            expect(page.locator("main h1")).to_be_visible()
            assert page.evaluate(BROKEN_WORDS, "main") == [], f"{path} at {viewport['width']} px"
            widths = page.evaluate("() => [document.documentElement.scrollWidth, innerWidth]")
            assert widths[0] <= widths[1], f"{path} scrolls sideways: {widths}"
        screenshot(page, f"usage-{viewport['width']}")


def test_labels_and_controls_line_up_on_the_library_toolbar_and_the_search_form(
    open_page: Callable[..., Page], visitor: str
) -> None:
    page = open_page(visitor)
    page.goto("/search?tags=evening")  # filtered: the filters are open
    main_labels = page.locator(".search-main > label")
    _same([_box(main_labels.nth(i))["y"] for i in range(main_labels.count())], "search labels")
    words = _box(page.get_by_label("Words"))
    search = _box(page.get_by_role("button", name="Search", exact=True))
    _same([words["y"], search["y"]], "the words and the Search button (tops)")
    _same([words["y"] + words["height"], search["y"] + search["height"]], "their bottoms")
    row = ("vault", "project", "folder", "tags")  # the first row of the filters
    grid = page.locator(".filter-grid")
    _same([_box(grid.locator(f"label[for='search-{n}']"))["y"] for n in row], "filter labels")
    _same([_box(grid.locator(f"#search-{n}"))["y"] for n in row], "filter controls")
    screenshot(page, "search-aligned-desktop")
    page.goto("/library")
    toolbar = page.locator(".library-toolbar")
    labels = [_box(toolbar.locator("label", has_text=name)) for name in ("Tags", "Source", "Type")]
    labels.append(_box(toolbar.locator("label", has_text="Sort")))
    controls = [
        _box(toolbar.locator(f"#filter-{name}")) for name in ("tags", "kind", "mime", "order")
    ]
    apply = _box(toolbar.get_by_role("button", name="Apply"))
    _same([box["y"] for box in labels], "the toolbar's labels (tops)")
    _same([box["y"] for box in controls], "the toolbar's controls (tops)")
    _same([box["y"] + box["height"] for box in [*controls, apply]], "the toolbar's bottoms")


def test_the_search_image_picker_is_the_upload_pages_drop_zone(
    open_page: Callable[..., Page], visitor: str, tmp_path: Path
) -> None:
    page = open_page(visitor)
    page.goto("/upload")
    upload_zone = page.locator("#drop-zone")
    upload_button = page.locator("label[for='upload-files']")
    looks = "(e) => { const s = getComputedStyle(e); return [s.borderTopStyle, s.borderTopWidth, s.backgroundColor, s.color, s.borderRadius]; }"
    zone_style = upload_zone.evaluate(looks)
    button_style = upload_button.evaluate(looks)
    button_class = upload_button.get_attribute("class")

    page.goto("/search")
    zone = page.locator("#search-drop")
    expect(zone).to_have_class(re.compile(r"\bdrop-zone\b"))
    assert zone.evaluate(looks) == zone_style
    choose = zone.locator("label[for='search-image']")
    assert choose.get_attribute("class") == button_class
    assert choose.evaluate(looks) == button_style
    # The file input itself is hidden behind its label, as on the upload page, and labelled.
    expect(page.locator("#search-image")).to_have_class("visually-hidden")
    check_accessibility(page)
    screenshot(page, "search-picker-desktop")

    # Dropped on the zone, an image becomes the query; Remove takes it back.
    dropped = page.evaluate_handle(
        """(data) => {
            const transfer = new DataTransfer();
            const bytes = Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
            transfer.items.add(new File([bytes], "dropped.png", { type: "image/png" }));
            return transfer;
        }""",
        base64.b64encode(_png(39)).decode(),
    )
    zone.dispatch_event("dragenter", {"dataTransfer": dropped})
    expect(zone).to_have_class(re.compile("drop-active"))
    zone.dispatch_event("drop", {"dataTransfer": dropped})
    expect(page.locator("#search-image-chosen")).to_contain_text("dropped.png")
    page.get_by_role("button", name="Remove image").click()
    expect(page.locator("#search-image-chosen")).to_have_text("")
    # Chosen with the button, it searches as before.
    query = tmp_path / "query.png"
    query.write_bytes(_png(39))
    page.get_by_label("Choose an image").set_input_files(str(query))
    expect(page.locator("#search-image-chosen")).to_contain_text("query.png")
    page.get_by_role("button", name="Search", exact=True).click()
    expect(page.get_by_text(re.compile(r"Like the image query\.png"))).to_be_visible()
    page.set_viewport_size(MOBILE)
    screenshot(page, "search-picker-mobile")
