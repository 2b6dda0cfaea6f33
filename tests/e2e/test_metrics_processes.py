"""A separate ``memory-server worker`` process serves its own ``/metrics`` on ``--metrics-port``.

``serve --processes 2`` answering the sum over its children (prometheus-client's multiprocess
mode) is checked in ``test_server_processes.py``, on the processes that test starts anyway.
"""

from __future__ import annotations

import time

import anyio
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from memory_db import Database
from memory_db.testing.jina_server import MODEL, JinaTestServer

from .test_processes import _free_port
from .test_worker_processes import _save_assets, _start, env, jina

__all__ = ["env", "jina"]  # fixtures used below

pytestmark = pytest.mark.slow


def _value(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


async def test_a_worker_process_serves_its_own_metrics(
    database: Database, env: dict[str, str], jina: JinaTestServer
) -> None:
    await _save_assets(database, env, jina, 2)  # 4 jobs: visual + fused each
    port = _free_port()
    worker = _start(env, "--metrics-port", str(port))
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        deadline = time.monotonic() + 120
        text = ""
        async with httpx.AsyncClient(timeout=10) as http:
            while time.monotonic() < deadline:
                try:
                    text = (await http.get(url)).text
                except httpx.HTTPError:
                    text = ""
                if _value(text, "memory_assets_ready_total") == 2:
                    break
                await anyio.sleep(0.3)
            else:
                pytest.fail(f"the worker's metrics never showed 2 ready assets:\n{text[-2000:]}")
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    count = _value(text, "memory_embedding_duration_seconds_count", model=MODEL)
    assert count >= 1
    assert _value(text, "memory_embedding_tokens_total", model=MODEL) > 0
    assert _value(text, "memory_embedding_queue_depth") == 0
    assert worker.returncode == 0  # SIGTERM still stops the worker cleanly
