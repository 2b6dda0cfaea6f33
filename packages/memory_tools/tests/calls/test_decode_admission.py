"""Decodes wait for a budget of pixels in flight, and every decoding workflow asks for it."""

from __future__ import annotations

import base64
import platform
import sys
from typing import Any

import anyio
import pytest
import pyvips

from memory_db import MemorySettings
from memory_tools import MemoryServices
from memory_tools.access import Caller
from memory_tools.capacity import DecodeAdmission, trim_allocator
from memory_tools.errors import InvalidImage
from memory_tools.ingest.images import inspect_image, read_header
from memory_tools.ingest.save import AssetSaver, SaveRequest
from memory_tools.operations import admin
from memory_tools.testing.web import Reply, WebServer
from memory_tools.workflows.search import AssetSearcher, SearchRequest

MAX_PIXELS = 40_000_000
EDGE = 256


def _photo(width: int, height: int, seed: int) -> bytes:
    """A noisy PNG: it takes a decode long enough (tens of ms) for callers to pile up."""
    noise = pyvips.Image.gaussnoise(width, height, sigma=50, mean=128, seed=seed)
    return noise.cast("uchar").bandjoin([noise, noise]).copy(interpretation="srgb").pngsave_buffer()


# --- the admission itself: exact, no timing ------------------------------------------------


async def _hold(
    admission: DecodeAdmission, pixels: int, release: anyio.Event, log: list[int]
) -> None:
    async with admission.admit(pixels):
        log.append(pixels)
        await release.wait()


async def _settle() -> None:
    for _ in range(5):
        await anyio.lowlevel.checkpoint()


async def test_decodes_beyond_the_budget_wait_their_turn_in_order() -> None:
    admission = DecodeAdmission(100)
    releases = [anyio.Event() for _ in range(4)]
    admitted: list[int] = []
    async with anyio.create_task_group() as group:
        for pixels, release in zip([60, 30, 80, 10], releases, strict=True):
            group.start_soon(_hold, admission, pixels, release, admitted)
            await _settle()
        # 60 + 30 fit; 80 does not, and 10 queues behind it rather than overtaking it.
        assert admitted == [60, 30] and admission.in_flight == 90 and admission.waiting == 2
        releases[0].set()
        await _settle()
        assert admitted == [60, 30] and admission.waiting == 2  # 30 + 80 > 100: still waiting
        releases[1].set()
        await _settle()
        assert admitted == [60, 30, 80, 10] and admission.in_flight == 90
        releases[2].set()
        releases[3].set()
    assert admission.in_flight == 0 and admission.high_water == 90 and admission.admitted == 4


async def test_an_image_larger_than_the_budget_is_admitted_alone() -> None:
    admission = DecodeAdmission(100)
    first, big = anyio.Event(), anyio.Event()
    admitted: list[int] = []
    async with anyio.create_task_group() as group:
        group.start_soon(_hold, admission, 20, first, admitted)
        await _settle()
        group.start_soon(_hold, admission, 250, big, admitted)
        await _settle()
        assert admitted == [20]  # waits for the whole budget
        first.set()
        await _settle()
        assert admitted == [20, 250] and admission.in_flight == 100  # counted as the budget
        big.set()
    assert admission.in_flight == 0 and admission.high_water == 100


async def test_a_cancelled_waiter_leaves_the_queue_and_lets_the_next_in() -> None:
    admission = DecodeAdmission(100)
    hold, small = anyio.Event(), anyio.Event()
    admitted: list[int] = []
    big_scope = anyio.CancelScope()

    async def big() -> None:
        with big_scope:
            await _hold(admission, 90, anyio.Event(), admitted)

    async with anyio.create_task_group() as group:
        group.start_soon(_hold, admission, 50, hold, admitted)
        await _settle()
        group.start_soon(big)
        await _settle()
        group.start_soon(_hold, admission, 40, small, admitted)
        await _settle()
        assert admitted == [50] and admission.waiting == 2  # 40 fits, but queues behind 90
        big_scope.cancel()
        await _settle()
        assert admitted == [50, 40] and admission.waiting == 0 and admission.in_flight == 90
        hold.set()
        small.set()
    assert admission.in_flight == 0 and 90 not in admitted


