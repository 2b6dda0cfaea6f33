"""What ``image_asset_get`` says of the text in an image (docs/ocr.md, issue 30).

- ``done`` means the text is readable: wherever the worker's commit of an OCR job lands between
  the statements of one ``get_asset``, a ``done`` answer carries the text it wrote;
- an image without text says so (``text: ""``, ``noText: true``);
- ``waitFor: ["ocr"]`` waits for the OCR job (woken by the job's own notification), and bad
  ``waitFor`` values are refused with ``invalid_input``.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import anyio
import pytest
from fastmcp import Client

from memory_db import UnitOfWork
from memory_tools import MemoryServices, build_memory_server
from memory_tools.access import Caller
from memory_tools.ingest.save import AssetSaver, SaveRequest
from memory_tools.jobs.handlers import JobResult, JobSubject
from memory_tools.jobs.ocr_jobs import OcrHandler
from memory_tools.jobs.worker import WorkerConfig
from memory_tools.operations import admin
from memory_tools.serving.job_worker import job_worker
from memory_tools.workflows.assets import AssetView, get_asset

from ..pictures import b64
from ..tool_calls import call, error
from .test_ocr import _no_text, _screenshot

FAST = WorkerConfig(batch_size=8, poll_seconds=0.2, retry_base_seconds=0.01, retry_max_seconds=0.02)
OWNER = "ocr-reader@example.com"


@pytest.fixture
def reading(saving: MemoryServices) -> MemoryServices:
    # The longest time limit: a busy test machine must not turn a slow read into ocr_timeout.
    update = {"asset_ocr": "all", "asset_max_bytes": 4_000_000, "asset_ocr_timeout_seconds": 600}
    return replace(saving, settings=saving.settings.model_copy(update=update))


@pytest.fixture
async def reader(database: Any) -> Caller:
    await admin.create_identity(database, OWNER, 10**9)
    return Caller(OWNER, "akey_r", frozenset({"read", "write", "destructive"}))


async def _saved_and_embedded(services: MemoryServices, caller: Caller, data: bytes) -> str:
    """A saved image whose embeddings are done and whose OCR job is still queued."""
    saved = await AssetSaver(services).save(caller, SaveRequest(image_base64=b64(data)))
    await job_worker(services, FAST, handlers={}).drain()
    return saved.asset_id


class _Gated:
    """The real OCR handler, holding its answer until the test lets the worker commit it."""

    kind = "ocr"

    def __init__(self, services: MemoryServices) -> None:
        self._handler = OcrHandler(services)
        self.read = anyio.Event()  # the engine has read the image; the job is running
        self.go = anyio.Event()  # the worker may now complete the job (one transaction)

    async def run(self, subject: JobSubject) -> JobResult:
        result = await self._handler.run(subject)
        self.read.set()
        await self.go.wait()
        return result


class _Pausing:
    """A repository whose every call first awaits ``before`` (the test's point of choice)."""

    def __init__(self, repository: Any, before: Callable[[], Awaitable[None]]) -> None:
        self._repository = repository
        self._before = before

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._repository, name)
        if not inspect.iscoroutinefunction(attribute):
            return attribute

        async def paused(*args: Any, **kwargs: Any) -> Any:
            await self._before()
            return await attribute(*args, **kwargs)

        return paused


def _pause_every_repository(uow: UnitOfWork, before: Callable[[], Awaitable[None]]) -> None:
    for name, value in list(vars(uow).items()):
        if type(value).__name__.endswith("Repository"):
            setattr(uow, name, _Pausing(value, before))


async def _read_with_commit_at(
    services: MemoryServices, caller: Caller, asset_id: str, point: int
) -> AssetView:
    """``get_asset`` in one unit of work, the worker's OCR commit landing before call ``point``.

    ``point`` counts the repository calls ``get_asset`` makes (0: before the first); past the
    last one, the commit lands after the read.
    """
    gate = _Gated(services)
    committed = anyio.Event()
    calls = 0

    async def work() -> None:
        await job_worker(services, FAST, handlers={"ocr": gate}).drain()
        committed.set()

    async def before() -> None:
        nonlocal calls
        if calls == point:
            gate.go.set()
            await committed.wait()  # the job's completion and its text are committed now
        calls += 1

    # The worker runs in its own task, started before the reader's unit of work is open.
    async with anyio.create_task_group() as group:
        group.start_soon(work)
        await gate.read.wait()
        async with services.database.unit_of_work() as uow:
            _pause_every_repository(uow, before)
            view = await get_asset(uow, caller, services, asset_id=asset_id, include_preview=False)
        gate.go.set()
    return view


