"""The operator's Jobs page in a real browser: it updates while work runs, stops polling when
idle, opens a row's details by keyboard, and refuses keys without ``admin``.

The server here runs without a worker (``--no-worker``), so the saved image's jobs stay queued
until the test starts a ``memory-server worker`` process: the page is seen before, during and
after the work, without racing an in-process worker. One server serves the module; each test
saves as its own person and counts only that person's rows. The page polls every
``WEB_JOBS_POLL_MILLISECONDS`` (shortened here), so polling is seen to start and stop sooner.
"""

from __future__ import annotations

import base64
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import anyio
import pytest
from fastmcp import Client
from playwright.sync_api import Browser, Page, Request, expect

from memory_tools.testing.keys import new_key as make_key
from memory_tools.testing.processes import serving_http

from ..e2e.test_processes import SERVER, _env, _png
from .conftest import (
    DESKTOP,
    MOBILE,
    ResponseLog,
    check_accessibility,
    migrated_home,
    screenshot,
    sign_in,
)

POLL_MILLISECONDS = 300  # WEB_JOBS_POLL_MILLISECONDS of the server under test

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def idle_server(
    tmp_path_factory: pytest.TempPathFactory, migrated_pgdata: Path
) -> Iterator[tuple[str, dict[str, str]]]:
    """`memory-server serve --transport http --no-worker`: jobs wait until a worker comes."""
    env = _env(
        migrated_home(tmp_path_factory, "idle-server", migrated_pgdata),
        ASSET_WORKER_SWEEP_SECONDS="1",
        WEB_JOBS_POLL_MILLISECONDS=str(POLL_MILLISECONDS),
    )
    with serving_http(SERVER, env, "--no-worker", seconds=90) as url:
        yield url, env


def _save(url: str, key: str) -> None:
    """Save an image with a title over MCP (two jobs: visual and fused)."""

    async def save() -> None:
        async with Client(url + "/mcp", auth=key) as client:
            arguments = {"imageBase64": base64.b64encode(_png()).decode(), "title": "Queued"}
            await client.call_tool("image_asset_save", arguments)

    # Playwright's sync API owns this thread's event loop: MCP runs on a thread of its own.
    with ThreadPoolExecutor(1) as pool:
        pool.submit(anyio.run, save).result(timeout=60)


def _page(browser: Browser, url: str, key: str, viewport: dict[str, int]) -> Page:
    context = browser.new_context(viewport=viewport, base_url=url)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on(
        "console",
        lambda m: (
            errors.append(m.text)
            if m.type == "error" and not m.text.startswith("Failed to load resource")
            else None
        ),
    )
    # Every answer the page gets: a refusal the test did not provoke fails it.
    refusals = ResponseLog()
    page.on("response", refusals.record)
    sign_in(page, key)
    page.errors = errors  # type: ignore[attr-defined]
    page.refusals = refusals  # type: ignore[attr-defined]
    return page


