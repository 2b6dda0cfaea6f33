"""The warm OCR engine (memory_tools.jobs.ocr_engine, docs/ocr.md#the-engine).

Tesseract stays loaded in child processes between images; these tests check what the process
per image gave is kept: a read past its time limit kills its child, a child killed from
outside fails only the job it was reading, children are retired after their images, the text
is what the ``tesseract`` command reads, and no image bytes reach the logs. The children are
real (``memory_tools.jobs.ocr_child`` with the real engine); the one that hangs on request is the
same engine with a switch (``ocr_hanging_child.py``).
"""

from __future__ import annotations

import importlib.util
import os
import signal
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest
import pyvips
from sqlalchemy import text
from structlog.testing import capture_logs

import memory_tools.jobs.ocr
from memory_tools import MemoryServices
from memory_tools.access import Caller
from memory_tools.ingest.save import AssetSaver, SaveRequest
from memory_tools.jobs.ocr import OcrError, ocr_binding, read_text
from memory_tools.jobs.ocr_engine import WarmEngines
from memory_tools.jobs.worker import WorkerConfig
from memory_tools.operations import admin
from memory_tools.serving.job_worker import job_worker

from ..pictures import b64
from .test_ocr import library

HANGING_CHILD = Path(__file__).with_name("ocr_hanging_child.py")
FAST = WorkerConfig(batch_size=8, poll_seconds=0.2, retry_base_seconds=0.01, retry_max_seconds=0.02)
OWNER = "alice@example.com"
# Long enough that a busy test machine never turns a slow read into a timeout: only the hanging
# child overruns, and it never answers.
PATIENT = 600.0


def _page(words: str) -> bytes:
    mask = pyvips.Image.text(f"{words}\nSettings  Help", font="DejaVu Sans 16", dpi=72)
    page = (pyvips.Image.black(mask.width + 60, mask.height + 40) + 250).cast("uchar")
    ink = page - mask.embed(30, 20, page.width, page.height) * 0.9
    return ink.cast("uchar").copy(interpretation="b-w").pngsave_buffer()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def flag(tmp_path: Path) -> Path:
    return tmp_path / "hang"


