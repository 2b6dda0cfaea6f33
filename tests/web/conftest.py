"""Browser tests of the web app: a real `memory-server` process, Debian's Chromium driven by
Playwright (``executable_path``), axe-core for accessibility, screenshots under test-output/.

One server process serves the whole session (its embedded PostgreSQL starts once); every test
makes its own people, so tests never see each other's images. `make test` installs Chromium and
axe-core; without them these tests fail with what to run, never skip.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Response as AsyncResponse
from playwright.sync_api import Browser, Page, Playwright, Response, ViewportSize, sync_playwright

from memory_db import MemorySettings
from memory_db.testing import copy_data_directory
from memory_tools.testing.keys import new_key as make_key
from scraper_mcp.chromium import find_chromium

from ..e2e.test_processes import _env, serve_http

ROOT = Path(__file__).resolve().parents[2]
AXE = ROOT / "tools" / "axe" / "node_modules" / "axe-core" / "axe.min.js"
SCREENSHOTS = ROOT / "test-output" / "screenshots"
DESKTOP: ViewportSize = {"width": 1280, "height": 860}
MOBILE: ViewportSize = {"width": 390, "height": 844}
# The session server's Jobs page polls this often (WEB_JOBS_POLL_MILLISECONDS): shorter than
# the default, so a test sees polling stop within a couple of seconds.
JOBS_POLL_MILLISECONDS = 500

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class RunningServer:
    """The memory server under test: its base URL and the environment of its CLI."""

    url: str
    env: dict[str, str]


def migrated_home(tmp_path_factory: pytest.TempPathFactory, name: str, pgdata: Path) -> Path:
    """A new directory whose ``data`` is a ``MEMORY_DATA_DIR`` with a migrated database.

    A copy of the worker's migrated data directory (``migrated_pgdata``): the server skips
    initdb and the migrations (seconds, more on a loaded machine); its first start is tested
    in tests/e2e/test_newcomer.py.
    """
    home = tmp_path_factory.mktemp(name)
    (home / "data").mkdir(mode=0o700)
    copy_data_directory(pgdata, home / "data" / "postgres")
    return home


@pytest.fixture(scope="session")
def web_server(
    tmp_path_factory: pytest.TempPathFactory, migrated_pgdata: Path
) -> Iterator[RunningServer]:
    """`memory-server serve --transport http` with its in-process worker, for the session."""
    env = _env(
        migrated_home(tmp_path_factory, "web-server", migrated_pgdata),
        ASSET_WORKER_SWEEP_SECONDS="1",
        ASSET_SIGNED_GET_TTL_SECONDS="120",
        WEB_JOBS_POLL_MILLISECONDS=str(JOBS_POLL_MILLISECONDS),
    )
    with serve_http(env, capture=False) as (url, _process):
        yield RunningServer(url, env)


_people = itertools.count(1)


@pytest.fixture
def new_key(web_server: RunningServer) -> Callable[..., str]:
    """Make a new person with a key: ``new_key("alice", scopes="read,write")`` → the key."""

    def make(name: str = "person", scopes: str = "read,write,destructive") -> str:
        return make_key(web_server.env, f"{name}-{next(_people)}@example.com", scopes)

    return make


# Module scope, not session: the sync driver keeps an event loop running in this thread while
# it lives, and the async tests that run after a browser module need the thread to themselves.
@pytest.fixture(scope="module")
def playwright_driver() -> Iterator[Playwright]:
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="module")
def browser(playwright_driver: Playwright) -> Iterator[Browser]:
    """Debian's Chromium (or SCRAPER_CHROMIUM_PATH), headless."""
    path, why = find_chromium(MemorySettings())
    if path is None:
        pytest.fail(f"no Chromium for the browser tests ({why}): run `make chromium`")
    launched = playwright_driver.chromium.launch(executable_path=path, headless=True)
    yield launched
    launched.close()


