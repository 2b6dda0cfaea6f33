"""The system's Chromium, driven by Playwright, for page screenshots (docs/design.md#screenshots).

One :class:`Chromium` per server process: the browser is launched on the first screenshot,
reused by every later one (each gets its own browser context, so nothing of one page reaches
the next), relaunched when it has crashed or disconnected, and closed when the server stops
(:meth:`Chromium.lifespan`). At most ``SCRAPER_SCREENSHOT_CONCURRENCY`` pages render at once.

Playwright's own browser builds are never downloaded: the executable is ``SCRAPER_CHROMIUM_PATH``
or ``chromium`` / ``chromium-browser`` on ``PATH`` (:func:`find_chromium`). Without one,
``scrape_page_screenshot`` is not offered.

Chromium is launched so that it cannot reach the network by itself, whatever a page does; the
requests a page makes are fetched for it by :class:`~scraper_mcp.page_requests.PageRequests`
under the fetch policy. Should anything escape the routing, these stop it:

- ``--proxy-server`` points at a loopback port this process holds bound but never listens on,
  so any connection Chromium would open itself (a request the route did not see, a preconnect,
  a WebSocket) is refused at once; ``--proxy-bypass-list=<-loopback>`` sends loopback there too;
- ``--host-resolver-rules=MAP * ~NOTFOUND``: Chromium resolves no name itself (no DNS
  rebinding, no DNS lookups as a side channel);
- WebRTC may use no UDP that does not go through the (dead) proxy: without this a page's STUN
  server at a private address receives packets (measured: Chromium 150 sent 20-byte binding
  requests to a loopback UDP port with none of the flags above);
- service workers are blocked, WebSockets are closed before connecting, downloads are refused,
  popups are closed, and JS dialogs are dismissed (Playwright's default without a listener).
"""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import tempfile
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from playwright.async_api import (
    Browser,
    BrowserContext,
    Page,
    Playwright,
    WebSocketRoute,
    async_playwright,
)
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import TimeoutError as PlaywrightTimeout

from memory_db import MemorySettings, get_logger
from memory_tools import ToolFailure
from memory_tools.mcp.for_scrapers import FetchFailed
from scraper_mcp.page_requests import PageRequests

log = get_logger(__name__)

CANDIDATES = ("chromium", "chromium-browser")
INSTALL_HINT = (
    "install Chromium (Debian/Ubuntu: apt-get install chromium; `make install` does it) "
    "or point SCRAPER_CHROMIUM_PATH at a Chromium executable"
)
VIEWPORT_HEIGHT = 800  # CSS px of the visible screen; a fullPage screenshot goes further down
# After the document is in, how long the page may take to finish loading before the capture
# (a page whose subresources hang is captured as it is then); less when the call's deadline
# is nearer.
SETTLE_SECONDS = 5.0
_CLOSE_SECONDS = 5.0
_HEIGHT_SCRIPT = (
    "() => Math.max(document.documentElement ? document.documentElement.scrollHeight : 0,"
    " document.body ? document.body.scrollHeight : 0)"
)


def find_chromium(settings: MemorySettings) -> tuple[str | None, str]:
    """The Chromium executable to use, or ``None`` and why there is none."""
    configured = settings.scraper_chromium_path
    if configured is not None:
        path = Path(configured)
        if path.is_file() and os.access(path, os.X_OK):
            return str(path), f"SCRAPER_CHROMIUM_PATH={path}"
        return None, f"SCRAPER_CHROMIUM_PATH ({path}) is not an executable file"
    for name in CANDIDATES:
        found = shutil.which(name)
        if found is not None:
            return found, f"{name} on PATH"
    return None, f"neither {' nor '.join(CANDIDATES)} is on PATH and SCRAPER_CHROMIUM_PATH is unset"


def system_chromium(settings: MemorySettings) -> Chromium | None:
    """The configured Chromium, or ``None`` after one log line saying why and how to fix it."""
    executable, why = find_chromium(settings)
    if executable is None:
        log.warning(
            "screenshot_tool_unavailable",
            tool="scrape_page_screenshot",
            reason=f"no Chromium: {why}",
            fix=INSTALL_HINT,
        )
        return None
    log.info("screenshot_browser_found", executable=executable, found_by=why)
    return Chromium(
        executable,
        concurrency=settings.scraper_screenshot_concurrency,
        max_process_bytes=settings.scraper_screenshot_max_process_bytes,
    )


