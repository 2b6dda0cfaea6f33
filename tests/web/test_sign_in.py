"""Signing in and out in a real browser, at desktop and mobile widths."""

from __future__ import annotations

import re
from collections.abc import Callable

from playwright.sync_api import Page, expect

from .conftest import MOBILE, ResponseLog, check_accessibility, screenshot


def test_sign_in_page_and_account_in_a_browser(
    open_page: Callable[..., Page],
    new_key: Callable[..., str],
    response_logs: dict[Page, ResponseLog],
) -> None:
    key = new_key("signin")
    page = open_page(None)
    response_logs[page].allow(401, r"/sign-in$")  # a wrong key is refused, on purpose
    page.goto("/account")
    expect(page).to_have_url(re.compile(r"/sign-in\?next=/account$"))
    check_accessibility(page)
    screenshot(page, "sign-in-desktop")
    page.get_by_label("API key").fill("mk_wrong")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("unknown or revoked")
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/account")
    expect(page.get_by_role("heading", name="Account")).to_be_visible()
    check_accessibility(page)
    page.get_by_role("button", name="Sign out").first.click()
    page.wait_for_url("**/sign-in")
    page.goto("/account")
    page.wait_for_url("**/sign-in?next=/account")


def test_account_at_mobile_width(
    open_page: Callable[..., Page], new_key: Callable[..., str]
) -> None:
    page = open_page(new_key("mobile"), MOBILE)
    page.goto("/account")
    expect(page.get_by_role("heading", name="Account")).to_be_visible()
    check_accessibility(page)
    screenshot(page, "account-mobile")
