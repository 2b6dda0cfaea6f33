"""``models install``'s index names and the refusals that come before anything is opened.

The whole path (fetch, verify, rebuild, switch, second run) runs against a real server and a
model hub on 127.0.0.1 in tests/e2e/test_model_install.py.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from memory_db import MemorySettings
from memory_db.embedding.clip_catalog import CATALOG, load_catalog_file
from memory_db.runtime import prepare_vector_index
from memory_db.testing.clip_model import catalog_entry_for, write_catalog_file, write_tiny_model
from memory_db.vectors import check_identifier
from memory_tools.errors import FetchFailed, NotFoundFailure
from memory_tools.operations.model_install import InstallRequest, index_name, install_model
from memory_tools.operations.reindex import ReindexRequest, reindex
from memory_tools.services import MemoryServices


def test_index_names_are_table_names_without_a_repeated_prefix() -> None:
    assert index_name("clip-vit-b-32-openai-int8") == "clip_vit_b_32_openai_int8"
    assert index_name("tiny-clip-install") == "clip_tiny_clip_install"
    assert index_name("SigLIP.b16") == "clip_siglip_b16"
    long = index_name("m" * 200)
    assert len(long) == 48 and check_identifier(long) == long


@asynccontextmanager
async def _never_opened() -> AsyncGenerator[MemoryServices]:
    raise AssertionError("the database was opened")
    yield  # pragma: no cover - the generator shape asynccontextmanager needs


@pytest.mark.parametrize(
    ("name", "refusal", "message"),
    [
        ("no-such-model", NotFoundFailure, "no model 'no-such-model' in the catalog"),
        ("../../etc", NotFoundFailure, "in the catalog"),
        ("clip-vit-b-16-openai", FetchFailed, "clip-vit-b-16-openai is not pinned"),
    ],
)
async def test_refusals_come_before_any_request_and_open_nothing(
    tmp_path: Path, name: str, refusal: type[Exception], message: str
) -> None:
    settings = MemorySettings(memory_data_dir=tmp_path / "data")
    # A closed port: a request would fail differently (cannot reach the model hub).
    request = InstallRequest(name=name, hub_url="http://127.0.0.1:9")
    with pytest.raises(refusal, match=message):
        await install_model(settings, request, open_services=_never_opened)
    assert not (tmp_path / "data").exists()


@asynccontextmanager
async def _given(services: MemoryServices) -> AsyncGenerator[MemoryServices]:
    yield services


async def test_an_active_model_is_left_alone_whatever_its_index_is_called(
    services: MemoryServices, tmp_path: Path
) -> None:
    settings = services.settings
    assert services.embedder is not None
    await prepare_vector_index(services.database, settings, services.embedder)
    model = write_tiny_model(settings.model_dir / "tiny-clip")
    # Switched to by hand, into an index named otherwise than an install would name it.
    await reindex(services, ReindexRequest(target="own_name", provider="clip", model="tiny-clip"))
    catalog = CATALOG + load_catalog_file(
        write_catalog_file(tmp_path / "c.json", [catalog_entry_for(model, name="tiny-clip")])
    )
    request = InstallRequest(name="tiny-clip", hub_url="http://127.0.0.1:9", catalog=catalog)
    report = await install_model(settings, request, open_services=lambda: _given(services))
    assert report.already_active and report.fetched is None and report.verified is None
    assert report.index == "own_name"  # what is active, not what an install would have made
    async with services.database.unit_of_work() as uow:
        assert await uow.vector_indexes.resolve_alias(services.vector_alias) == "own_name"
        assert not await uow.vector_indexes.exists(index_name("tiny-clip"))
