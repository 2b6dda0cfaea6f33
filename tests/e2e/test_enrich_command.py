"""``memory-server enrich``: a real CLI process queues the OCR of every image of one vault."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import pyvips
from sqlalchemy import text

from memory_db import Database, MemorySettings
from memory_db.embedding import LocalEmbedder
from memory_db.storage import LocalAssetObjectStore, UrlSigner
from memory_tools import MemoryServices
from memory_tools.access import Caller
from memory_tools.ingest.save import AssetSaver, SaveRequest
from memory_tools.operations import admin

pytestmark = pytest.mark.slow

ENRICH = [sys.executable, "-m", "memory_server", "enrich"]
OWNER = "enrich@example.com"


def _png(seed: int) -> bytes:
    xyz = pyvips.Image.xyz(40, 40)
    red = ((xyz[0] * (seed + 2) + xyz[1]) % 256).cast("uchar")
    return red.bandjoin([red, red]).copy(interpretation="srgb").pngsave_buffer()


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ENRICH, *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


async def test_enrich_queues_ocr_for_a_vault_once_and_refuses_clearly(
    database: Database, database_url: str, tmp_path: Path
) -> None:
    settings = MemorySettings(memory_data_dir=tmp_path / "data", asset_ocr="off")
    store = LocalAssetObjectStore(settings.objects_dir, UrlSigner(b"k" * 32), "http://127.0.0.1:9")
    services = MemoryServices(
        database=database, store=store, settings=settings, embedder=LocalEmbedder()
    )
    await admin.create_identity(database, OWNER, 10**9)
    caller = Caller(OWNER, "akey_x", frozenset({"read", "write"}))
    for seed in range(3):
        request = SaveRequest(image_base64=base64.b64encode(_png(seed)).decode())
        await AssetSaver(services).save(caller, request)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("ASSET_", "MEMORY_"))}
    env = {**base, "MEMORY_DATA_DIR": str(tmp_path / "data"), "MEMORY_DATABASE_URL": database_url}
    first = _run(env, "--vault-owner", OWNER, "--vault", "Library", "--what", "ocr", "--json")
    unknown = _run(env, "--vault-owner", OWNER, "--vault", "Elsewhere")
    async with database.engine.connect() as conn:
        jobs = (
            await conn.execute(
                text(
                    "SELECT status, count(*) FROM mem_asset_embedding_jobs WHERE kind = 'ocr' GROUP BY 1"
                )
            )
        ).all()
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout) == {
        "vault": "Library",
        "what": ["ocr"],
        "assets": 3,
        "queued": 3,
        "alreadyQueued": 0,
    }
    assert [tuple(row) for row in jobs] == [("queued", 3)]
    assert unknown.returncode != 0
    assert unknown.stdout == ""
    assert len(unknown.stderr.strip().splitlines()) == 1
    assert "not_found" in unknown.stderr or "Elsewhere" in unknown.stderr