@dataclass(frozen=True)
class Capture:
    """What one page gave: its PNG and title, and whether a full page was cut at the bound."""

    png: bytes
    title: str
    page_height: int  # the page's own height (CSS px), before any cut
    cut: bool


class Chromium:
    """One Chromium for the process: launched lazily, reused, relaunched, closed at shutdown."""

    def __init__(
        self, executable: str, *, concurrency: int, max_process_bytes: int = 2**30
    ) -> None:
        self.executable = executable
        self.max_process_bytes = max_process_bytes
        self.launches = 0  # how many times a browser was started (relaunches included)
        self._slots = anyio.Semaphore(concurrency)
        self._lock = anyio.Lock()
        self._playwright: Playwright | None = None
        self._browser: Browser | None = None
        self._dead_proxy: socket.socket | None = None
        self._wrapper_dir: Path | None = None

    @asynccontextmanager
    async def lifespan(self, _server: Any = None) -> AsyncGenerator[dict[str, Any]]:
        """A server lifespan: the browser is closed when the server stops."""
        try:
            yield {}
        finally:
            with anyio.CancelScope(shield=True):
                await self.close()

    async def close(self) -> None:
        """Close the browser and Playwright's driver; a later screenshot launches them again."""
        async with self._lock:
            if self._browser is not None:
                log.info("screenshot_browser_closed")
            await self._stop()

    @property
    def browser(self) -> Browser | None:
        """The running browser, if any (tests crash it to check the relaunch)."""
        return self._browser

    async def capture(
        self,
        requests: PageRequests,
        url: str,
        *,
        width: int,
        full_page: bool,
        max_height: int,
    ) -> Capture:
        """Open ``url`` (its document already primed in ``requests``) and capture it as a PNG."""
        async with self._slots, self._context(requests, width) as context:
            page = await context.new_page()
            context.on("page", _close_popup)
            try:
                # No Playwright timeouts: the caller's deadline (SCRAPER_SCREENSHOT_TIMEOUT_SECONDS)
                # cancels the whole capture.
                await page.goto(url, wait_until="domcontentloaded", timeout=0)
            except PlaywrightError as exc:
                raise FetchFailed(f"the page could not be displayed ({_first_line(exc)})") from None
            # Settle at most SETTLE_SECONDS, and leave half of the time that is left to capture.
            settle = min(SETTLE_SECONDS, (requests.deadline - anyio.current_time()) / 2)
            try:
                await page.wait_for_load_state("load", timeout=max(0.1, settle) * 1000)
            except PlaywrightTimeout:
                log.info("screenshot_page_still_loading")
            return await _shoot(page, width=width, full_page=full_page, max_height=max_height)

    @asynccontextmanager
    async def _context(self, requests: PageRequests, width: int) -> AsyncGenerator[BrowserContext]:
        browser = await self._running()
        try:
            context = await browser.new_context(
                viewport={"width": width, "height": VIEWPORT_HEIGHT},
                device_scale_factor=1,
                service_workers="block",
                accept_downloads=False,
                java_script_enabled=True,
            )
        except PlaywrightError as exc:
            raise ToolFailure(f"the browser could not open a page ({_first_line(exc)})") from None
        try:
            await context.route("**/*", requests.handle)
            await context.route_web_socket("**/*", _refuse_websocket)
            yield context
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_SECONDS):
                try:
                    await context.close()
                except PlaywrightError:
                    log.debug("screenshot_context_close_failed", exc_info=True)

    async def _running(self) -> Browser:
        async with self._lock:
            if self._browser is not None and self._browser.is_connected():
                return self._browser
            if self._browser is not None:
                log.warning("screenshot_browser_relaunched", executable=self.executable)
            await self._stop()
            try:
                self._browser = await self._launch()
            except PlaywrightError as exc:
                await self._stop()
                log.warning("screenshot_browser_launch_failed", exc_info=True)
                raise ToolFailure(f"Chromium could not be started ({_first_line(exc)})") from None
            self.launches += 1
            log.info("screenshot_browser_launched", launches=self.launches)
            return self._browser

    async def _launch(self) -> Browser:
        if self._playwright is None:
            self._playwright = await async_playwright().start()
        dead = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        dead.bind(("127.0.0.1", 0))  # bound, never listening: every connection is refused
        self._dead_proxy = dead
        port = dead.getsockname()[1]
        # Chromium's sandbox cannot run as root; elsewhere it stays on where the system lets
        # it (some containers and Ubuntu's AppArmor forbid the user namespaces it needs: then
        # it runs without, and says so; the network rules below do not depend on it).
        if os.geteuid() != 0:
            try:
                return await self._launch_with(port, sandbox=True)
            except PlaywrightError:
                log.warning("screenshot_browser_unsandboxed", exc_info=True)
        return await self._launch_with(port, sandbox=False)

    def _limited_executable(self) -> str:
        """A private launcher that starts Chromium with its memory bounded (``RLIMIT_DATA``).

        Playwright starts the browser itself, so the limit is set by a two-line shell script
        in a directory only this process may read; every Chromium process (renderers, GPU,
        utilities) inherits it.
        """
        if self._wrapper_dir is None:
            self._wrapper_dir = Path(tempfile.mkdtemp(prefix="chromium-launch-"))
        launcher = self._wrapper_dir / "chromium"
        kib = self.max_process_bytes // 1024
        launcher.write_text(
            f'#!/bin/sh\nulimit -d {kib} || exit 1\nexec {shlex.quote(self.executable)} "$@"\n'
        )
        launcher.chmod(0o700)
        return str(launcher)

    async def _launch_with(self, port: int, *, sandbox: bool) -> Browser:
        if self._playwright is None:
            raise FetchFailed("the browser is not started")
        return await self._playwright.chromium.launch(
            executable_path=self._limited_executable(),
            headless=True,
            chromium_sandbox=sandbox,
            args=[
                f"--proxy-server=http://127.0.0.1:{port}",
                "--proxy-bypass-list=<-loopback>",
                "--host-resolver-rules=MAP * ~NOTFOUND",
                "--force-webrtc-ip-handling-policy",
                "--webrtc-ip-handling-policy=disable_non_proxied_udp",
                "--disable-quic",
                "--disable-dev-shm-usage",
                "--no-first-run",
            ],
        )

    async def _stop(self) -> None:
        browser, self._browser = self._browser, None
        driver, self._playwright = self._playwright, None
        dead, self._dead_proxy = self._dead_proxy, None
        with anyio.move_on_after(_CLOSE_SECONDS):
            if browser is not None:
                try:
                    await browser.close()
                except PlaywrightError:
                    log.debug("screenshot_browser_close_failed", exc_info=True)
            if driver is not None:
                try:
                    await driver.stop()
                except (PlaywrightError, OSError):
                    log.debug("screenshot_driver_stop_failed", exc_info=True)
        if dead is not None:
            dead.close()
        wrapper, self._wrapper_dir = self._wrapper_dir, None
        if wrapper is not None:
            shutil.rmtree(wrapper, ignore_errors=True)


