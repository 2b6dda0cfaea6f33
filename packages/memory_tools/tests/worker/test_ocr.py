"""OCR (docs/ocr.md): text rendered into images is read by the ``ocr`` job and found by search.

The images are rendered here with pyvips' text rendering (several fonts and sizes) on flat
backgrounds (screenshots, charts) and on photographs (scikit-image's). One library of them is
saved without any words, embedded, searched (the figure without OCR), read once by the OCR jobs
and searched again (the figure with OCR).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytesseract
import pytest
import pyvips
import tesserocr
from fastmcp import Client
from sqlalchemy import text

import memory_tools.jobs.ocr
from memory_tools import MemoryServices, build_memory_server
from memory_tools.access import Caller
from memory_tools.ingest.plan import ocr_wanted
from memory_tools.ingest.save import AssetSaver, SaveRequest
from memory_tools.jobs.ocr import cannot_hold_text, read_text
from memory_tools.jobs.ocr_engine import WarmEngines
from memory_tools.jobs.worker import WorkerConfig
from memory_tools.operations import admin
from memory_tools.serving.job_worker import job_worker
from memory_tools.workflows.assets import get_asset
from memory_tools.workflows.search import AssetSearcher, SearchRequest

from ..pictures import b64, picture
from ..tool_calls import call as _call
from ..tool_calls import error as _error

FAST = WorkerConfig(batch_size=8, poll_seconds=0.2, retry_base_seconds=0.01, retry_max_seconds=0.02)
OWNER = "alice@example.com"
FONTS = ("DejaVu Sans", "DejaVu Serif", "DejaVu Sans Mono")

# (kind, distinctive word the query asks for, the rest of the text). Every word is unique.
SCREENSHOTS = [
    ("invoice", "Invoice due on Friday"),
    ("harbour", "Harbour ferry timetable"),
    ("quarterly", "Quarterly revenue report"),
    ("firmware", "Firmware update available"),
    ("dashboard", "Open the admin dashboard"),
    ("glacier", "Glacier hiking permit"),
    ("espresso", "Espresso machine manual"),
    ("tournament", "Chess tournament results"),
    ("warranty", "Warranty expires in March"),
    ("pharmacy", "Pharmacy opening hours"),
    ("telescope", "Telescope lens cleaning"),
    ("vineyard", "Vineyard tour booking"),
]
CHARTS = [
    ("rainfall", "Monthly rainfall"),
    ("turnover", "Staff turnover by team"),
    ("electricity", "Electricity use per floor"),
    ("subscribers", "Newsletter subscribers"),
]
ON_PHOTOS = [
    ("lighthouse", "Lighthouse open today"),
    ("carnival", "Carnival parade tonight"),
    ("orchestra", "Orchestra tickets sold out"),
]
ROTATED = [("volcano", "Volcano eruption warning"), ("passport", "Passport renewal form")]


@functools.cache
def _photo(name: str) -> pyvips.Image:
    import skimage.data

    array = np.ascontiguousarray(np.asarray(getattr(skimage.data, name)())[..., :3])
    return pyvips.Image.new_from_array(array, interpretation="srgb")


def _words(words: str, font: str, size: int) -> pyvips.Image:
    """The text as an 8-bit mask (255 where ink is)."""
    return pyvips.Image.text(words, font=f"{font} {size}", dpi=72)


def _on(
    background: pyvips.Image, mask: pyvips.Image, x: int, y: int, ink: int = 20
) -> pyvips.Image:
    """Ink ``mask`` onto an RGB ``background`` at (x, y)."""
    alpha = mask.embed(x, y, background.width, background.height) / 255.0
    inked = background * (1 - alpha) + alpha * ink
    return inked.cast("uchar").copy(interpretation="srgb")


def _flat(width: int, height: int, colour: tuple[int, int, int]) -> pyvips.Image:
    return (pyvips.Image.black(width, height, bands=3) + list(colour)).cast("uchar")


def _screenshot(index: int, words: str) -> bytes:
    font = FONTS[index % len(FONTS)]
    size = (13, 16, 20)[index % 3]
    mask = _words(f"{words}\nSettings  Help  Account", font, size)
    colour = [(250, 250, 250), (235, 242, 255), (255, 248, 230)][index % 3]
    image = _on(_flat(mask.width + 60, mask.height + 50, colour), mask, 30, 25)
    return image.pngsave_buffer()


def _chart(index: int, words: str) -> bytes:
    width, height = 420, 260
    image = _flat(width, height, (255, 255, 255))
    for bar in range(5):  # bars of a made-up series
        top = 90 + (bar * 37 + index * 23) % 120
        image = image.draw_rect(
            [70, 120, 200], 40 + bar * 70, top, 40, height - 30 - top, fill=True
        )
    title = _words(words, FONTS[index % 2], 18)
    return _on(image, title, 20, 15).pngsave_buffer()


def _on_photo(index: int, words: str) -> bytes:
    photo = _photo(("coffee", "astronaut", "chelsea")[index]).resize(0.75)
    light = (photo * 0.35 + 160).cast("uchar")  # a pale photo, like a poster behind text
    mask = _words(words, "DejaVu Sans Bold", 26)
    return _on(light, mask, 20, light.height // 2 - mask.height // 2).pngsave_buffer()


def _rotated(index: int, words: str) -> bytes:
    """A screenshot saved sideways (three lines) or upside down (two short lines)."""
    more = ("\nPlease read every line of this notice\nbefore you sign below", "\nBring two photos")
    mask = _words(words + more[index], FONTS[0], 16)
    image = _on(_flat(mask.width + 60, mask.height + 40, (250, 250, 250)), mask, 30, 20)
    return image.rot(("d90", "d180")[index]).pngsave_buffer()


def _no_text() -> bytes:
    return _photo("coffee").resize(0.5).pngsave_buffer()


def library() -> list[tuple[str | None, bytes]]:
    """(the word a query asks for, or None for the image without text; the PNG)."""
    images: list[tuple[str | None, bytes]] = []
    images += [(word, _screenshot(i, words)) for i, (word, words) in enumerate(SCREENSHOTS)]
    images += [(word, _chart(i, words)) for i, (word, words) in enumerate(CHARTS)]
    images += [(word, _on_photo(i, words)) for i, (word, words) in enumerate(ON_PHOTOS)]
    images += [(word, _rotated(i, words)) for i, (word, words) in enumerate(ROTATED)]
    images.append((None, _no_text()))
    return images


@pytest.fixture
def reading(saving: MemoryServices) -> MemoryServices:
    # The longest time limit: a busy test machine must not turn a slow read into ocr_timeout.
    update = {"asset_ocr": "all", "asset_max_bytes": 4_000_000, "asset_ocr_timeout_seconds": 600}
    settings = saving.settings.model_copy(update=update)
    return replace(saving, settings=settings)


@pytest.fixture
async def alice(database: Any) -> Caller:
    await admin.create_identity(database, OWNER, 10**9)
    return Caller(OWNER, "akey_a", frozenset({"read", "write", "destructive"}))


async def _save(services: MemoryServices, caller: Caller, data: bytes, **fields: Any) -> str:
    request = SaveRequest(image_base64=b64(data), **fields)
    return (await AssetSaver(services).save(caller, request)).asset_id


async def _row(services: MemoryServices, sql: str, **params: Any) -> Any:
    async with services.database.engine.connect() as conn:
        return (await conn.execute(text(sql), params)).one()


async def _top1(services: MemoryServices, caller: Caller, word: str) -> str | None:
    view = await AssetSearcher(services).search(caller, SearchRequest(query=word, limit=1))
    return view.results[0].asset_id if view.results else None


async def _drain_in_parallel(services: MemoryServices, workers: int = 2) -> None:
    """Run the queue empty with a few workers (OCR is CPU bound; there are two cores)."""
    async with anyio.create_task_group() as group:
        for n in range(workers):
            group.start_soon(job_worker(services, FAST, name=f"w{n}").drain)


async def test_words_in_rendered_screenshots_charts_and_photos_are_found_with_ocr(
    reading: MemoryServices, alice: Caller, capsys: pytest.CaptureFixture[str]
) -> None:
    images = library()
    ids = [await _save(reading, alice, data) for _word, data in images]
    # Embeddings first (no OCR handler): the figure without OCR.
    await job_worker(reading, FAST, handlers={}).drain()
    queries = [(word, asset) for (word, _), asset in zip(images, ids, strict=True) if word]
    before = [await _top1(reading, alice, word) == asset for word, asset in queries]
    await _drain_in_parallel(reading)  # OCR, then the fused vectors of the text read
    after = [await _top1(reading, alice, word) == asset for word, asset in queries]
    with capsys.disabled():
        print(
            f"\nOCR relevance: {len(queries)} text queries on {len(images)} rendered images; "
            f"top-1 without OCR {sum(before)}/{len(queries)} = {sum(before) / len(queries):.0%}, "
            f"with OCR {sum(after)}/{len(queries)} = {sum(after) / len(queries):.0%}"
        )
    missed = [word for (word, _), hit in zip(queries, after, strict=True) if not hit]
    assert sum(after) >= 0.9 * len(queries), f"not found first: {missed}"
    # The rotated screenshots are read through orientation detection.
    assert {"volcano", "passport"}.isdisjoint(missed)
    # Every text image stored its text with provenance; the image without text stored no text,
    # and how it was read (image_asset_get shows it as noText).
    for (word, _data), asset in zip(images, ids, strict=True):
        row = await _row(
            reading,
            "SELECT status, embedding_status, ocr_text, ocr FROM mem_assets WHERE id = :a",
            a=asset,
        )
        assert (row.status, row.embedding_status) == ("ready", "ready")
        if word is None:
            assert row.ocr_text is None
            assert (row.ocr["engine"], row.ocr["words"]) == ("tesseract", 0)
            continue
        if word in missed:
            continue
        assert word in row.ocr_text.lower()
        assert row.ocr["engine"] == "tesseract"
        # Read by the warm engine: the binding's build of Tesseract (docs/ocr.md#the-engine).
        assert row.ocr["binding"] == "tesserocr"
        assert row.ocr["engineVersion"] == tesserocr.tesseract_version().split()[1]
        assert row.ocr["language"] == "eng"
        assert 0 < row.ocr["confidence"] <= 100
        assert row.ocr["input"] == "preview"
        preview_sha = await _row(
            reading,
            "SELECT o.preview_sha256 FROM mem_asset_objects o JOIN mem_assets a "
            "ON a.object_id = o.id WHERE a.id = :a",
            a=asset,
        )
        assert row.ocr["inputSha256"] == preview_sha[0]
    jobs = await _row(
        reading,
        "SELECT count(*) FILTER (WHERE status = 'done'), count(*) FROM mem_asset_embedding_jobs "
        "WHERE kind = 'ocr'",
    )
    assert tuple(jobs) == (len(images), len(images))


async def test_ocr_text_ranks_below_a_persons_words_and_joins_the_fused_text_last(
    reading: MemoryServices, alice: Caller
) -> None:
    titled = await _save(reading, alice, picture(3), title="Glacier lagoon")
    shot = await _save(reading, alice, _screenshot(0, "Glacier hiking permit"), title="My notes")
    await _drain_in_parallel(reading)
    view = await AssetSearcher(reading).search(alice, SearchRequest(query="glacier", limit=5))
    assert [hit.asset_id for hit in view.results][:2] == [titled, shot]
    fused = await _row(
        reading,
        "SELECT count(*) FILTER (WHERE status = 'cancelled'), count(*) FILTER (WHERE status = "
        "'done') FROM mem_asset_embedding_jobs WHERE asset_id = :a AND representation = 'fused'",
        a=shot,
    )
    # Re-embedded once the text was read: the save's fused job (of "My notes") was superseded.
    assert tuple(fused) == (1, 1)


async def test_new_saves_follow_asset_ocr(saving: MemoryServices, alice: Caller) -> None:
    jpeg = _photo("coffee").resize(0.2).jpegsave_buffer()
    assert ocr_wanted("screenshots", source_kind="upload", format_name="png", data=b"")
    assert not ocr_wanted("screenshots", source_kind="upload", format_name="jpeg", data=jpeg)
    assert ocr_wanted("screenshots", source_kind="screenshot", format_name="jpeg", data=jpeg)
    assert ocr_wanted("all", source_kind="upload", format_name="jpeg", data=jpeg)
    assert not ocr_wanted("off", source_kind="screenshot", format_name="png", data=b"")
    counts: dict[str, int] = {}
    for n, setting in enumerate(("off", "screenshots", "all")):
        services = replace(
            saving, settings=saving.settings.model_copy(update={"asset_ocr": setting})
        )
        png = await _save(services, alice, picture(40 + n))
        photo = await _save(
            services, alice, _photo("coffee").resize(0.1 + n / 100).jpegsave_buffer()
        )
        row = await _row(
            saving,
            "SELECT count(*) FROM mem_asset_embedding_jobs WHERE kind = 'ocr' "
            "AND asset_id IN (:p, :j)",
            p=png,
            j=photo,
        )
        counts[setting] = row[0]
    assert counts == {"off": 0, "screenshots": 1, "all": 2}


def _failing_engines(tmp_path: Path) -> WarmEngines:
    """Warm engines whose child starts, then fails every read (a real process)."""
    script = tmp_path / "failing-ocr-child"
    script.write_text(
        "#!/bin/sh\n"
        'echo \'{"ok": true, "version": "5.3.0"}\'\n'
        'while read -r line; do echo \'{"ok": false, "error": "crashed"}\'; done\n'
    )
    script.chmod(0o755)
    return WarmEngines(command=[str(script)])


def _engine(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, binding: str, engine: str
) -> WarmEngines | None:
    """Make the OCR engine ``missing`` or ``failing``, as ``binding`` runs it."""
    if binding == "pytesseract":
        monkeypatch.setattr(memory_tools.jobs.ocr, "ocr_binding", lambda: "pytesseract")
        command = (
            str(tmp_path / "no-tesseract") if engine == "missing" else _failing_tesseract(tmp_path)
        )
        monkeypatch.setattr(pytesseract.pytesseract, "tesseract_cmd", command)
        return None
    if engine == "missing":  # no language data anywhere
        monkeypatch.delenv("TESSDATA_PREFIX", raising=False)
        engines = WarmEngines(tessdata_dirs=())
    else:
        engines = _failing_engines(tmp_path)
    monkeypatch.setattr(memory_tools.jobs.ocr, "warm_engines", lambda: engines)
    return engines


def _failing_tesseract(tmp_path: Path) -> str:
    """A tesseract that answers its version but fails every read (a real process)."""
    script = tmp_path / "tesseract"
    script.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "--version" ]; then echo "tesseract 5.3.0"; exit 0; fi\n'
        "echo 'Error: the engine crashed' >&2\nexit 1\n"
    )
    script.chmod(0o755)
    return str(script)


@pytest.mark.parametrize("engine", ["missing", "failing"])
@pytest.mark.parametrize("binding", ["tesserocr", "pytesseract"])
async def test_a_missing_or_failing_tesseract_is_a_recorded_failure_and_the_image_stays_ready(
    reading: MemoryServices,
    alice: Caller,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    binding: str,
    engine: str,
) -> None:
    engines = _engine(monkeypatch, tmp_path, binding, engine)
    asset = await _save(reading, alice, _screenshot(1, "Harbour ferry timetable"))
    try:
        await job_worker(reading, FAST).drain()
    finally:
        if engines is not None:
            engines.close()
    row = await _row(
        reading,
        "SELECT a.status, a.embedding_status, a.ocr_text, j.status AS job, j.last_error_code "
        "FROM mem_assets a JOIN mem_asset_embedding_jobs j ON j.asset_id = a.id "
        "AND j.kind = 'ocr' WHERE a.id = :a",
        a=asset,
    )
    code = "ocr_unavailable" if engine == "missing" else "ocr_failed"
    assert tuple(row) == ("ready", "ready", None, "failed", code)


async def test_image_asset_enrich_reruns_ocr_with_tenant_checks_and_get_returns_the_text(
    reading: MemoryServices, make_person: Callable[..., Any], database: Any
) -> None:
    owner = await make_person("owner@example.com")
    stranger = await make_person("stranger@example.com")
    reader = await make_person("reader@example.com")
    await admin.grant(database, "owner@example.com", "Library", "reader@example.com", "read")
    off = replace(reading, settings=reading.settings.model_copy(update={"asset_ocr": "off"}))

    def client(services: MemoryServices, key: str) -> Client[Any]:
        return Client(build_memory_server(replace(services, default_api_key=key)))

    async with client(off, owner.key) as c:  # saved while OCR was off: no text yet
        saved = await _call(
            c, "image_asset_save", {"imageBase64": b64(_screenshot(2, "Warranty expires in March"))}
        )
        asset = saved["assetId"]
        # Asked for OCR by name: without `what` the enrichment would be every one switched on,
        # and reading the EXIF capture fields always is.
        disabled = await _error(c, "image_asset_enrich", {"assetId": asset, "what": ["ocr"]})
    await job_worker(reading, FAST).drain()
    async with client(reading, stranger.key) as c:
        unknown = await _error(c, "image_asset_enrich", {"assetId": asset})
    async with client(reading, reader.key) as c:
        forbidden = await _error(c, "image_asset_enrich", {"assetId": asset})
    async with client(reading, owner.key) as c:
        before = await _call(c, "image_asset_get", {"assetId": asset})
        first = await _call(c, "image_asset_enrich", {"assetId": asset, "what": ["ocr"]})
        second = await _call(c, "image_asset_enrich", {"assetId": asset, "what": ["ocr"]})
        bad = await _error(c, "image_asset_enrich", {"assetId": asset, "what": ["poetry"]})
        await job_worker(reading, FAST).drain()
        got = await _call(c, "image_asset_get", {"assetId": asset})
        found = await _call(c, "image_asset_search", {"query": "warranty"})
    assert disabled.startswith("feature_disabled")
    assert unknown.startswith("not_found")
    assert forbidden.startswith("forbidden")
    assert before["textInImage"] is None
    assert before["fusedNote"] is not None  # saved without words: no fused vector
    assert (first["queued"], first["alreadyQueued"]) == (["ocr"], [])
    assert (second["queued"], second["alreadyQueued"]) == ([], ["ocr"])
    assert "what" in bad
    read = got["textInImage"]
    assert read["status"] == "done" and "Warranty" in read["text"]
    assert (read["engine"], read["language"]) == ("tesseract", "eng")
    assert len(read["inputSha256"]) == 64 and read["confidence"] > 50
    # The text read gave the image a fused vector, and the answer says so.
    assert got["fusedNote"] is None
    assert {r["representation"]: r["status"] for r in got["representations"]} == {
        "fused": "done",
        "visual": "done",
    }
    assert [hit["assetId"] for hit in found["results"]][:1] == [asset]


async def test_a_preview_too_small_to_read_is_replaced_by_a_larger_rendition(
    reading: MemoryServices, alice: Caller
) -> None:
    small = replace(
        reading, settings=reading.settings.model_copy(update={"asset_preview_max_edge": 200})
    )
    mask = _words("Lighthouse keeper rota for December", FONTS[0], 22)
    page = _on(_flat(1200, 300, (250, 250, 250)), mask, 40, 120).pngsave_buffer()
    asset = await _save(small, alice, page)
    await job_worker(small, FAST).drain()
    row = await _row(small, "SELECT ocr_text, ocr FROM mem_assets WHERE id = :a", a=asset)
    assert row.ocr["input"] == "rendition"
    assert "keeper" in row.ocr_text


def test_the_skip_rule_keeps_every_image_that_holds_text() -> None:
    # The tests' screenshots, charts, posters and turned pages, and the smallest and faintest
    # text this Tesseract was measured to read (docs/ocr.md#skipped): none is skipped.
    faint = _on(
        _flat(260, 60, (250, 250, 250)), _words("Settings Help", FONTS[0], 14), 20, 15, ink=246
    )
    tiny = _on(_flat(29, 16, (250, 250, 250)), _words("Sale", FONTS[0], 10), 4, 4)
    images = [data for _word, data in library()] + [faint.pngsave_buffer(), tiny.pngsave_buffer()]
    assert [cannot_hold_text(pyvips.Image.new_from_buffer(data, "")) for data in images] == [
        None
    ] * len(images)
    assert read_text(faint.pngsave_buffer()).text == "Settings Help"
    assert read_text(tiny.pngsave_buffer()).text == "Sale"


def _bars(width: int, height: int) -> pyvips.Image:
    """Dark bars on white, one pixel apart: sharp edges everywhere, in too small an image."""
    array = np.full((height, width, 3), 250, dtype=np.uint8)
    array[:, ::2] = 0
    return pyvips.Image.new_from_array(array, interpretation="srgb")


# Images that hold no readable text, and why (made in the test: pyvips images are no params).
UNREADABLE: dict[str, tuple[Callable[[], pyvips.Image], str]] = {
    "blank-page": (lambda: _flat(640, 400, (240, 240, 240)), "uniform"),
    "narrow-strip": (lambda: _bars(7, 120), "too_small"),  # no line fits, in any orientation
    "square-icon": (lambda: _bars(15, 15), "too_small"),  # no room for two glyphs
}


@pytest.mark.parametrize("name", sorted(UNREADABLE))
@pytest.mark.parametrize("binding", ["tesserocr", "pytesseract"])
async def test_an_image_that_cannot_hold_text_is_not_given_to_tesseract_and_says_why(
    reading: MemoryServices,
    alice: Caller,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    binding: str,
    name: str,
) -> None:
    make, reason = UNREADABLE[name]
    image = make()
    # An engine that fails every read: the job is done with no text only if none was tried.
    engines = _engine(monkeypatch, tmp_path, binding, "failing")
    asset = await _save(reading, alice, image.copy(interpretation="srgb").pngsave_buffer())
    try:
        await job_worker(reading, FAST).drain()
    finally:
        if engines is not None:
            engines.close()
    row = await _row(
        reading,
        "SELECT a.ocr_text, a.ocr, j.status AS job FROM mem_assets a "
        "JOIN mem_asset_embedding_jobs j ON j.asset_id = a.id AND j.kind = 'ocr' WHERE a.id = :a",
        a=asset,
    )
    assert (row.ocr_text, row.job, row.ocr["skipped"], row.ocr["words"]) == (
        None,
        "done",
        reason,
        0,
    )
    async with reading.database.unit_of_work() as uow:
        got = await get_asset(uow, alice, reading, asset_id=asset, include_preview=False)
    assert got.text_in_image is not None
    shown = got.text_in_image
    assert (shown.status, shown.text, shown.no_text, shown.skipped) == ("done", "", True, reason)
