"""The operator's one line in Chromium while search understands words only.

The session's server searches with the default ``local-hash-v1``: its operator (a key with
``admin``) sees, on every page, one line saying so and naming ``make model``; a person without
``admin`` never does. The line is readable and passes axe-core.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from playwright.sync_api import Page, expect

from .conftest import MOBILE, check_accessibility, screenshot

pytestmark = pytest.mark.slow


def test_the_operator_sees_one_line_naming_make_model_and_others_see_none(
    open_page: Callable[..., Page], new_key: Callable[..., str]
) -> None:
    operator = open_page(new_key("ops", scopes="read,admin"))
    for path in ("/library", "/search", "/jobs"):
        operator.goto(path)
        notice = operator.locator(".operator-notice")
        expect(notice).to_have_count(1)
        expect(notice).to_be_visible()
        expect(notice).to_contain_text("words, colours and layout only, not meaning")
        expect(notice).to_contain_text("make model")
    check_accessibility(operator)
    screenshot(operator, "operator-notice-words-only")

    person = open_page(new_key("person"), MOBILE)
    for path in ("/library", "/search", "/account"):
        person.goto(path)
        expect(person.locator("main")).to_be_visible()
        expect(person.locator(".operator-notice")).to_have_count(0)
