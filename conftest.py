"""Root test configuration: the shared fixtures, and the order in which test files start.

The real-PostgreSQL and S3 fixtures every package's tests share come from
``memory_db.testing.fixtures``.
"""

from __future__ import annotations

import pytest

pytest_plugins = ["memory_db.testing.fixtures"]


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
