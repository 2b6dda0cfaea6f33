"""The collector pauses while a process starts and comes back as it was."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from memory_db.garbage_collection import (
    SERVING_YOUNG_THRESHOLD,
    collection_paused,
    settle_for_serving,
)


@pytest.fixture
def collecting() -> Iterator[None]:
    was, threshold = gc.isenabled(), gc.get_threshold()
    gc.enable()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)
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


@pytest.mark.usefixtures("collecting")
def test_a_server_that_serves_keeps_its_start_out_of_collections_and_collects_less_often() -> None:
    gc.unfreeze()
    gc.set_threshold(700, 10, 10)
    built = [object() for _ in range(10)]
    settle_for_serving()
    assert gc.get_freeze_count() > 0
    # Only the young generation's threshold changes: the older ones stay as they were.
    assert gc.get_threshold() == (SERVING_YOUNG_THRESHOLD, 10, 10)
    assert built
