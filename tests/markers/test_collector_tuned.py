"""Test processes collect cyclic garbage with the root conftest's thresholds.

The root ``conftest.py`` raises the young generation's threshold once the tests are collected
(``pytest_collection_finish``): with Python's default of 700 the collector took about a sixth
of a test worker's CPU. A process that runs tests without that hook runs with the default.
"""

from __future__ import annotations

import gc


def test_the_young_generation_is_collected_every_fifty_thousand_allocations() -> None:
    young, middle, _old = gc.get_threshold()
    assert (young, middle) == (50_000, 20)
    assert gc.isenabled()