def test_the_table_updates_while_work_runs_and_polling_stops_when_idle(
    browser: Browser, idle_server: tuple[str, dict[str, str]]
) -> None:
    url, env = idle_server
    owner = make_key(env, "owner@example.com", "read,write")
    operator = make_key(env, "ops@example.com", "read,admin")
    _save(url, owner)
    page = _page(browser, url, operator, DESKTOP)
    polls: list[float] = []

    def seen(request: Request) -> None:
        if "/jobs/rows" in request.url:
            polls.append(time.monotonic())

    page.on("request", seen)
    page.goto("/jobs")
    # Other tests of the module save as other people: count this owner's rows.
    rows = page.locator("#jobs-rows tr").filter(has_text="owner@example.com")
    expect(rows).to_have_count(2)
    # The server's setting, not a constant of the page, sets how often it polls.
    expect(page.locator("#jobs")).to_have_attribute("data-poll-ms", str(POLL_MILLISECONDS))
    expect(page.locator("#jobs-rows")).to_contain_text("Queued")
    expect(page.locator("#jobs-rows")).to_contain_text("owner@example.com")
    expect(page.get_by_role("status").filter(has_text="Live")).to_be_visible()
    check_accessibility(page)
    screenshot(page, "jobs-queued-desktop")
    # Queued rows are shown: the table is polled (the requests are the event waited for;
    # the timeout only bounds a page that never polls, at many times the interval).
    while len(polls) < 2:
        page.wait_for_event("request", lambda r: "/jobs/rows" in r.url, timeout=30_000)

    # A row's details open by keyboard, in the side panel, and close back onto the row.
    first = page.locator(".jobs-details-link").first
    first.focus()
    page.keyboard.press("Enter")
    panel = page.get_by_role("dialog")
    expect(panel).to_be_visible()
    expect(panel.get_by_role("heading", name="Timeline")).to_be_visible()
    expect(panel.get_by_role("button", name="Cancel job")).to_be_visible()
    check_accessibility(page)
    screenshot(page, "jobs-panel-desktop")
    page.keyboard.press("Escape")
    expect(panel).to_be_hidden()
    expect(page.locator(".jobs-details-link").first).to_be_focused()

    # A worker comes: the table follows the work to its end, then stops asking.
    worker = subprocess.Popen(
        [*SERVER, "worker"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        done = page.locator('#jobs-rows tr[data-type="embedding"][data-status="done"]').filter(
            has_text="owner@example.com"
        )
        expect(done).to_have_count(2, timeout=60_000)
        # The worker's first sweep also runs a reconciliation pass, beside the embeddings and
        # often after them: keep the worker until that pass is recorded as done. The server
        # gives a browser no event for it, so the rows are asked for at the polling interval;
        # the bound is generous for a loaded 2-core machine.
        deadline = time.monotonic() + 60
        while (
            'data-status="done"' not in page.request.get("/jobs/rows?type=reconcile").json()["html"]
        ):
            assert time.monotonic() < deadline, "no reconciliation pass done within 60 s"
            page.wait_for_timeout(POLL_MILLISECONDS)
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    expect(page.get_by_role("status").filter(has_text="Idle")).to_be_visible()
    settled = len(polls)
    # Absence can only be seen over time: four polling intervals with no request.
    page.wait_for_timeout(POLL_MILLISECONDS * 4)
    assert len(polls) == settled, "the table is still polled with nothing queued or running"

    # A filter change reloads (skeleton rows meanwhile) and a filter with no rows offers a way out.
    page.get_by_label("Status").select_option("failed")
    expect(page.get_by_role("heading", name="No jobs match")).to_be_visible()
    page.locator("#jobs-empty").get_by_role("link", name="Clear filters").click()
    # The worker's first sweep also ran a reconciliation pass: it is listed with the jobs.
    expect(
        page.locator('#jobs-rows tr[data-type="embedding"]').filter(has_text="owner@example.com")
    ).to_have_count(2)
    expect(page.locator('#jobs-rows tr[data-type="reconcile"]')).to_have_count(1)
    assert page.url.endswith("/jobs")
    assert not page.errors  # type: ignore[attr-defined]
    assert not page.refusals.unexpected()  # type: ignore[attr-defined]


def test_mobile_width_and_a_key_without_admin(
    browser: Browser, idle_server: tuple[str, dict[str, str]]
) -> None:
    url, env = idle_server
    owner = make_key(env, "phone-saver@example.com", "read,write")
    operator = make_key(env, "phone-ops@example.com", "read,admin")
    _save(url, owner)
    page = _page(browser, url, operator, MOBILE)
    page.goto("/jobs")
    expect(page.locator("#jobs-rows tr").filter(has_text="phone-saver@example.com")).to_have_count(
        2
    )
    # Labelled lists: each cell says what it is.
    expect(page.locator('#jobs-rows td[data-label="Status"]').first).to_be_visible()
    page.locator(".jobs-details-link").first.click()
    panel = page.get_by_role("dialog")
    expect(panel).to_be_visible()
    box = panel.bounding_box()
    assert box is not None and box["height"] >= MOBILE["height"] - 1
    check_accessibility(page)
    screenshot(page, "jobs-panel-mobile")
    page.keyboard.press("Escape")
    screenshot(page, "jobs-mobile")

    # The owner's own key has no admin scope: no Jobs link, and a clear refusal.
    mine = _page(browser, url, owner, DESKTOP)
    mine.refusals.allow(403, r"/jobs$")  # type: ignore[attr-defined]
    mine.goto("/account")
    expect(
        mine.get_by_role("navigation", name="Main").get_by_role("link", name="Jobs")
    ).to_have_count(0)
    answer = mine.goto("/jobs")
    assert answer is not None and answer.status == 403
    expect(mine.get_by_role("heading", name="Not allowed")).to_be_visible()
    expect(mine.locator("main")).to_contain_text("admin")
    check_accessibility(mine)
    assert not page.errors and not mine.errors  # type: ignore[attr-defined]
    assert not page.refusals.unexpected() and not mine.refusals.unexpected()  # type: ignore[attr-defined]