@dataclass
class ResponseLog:
    """Every answer to the requests a page made, so a refused form or fetch cannot pass unseen.

    A test that provokes a refusal on purpose says so first with :meth:`allow`; any other
    answer of 400 or more (a form the server refuses, a preview link that expired, a script's
    call that failed) fails the test, whatever the page then shows.
    """

    answers: list[tuple[int, str, str]] = field(default_factory=list)  # status, method, url
    allowed: list[tuple[int, re.Pattern[str]]] = field(default_factory=list)

    def record(self, response: Response | AsyncResponse) -> None:
        """The ``response`` listener of a page (of the sync or the async API)."""
        self.answers.append((response.status, response.request.method, response.url))

    def allow(self, status: int, url_pattern: str) -> None:
        """Expect answers of ``status`` to URLs matching ``url_pattern`` (a regex, searched)."""
        self.allowed.append((status, re.compile(url_pattern)))

    def unexpected(self) -> list[tuple[int, str, str]]:
        """The refusals (400 and up) no :meth:`allow` admitted."""
        return [
            (status, method, url)
            for status, method, url in self.answers
            if status >= 400
            and not any(status == code and pattern.search(url) for code, pattern in self.allowed)
        ]


@pytest.fixture
def response_logs() -> dict[Page, ResponseLog]:
    """The :class:`ResponseLog` of each page :func:`open_page` made (``response_logs[page]``)."""
    return {}


@pytest.fixture
def open_page(
    browser: Browser, web_server: RunningServer, response_logs: dict[Page, ResponseLog]
) -> Iterator[Callable[..., Page]]:
    """``open_page(key, viewport=DESKTOP)``: a new browser context signed in with ``key``.

    Console errors (a CSP violation, an uncaught exception) fail the test, and so does any
    answer of 400 or more to the page's requests that the test did not allow
    (``response_logs[page].allow(status, url_pattern)``).
    """
    contexts: list[Any] = []
    errors: list[str] = []

    def make(key: str | None, viewport: ViewportSize | None = None) -> Page:
        context = browser.new_context(viewport=viewport or DESKTOP, base_url=web_server.url)
        contexts.append(context)
        page = context.new_page()
        log = response_logs[page] = ResponseLog()
        page.on("response", log.record)
        page.on("console", lambda message: _console(message.type, message.text, errors))
        page.on("pageerror", lambda error: errors.append(str(error)))
        if key is not None:
            sign_in(page, key)
        return page

    yield make
    for context in contexts:
        context.close()
    assert not errors, f"the browser reported errors: {errors}"
    refused = [answer for log in response_logs.values() for answer in log.unexpected()]
    assert not refused, f"the server refused requests the pages made: {refused}"


def _console(kind: str, text: str, errors: list[str]) -> None:
    # A refused request (401, 404) is logged by Chromium as a failed resource load: that is the
    # page working. Policy violations and script errors are what count.
    if kind == "error" and not text.startswith("Failed to load resource"):
        errors.append(text)


def sign_in(page: Page, key: str) -> None:
    """Sign in through the form, as a person does, and land on the library."""
    page.goto("/sign-in")
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(lambda url: "/sign-in" not in url)


def check_accessibility(page: Page) -> None:
    """Run axe-core in the page; fail on any serious or critical violation."""
    if not AXE.is_file():
        pytest.fail("axe-core is not installed: run `make deps-node`")
    # evaluate() runs as the debugger does, outside the page's CSP: no policy is loosened.
    page.evaluate(AXE.read_text(encoding="utf-8"))
    result = page.evaluate("async () => await axe.run(document, {resultTypes: ['violations']})")
    bad = [
        {
            "id": v["id"],
            "impact": v["impact"],
            "help": v["help"],
            "nodes": [n["target"] for n in v["nodes"]][:5],
        }
        for v in result["violations"]
        if v["impact"] in ("serious", "critical")
    ]
    assert not bad, f"{page.url}: accessibility violations:\n{json.dumps(bad, indent=1)}"


def screenshot(page: Page, name: str) -> Path:
    """Save a full-page screenshot under test-output/screenshots/NAME.png."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    target = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(target), full_page=True)
    return target