async def test_done_always_comes_with_the_text_wherever_the_workers_commit_lands(
    reading: MemoryServices, reader: Caller
) -> None:
    seen: list[tuple[int, str, str | None]] = []
    for point in range(8):
        asset = await _saved_and_embedded(reading, reader, _screenshot(0, "Invoice due on Friday"))
        view = await _read_with_commit_at(reading, reader, asset, point)
        ocr = view.text_in_image
        assert ocr is not None
        seen.append((point, ocr.status, ocr.text))
    # The sweep covers the change: read before the commit (running), and after it (done).
    assert {status for _p, status, _t in seen} == {"running", "done"}, seen
    for point, status, text in seen:
        if status == "done":
            assert text is not None and "Invoice" in text, (point, seen)
        else:
            assert text is None, (point, seen)


async def test_an_image_without_text_says_so(reading: MemoryServices, reader: Caller) -> None:
    asset = await _saved_and_embedded(reading, reader, _no_text())
    await job_worker(reading, FAST).drain()
    async with reading.database.unit_of_work() as uow:
        view = await get_asset(uow, reader, reading, asset_id=asset, include_preview=False)
    ocr = view.text_in_image
    assert ocr is not None
    assert (ocr.status, ocr.text, ocr.no_text) == ("done", "", True)
    # Which engine found nothing, and when: the reading is recorded like one with text.
    assert (ocr.engine, ocr.language) == ("tesseract", "eng")
    assert ocr.read_at is not None and ocr.input_sha256 is not None and ocr.confidence is None


async def test_wait_for_ocr_answers_when_the_text_is_read(
    reading: MemoryServices, make_person: Callable[..., Any]
) -> None:
    person = await make_person("waiter@example.com")
    client = Client(build_memory_server(replace(reading, default_api_key=person.key)))
    async with client:
        saved = await call(
            client,
            "image_asset_save",
            {"imageBase64": b64(_screenshot(1, "Harbour ferry timetable"))},
        )
        asset = saved["assetId"]
        # Embedding only: the OCR job stays queued, so a wait for it runs out.
        await job_worker(reading, FAST, handlers={}).drain()
        embedded = await call(
            client, "image_asset_get", {"assetId": asset, "waitSeconds": 20}
        )  # settled at once: embedding is the default
        timed_out = await call(
            client,
            "image_asset_get",
            {"assetId": asset, "waitSeconds": 0.5, "waitFor": ["ocr"]},
        )
        answers: list[dict[str, Any]] = []

        async def wait() -> None:
            arguments = {"assetId": asset, "waitSeconds": 30, "waitFor": ["embedding", "ocr"]}
            answers.append(await call(client, "image_asset_get", arguments))

        watch = reading.database.asset_states
        async with anyio.create_task_group() as group:
            group.start_soon(wait)
            with anyio.fail_after(10):
                while watch.waiters != 1:
                    await anyio.sleep(0.02)
            await job_worker(reading, FAST).drain()  # OCR, then the fused vector again
    assert embedded["embeddingStatus"] == "ready"
    assert embedded["textInImage"]["status"] == "queued"
    assert timed_out["textInImage"]["status"] == "queued"  # the time ran out
    got = answers[0]["textInImage"]
    assert got["status"] == "done" and "Harbour" in got["text"] and got["noText"] is False


@pytest.mark.parametrize(
    ("wait_for", "expected"),
    [
        (["describe"], "waitFor"),
        (["embedding", "poetry"], "waitFor"),
        ([], "waitFor"),
        (["ocr", "ocr", "ocr"], "waitFor"),
        ("ocr", "waitFor"),
        ([None], "waitFor"),
    ],
)
async def test_bad_wait_for_is_refused_and_changes_nothing(
    reading: MemoryServices,
    make_person: Callable[..., Any],
    wait_for: Any,
    expected: str,
) -> None:
    person = await make_person("refused@example.com")
    client = Client(build_memory_server(replace(reading, default_api_key=person.key)))
    async with client:
        saved = await call(client, "image_asset_save", {"imageBase64": b64(_no_text())})
        refused = await error(
            client,
            "image_asset_get",
            {"assetId": saved["assetId"], "waitSeconds": 5, "waitFor": wait_for},
        )
    assert refused.startswith("invalid_input") and expected in refused, refused
    assert reading.database.asset_states.waiters == 0


@pytest.mark.parametrize("wait_for", [(), ("describe",), ("embedding", "ocr", "ocr")])
async def test_the_workflow_refuses_bad_wait_for_on_every_route(
    reading: MemoryServices, reader: Caller, wait_for: tuple[str, ...]
) -> None:
    from memory_tools.errors import InvalidInputFailure
    from memory_tools.workflows.assets import get_asset_waiting

    asset = await _saved_and_embedded(reading, reader, _no_text())
    with pytest.raises(InvalidInputFailure, match="waitFor"):
        await get_asset_waiting(
            reader,
            reading,
            asset_id=asset,
            include_preview=False,
            wait_seconds=1,
            wait_for=wait_for,
        )
