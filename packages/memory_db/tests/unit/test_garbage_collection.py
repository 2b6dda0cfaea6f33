"""The collector pauses while a process starts and comes back as it was."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from memory_db.garbage_collection import collection_paused


@pytest.fixture
def collecting() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    gc.unfreeze()
    if not was:
        gc.disable()


@pytest.mark.usefixtures("collecting")
def test_the_block_runs_without_the_collector_and_it_resumes_after() -> None:
    with collection_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


@pytest.mark.usefixtures("collecting")
def test_it_resumes_after_a_failure_too() -> None:
    with pytest.raises(RuntimeError), collection_paused():
        raise RuntimeError("the import failed")
    assert gc.isenabled()


def test_a_collector_paused_by_the_caller_stays_paused() -> None:
    was = gc.isenabled()
    gc.disable()
    try:
        with collection_paused():
            pass
        assert not gc.isenabled()
    finally:
        if was:
            gc.enable()


@pytest.mark.usefixtures("collecting")
def test_freeze_moves_what_the_start_built_out_of_later_collections() -> None:
    gc.unfreeze()
    with collection_paused():
        pass
    assert gc.get_freeze_count() == 0  # a library import freezes nothing
    with collection_paused(freeze=True):
        built = [object() for _ in range(10)]
    assert gc.get_freeze_count() > 0
    assert built