async def _shoot(page: Page, *, width: int, full_page: bool, max_height: int) -> Capture:
    try:
        title = (await page.title()).strip()
        height = int(await page.evaluate(_HEIGHT_SCRIPT) or 0)
        if full_page:
            shown = max(1, min(height, max_height))
            png = await page.screenshot(
                type="png",
                full_page=True,
                clip={"x": 0, "y": 0, "width": width, "height": shown},
                animations="disabled",
                timeout=0,
            )
            return Capture(png=png, title=title, page_height=height, cut=height > max_height)
        png = await page.screenshot(type="png", animations="disabled", timeout=0)
        return Capture(png=png, title=title, page_height=height, cut=False)
    except PlaywrightError as exc:
        raise FetchFailed(f"the page could not be captured ({_first_line(exc)})") from None


async def _refuse_websocket(socket_route: WebSocketRoute) -> None:
    """WebSockets never connect: the page sees one closed at once."""
    log.info("page_request_refused", resource="websocket", reason="WebSockets are not allowed")
    await socket_route.close(code=1008, reason="not allowed")


async def _close_popup(popup: Page) -> None:
    """Any other page of the context (a popup) is closed: a screenshot is of one page."""
    try:
        await popup.close()
    except PlaywrightError:
        log.debug("screenshot_popup_close_failed", exc_info=True)


def _first_line(exc: BaseException) -> str:
    """Playwright's message without its call log (which may name internal addresses)."""
    return str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