@pytest.fixture
def engines(flag: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[WarmEngines]:
    """This process's warm engines for the test: real children that hang when ``flag`` is set."""
    pool = WarmEngines(command=[sys.executable, str(HANGING_CHILD), str(flag)])
    monkeypatch.setattr(memory_tools.jobs.ocr, "warm_engines", lambda: pool)
    yield pool
    pool.close()


@pytest.fixture
def reading(saving: MemoryServices) -> MemoryServices:
    update = {"asset_ocr": "all", "asset_ocr_timeout_seconds": PATIENT}
    return replace(saving, settings=saving.settings.model_copy(update=update))


@pytest.fixture
async def alice(database: Any) -> Caller:
    await admin.create_identity(database, OWNER, 10**9)
    return Caller(OWNER, "akey_a", frozenset({"read", "write"}))


async def _ocr_job(services: MemoryServices, asset_id: str) -> Any:
    async with services.database.engine.connect() as conn:
        return (
            await conn.execute(
                text(
                    "SELECT j.status, j.last_error_code, j.last_error, a.status AS asset, "
                    "a.ocr_text, a.ocr FROM mem_asset_embedding_jobs j JOIN mem_assets a "
                    "ON a.id = j.asset_id WHERE j.asset_id = :a AND j.kind = 'ocr'"
                ),
                {"a": asset_id},
            )
        ).one()


def test_the_binding_is_the_warm_engine_and_the_command_only_without_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert ocr_binding() == "tesserocr"  # a dependency: its wheel carries the engine
    real = importlib.util.find_spec

    def without_tesserocr(name: str, *args: Any) -> Any:
        return None if name == "tesserocr" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", without_tesserocr)
    ocr_binding.cache_clear()
    try:
        assert ocr_binding() == "pytesseract"
    finally:
        ocr_binding.cache_clear()


def test_a_read_past_its_time_limit_kills_its_child_and_the_next_read_starts_a_fresh_one(
    engines: WarmEngines, flag: Path
) -> None:
    page = _page("Harbour ferry timetable")
    first = read_text(page, timeout=PATIENT)
    assert first.text is not None and "Harbour ferry timetable" in first.text
    assert first.binding == "tesserocr"
    [warm] = engines.pids()
    flag.touch()
    with pytest.raises(OcrError) as overran:
        read_text(page, timeout=1)
    assert overran.value.code == "ocr_timeout"
    assert "killed" in overran.value.message
    assert not _alive(warm)  # killed and reaped
    again = read_text(page, timeout=PATIENT)
    assert (again.text, again.words) == (first.text, first.words)
    assert engines.started == 2 and engines.pids() != [warm]


def test_a_child_is_retired_after_its_images_and_a_fresh_one_reads_the_next() -> None:
    engines = WarmEngines(max_images=2)
    try:
        page = _page("Vineyard tour booking")
        texts = [read_text(page, timeout=PATIENT, engines=engines).text]
        [first] = engines.pids()
        texts.append(read_text(page, timeout=PATIENT, engines=engines).text)
        assert engines.pids() == [] and not _alive(first)  # retired after its second image
        texts.append(read_text(page, timeout=PATIENT, engines=engines).text)
        assert engines.started == 2 and engines.pids() != [first]
        assert len(set(texts)) == 1 and "Vineyard tour booking" in str(texts[0])
    finally:
        engines.close()


def test_the_warm_engine_reads_the_text_the_tesseract_command_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A screenshot, a chart, a poster over a photo, two turned pages and a photo without text.
    images = [library()[i][1] for i in (0, 12, 16, 19, 20, 21)]
    engines = WarmEngines()
    try:
        warm = [read_text(data, timeout=PATIENT, engines=engines) for data in images]
        monkeypatch.setattr(memory_tools.jobs.ocr, "ocr_binding", lambda: "pytesseract")
        command = [read_text(data, timeout=PATIENT) for data in images]
    finally:
        engines.close()
    assert [(r.text, r.words) for r in warm] == [(r.text, r.words) for r in command]
    assert {r.binding for r in warm} == {"tesserocr"}
    assert {r.binding for r in command} == {"pytesseract"}
    assert sum(r.text is not None for r in warm) == 5
    # Confidences come from two builds of the engine (the wheel's, Debian's): close, not equal.
    for a, b in zip(warm, command, strict=True):
        assert (a.confidence is None) == (b.confidence is None)
        assert a.confidence is None or b.confidence is None or abs(a.confidence - b.confidence) < 3


async def test_a_killed_child_fails_only_its_job_and_the_next_job_works(
    reading: MemoryServices, alice: Caller, engines: WarmEngines, flag: Path
) -> None:
    saver = AssetSaver(reading)
    page = _page("Invoice due on Friday")
    with capture_logs() as logs:
        await anyio.Path(flag).touch()
        first = (await saver.save(alice, SaveRequest(image_base64=b64(page)))).asset_id
        hanging = anyio.Path(flag.with_suffix(".hanging"))
        async with anyio.create_task_group() as group:
            group.start_soon(job_worker(reading, FAST).drain)
            with anyio.fail_after(PATIENT):
                while not await hanging.exists():  # the child took the image and will not answer
                    await anyio.sleep(0.05)
            os.kill(int(await hanging.read_text()), signal.SIGKILL)
        killed = await _ocr_job(reading, first)
        second_page = _page("Harbour ferry timetable")
        second = (await saver.save(alice, SaveRequest(image_base64=b64(second_page)))).asset_id
        await job_worker(reading, FAST).drain()
        read = await _ocr_job(reading, second)
    assert (killed.status, killed.last_error_code, killed.asset) == (
        "failed",
        "ocr_failed",
        "ready",
    )
    assert "signal 9" in killed.last_error
    assert (read.status, read.asset) == ("done", "ready")
    assert "Harbour ferry timetable" in read.ocr_text
    assert (read.ocr["binding"], read.ocr["engine"]) == ("tesserocr", "tesseract")
    assert engines.started == 2
    # What was said about it names the job and its code, never the image.
    failed = [event for event in logs if event["event"] == "worker_job_failed"]
    assert [event["code"] for event in failed] == ["ocr_failed"]
    said = repr(logs)
    for data in (page, second_page):
        assert b64(data)[:24] not in said
        assert repr(data[:16])[2:-1] not in said
    assert "PNG" not in said


def test_an_image_that_cannot_hold_text_starts_no_child_and_records_the_engines_version() -> None:
    """A skipped image is never given to the engine, so it takes no child: none is started
    for it even when every child is busy reading (before, one was, only to ask its version)."""
    flat = (pyvips.Image.black(64, 48, bands=3) + 128).cast("uchar").pngsave_buffer()
    engines = WarmEngines()
    try:
        first = read_text(flat, timeout=PATIENT, engines=engines)  # no version known: asks one
        assert first.skipped == "uniform" and engines.started == 1
        with engines.session(deadline=float("inf")) as busy:  # the only child is reading
            again = read_text(flat, timeout=PATIENT, engines=engines)
        assert engines.started == 1 and engines.pids() == [busy.process.pid]
        assert (again.skipped, again.text, again.binding) == ("uniform", None, "tesserocr")
        assert again.engine_version == first.engine_version == busy.version != ""
    finally:
        engines.close()
