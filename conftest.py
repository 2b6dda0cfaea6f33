"""Root test configuration: the shared fixtures, and the order in which test files start.

The real-PostgreSQL and S3 fixtures every package's tests share come from
``memory_db.testing.fixtures``.
"""

from __future__ import annotations

import gc

import pytest

pytest_plugins = ["memory_db.testing.fixtures"]


# The cyclic collector's thresholds while the tests run (see pytest_collection_finish).
YOUNG_COLLECTION_EVERY = 50_000
MIDDLE_COLLECTION_EVERY = 20


def pytest_collection_finish(session: pytest.Session) -> None:
    """Tune the cyclic garbage collector of a process that runs tests, once they are collected.

    A test worker holds every imported library and builds servers, engines and toolsets test
    after test. With Python's default thresholds (700, 10, 10) its collector ran about 15,000
    young collections and 50 full ones in a whole run, 23-31 s of each worker's 154-176 s of
    CPU (``gc.callbacks``, measured over a whole two-worker run). Collecting the young
    generation every 50,000 allocations instead of 700, and freezing what collection built
    (imports, fixtures' modules) out of later full collections, took the collector's CPU from
    5.3-5.8 s to 2.3-2.4 s on five in-process files (175 tests). Cyclic garbage is still
    collected, later and in fewer passes; the servers the tests start keep their own settings.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_COLLECTION_EVERY, MIDDLE_COLLECTION_EVERY, gc.get_threshold()[2])


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the files marked ``slow`` (real server processes, Chromium) first, in their order.

    `make test` runs the suite on two pytest-xdist workers, a file whole on one worker
    (``--dist loadfile --no-loadscope-reorder``), handing out files in this order. A file of
    a few long end-to-end tests handed out last would keep one worker busy alone at the end;
    started first, the many short files fill in behind it and both workers finish together.
    The order within a file is kept, and every worker computes the same order.

    A file whose tests drive Chromium (the ``browser`` fixture of tests/web) counts as slow
    without its marker: ``tests/web/conftest.py``'s ``pytestmark`` does not reach the test
    files, and the two browser files without a marker of their own were collected last, so
    one worker ran them alone at the end.
    """
    slow = {
        item.path
        for item in items
        if item.get_closest_marker("slow") is not None
        or "browser" in getattr(item, "fixturenames", ())
    }
    items.sort(key=lambda item: item.path not in slow)  # a stable sort: False (slow) first