def test_a_budget_must_hold_a_pixel() -> None:
    with pytest.raises(ValueError, match="at least one pixel"):
        DecodeAdmission(0)


# --- real decodes ---------------------------------------------------------------------------


async def test_concurrent_decodes_never_exceed_the_budget() -> None:
    """Eight decodes at once with room for two: two run, never three, and all finish."""
    width, height = 1600, 1200
    images = [_photo(width, height, seed) for seed in range(8)]
    admission = DecodeAdmission(2 * width * height)
    results: list[int] = []

    async def decode(data: bytes) -> None:
        image = await inspect_image(
            data, max_pixels=MAX_PIXELS, preview_edge=EDGE, admission=admission
        )
        results.append(image.width)

    async with anyio.create_task_group() as group:
        for data in images:
            group.start_soon(decode, data)
    assert results == [width] * 8
    assert admission.admitted == 8 and admission.in_flight == 0
    assert admission.high_water == 2 * width * height  # the budget was used, and not exceeded
    assert admission.queued >= 1  # and some waited their turn


async def test_an_image_larger_than_a_small_budget_still_decodes() -> None:
    admission = DecodeAdmission(100)
    image = await inspect_image(
        _photo(40, 30, 3), max_pixels=MAX_PIXELS, preview_edge=EDGE, admission=admission
    )
    assert image.width == 40 and admission.high_water == 100 and admission.in_flight == 0


async def test_a_refused_header_takes_no_part_of_the_budget() -> None:
    admission = DecodeAdmission(MAX_PIXELS)
    with pytest.raises(InvalidImage):
        await inspect_image(
            b"<svg/>", max_pixels=MAX_PIXELS, preview_edge=EDGE, admission=admission
        )
    assert admission.admitted == 0


def test_a_gif_is_counted_by_its_logical_screen() -> None:
    frame = pyvips.Image.black(10, 10).cast("uchar").copy(interpretation="b-w").gifsave_buffer()
    screen = bytearray(frame)
    screen[6:10] = (400).to_bytes(2, "little") + (300).to_bytes(2, "little")
    assert read_header(bytes(frame), max_pixels=MAX_PIXELS).decode_pixels == 100
    assert read_header(bytes(screen), max_pixels=MAX_PIXELS).decode_pixels == 400 * 300


def test_the_allocator_is_trimmed_where_the_c_library_can() -> None:
    glibc = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"
    assert trim_allocator() is glibc


# --- the budget comes from the settings, and every decoding workflow asks it ----------------


def test_the_budget_is_read_from_the_settings(settings: MemorySettings, services: Any) -> None:
    assert services.decode_admission.budget == 2 * settings.asset_max_decoded_pixels
    configured = settings.model_copy(update={"asset_decode_budget_pixels": 12_345})
    assert (
        MemoryServices(
            database=services.database, store=services.store, settings=configured
        ).decode_admission.budget
        == 12_345
    )


@pytest.fixture
async def carol(database: Any) -> Caller:
    await admin.create_identity(database, "carol@example.com", 10**9)
    return Caller("carol@example.com", "akey_carol", frozenset({"read", "write"}))


async def test_saves_and_image_searches_all_pass_the_admission(
    saving: MemoryServices, carol: Caller, web: WebServer
) -> None:
    admission = saving.decode_admission
    small = _photo(40, 30, 1)
    inline = base64.b64encode(small).decode()
    await AssetSaver(saving).save(carol, SaveRequest(image_base64=inline))
    assert admission.admitted == 1
    web.routes["/a.png"] = Reply(body=_photo(40, 30, 2), headers={"Content-Type": "image/png"})
    await AssetSaver(saving).save(carol, SaveRequest(source_url=web.url("/a.png", host="img.test")))
    assert admission.admitted == 2
    searcher = AssetSearcher(saving)
    await searcher.search(carol, SearchRequest(image_base64=inline))
    assert admission.admitted == 3
    await searcher.search(carol, SearchRequest(source_url=web.url("/a.png", host="img.test")))
    assert admission.admitted == 4
    assert admission.high_water == 40 * 30 and admission.in_flight == 0
