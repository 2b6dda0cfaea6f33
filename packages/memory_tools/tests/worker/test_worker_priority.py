"""The worker's CPU work runs below the requests' priority (MEMORY_WORKER_NICE).

Seen from outside the code: the nice value of the OCR engine's processes an OCR job starts (the
warm engine's child, read from ``/proc/<pid>/stat`` as it starts) and of the threads that
embed.
"""

from __future__ import annotations

import os
import subprocess
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import pyvips

import memory_db.embedding.local
import memory_tools.jobs.ocr
from memory_tools import MemoryServices
from memory_tools.access import Caller
from memory_tools.ingest.save import AssetSaver, SaveRequest
from memory_tools.jobs.ocr_engine import WarmEngines
from memory_tools.jobs.worker import WorkerConfig
from memory_tools.operations import admin
from memory_tools.serving.job_worker import job_worker
from memory_tools.workflows.search import AssetSearcher, SearchRequest

from ..pictures import b64

OWNER = "alice@example.com"
BASE = os.getpriority(os.PRIO_PROCESS, 0)  # the suite may itself run under nice
NICE = min(19, BASE + 5)


def _stat_nice(pid: int) -> int:
    # Field 19 of /proc/<pid>/stat; the name in parentheses may hold spaces.
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16])


def _screenshot() -> bytes:
    mask = pyvips.Image.text("Invoice due on Friday\nSettings  Help", font="DejaVu Sans 16", dpi=72)
    page = (pyvips.Image.black(mask.width + 60, mask.height + 40) + 250).cast("uchar")
    ink = page - mask.embed(30, 20, page.width, page.height) * 0.9
    return ink.cast("uchar").copy(interpretation="b-w").pngsave_buffer()


@pytest.fixture
def niced(saving: MemoryServices) -> MemoryServices:
    update = {"asset_ocr": "all", "memory_worker_nice": NICE, "asset_ocr_timeout_seconds": 600}
    return replace(saving, settings=saving.settings.model_copy(update=update))


async def test_ocr_and_embedding_run_niced_and_a_search_does_not(
    niced: MemoryServices, database: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    await admin.create_identity(database, OWNER, 10**9)
    caller = Caller(OWNER, "akey_a", frozenset({"read", "write"}))
    tesseracts: list[int] = []
    embedding_threads: list[int] = []
    real_popen = subprocess.Popen
    real_embed_value = memory_db.embedding.local.embed_value

    def popen(*args: Any, **kwargs: Any) -> Any:
        process = real_popen(*args, **kwargs)
        tesseracts.append(_stat_nice(process.pid))  # a zombie until waited for: still readable
        return process

    def embed_value(value: Any) -> list[float]:
        embedding_threads.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        return real_embed_value(value)

    monkeypatch.setattr(subprocess, "Popen", popen)
    monkeypatch.setattr(memory_db.embedding.local, "embed_value", embed_value)
    engines = WarmEngines()  # none warm yet: the job starts its child
    monkeypatch.setattr(memory_tools.jobs.ocr, "warm_engines", lambda: engines)

    request = SaveRequest(image_base64=b64(_screenshot()), title="a receipt")
    await AssetSaver(niced).save(caller, request)
    config = WorkerConfig(batch_size=8, retry_base_seconds=0.01, retry_max_seconds=0.02)
    try:
        assert await job_worker(niced, config).drain() >= 2  # the embed and the ocr job
    finally:
        engines.close()
    assert engines.started == 1
    assert tesseracts and set(tesseracts) == {NICE}
    assert embedding_threads and set(embedding_threads) == {NICE}

    embedding_threads.clear()
    await AssetSearcher(niced).search(caller, SearchRequest(query="invoice"))
    assert embedding_threads == [BASE]  # the query's embedding: request priority
