"""The operator's Jobs page over real HTTP: who may see it, what it shows, retry and cancel."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

from memory_tools.access import Caller
from memory_tools.ingest.save import AssetSaver, SaveRequest
from memory_tools.testing.web_app import WebApp, WebClient

from ..pictures import picture

OPERATOR = ("read", "admin")


async def _save(webapp: WebApp, owner: str, seed: int) -> str:
    caller = Caller(owner, "k", frozenset({"read", "write"}))
    request = SaveRequest(image_base64=base64.b64encode(picture(seed)).decode())
    return (await AssetSaver(webapp.services).save(caller, request)).asset_id


async def _job_of(webapp: WebApp, asset_id: str) -> str:
    async with webapp.services.database.unit_of_work() as uow:
        (job,) = await uow.jobs.for_asset("alice@example.com", asset_id)
    return job.id


async def test_a_key_without_admin_gets_a_forbidden_page_and_no_nav_link(
    browser_for: Callable[[], WebClient], make_person: Callable[..., Any], webapp: WebApp
) -> None:
    alice = await make_person("alice@example.com")
    await _save(webapp, "alice@example.com", 1)
    async with browser_for() as client:
        await client.sign_in(alice.key)
        library = await client.get("/account")
        assert 'href="/jobs"' not in library.text
        page = await client.get("/jobs")
        assert page.status_code == 403
        assert "admin" in page.text and "forbidden" in page.text
        assert "alice@example.com" not in page.text.split("</header>", 1)[-1]
        rows = await client.call("GET", "/jobs/rows")
        assert rows.status_code == 403 and rows.json()["error"]["code"] == "forbidden"


async def test_without_a_session_every_jobs_url_is_refused(webapp: WebApp) -> None:
    async with WebClient(webapp.base_url) as client:
        page = await client.get("/jobs")
        assert page.status_code == 303 and page.headers["location"].startswith("/sign-in")
        rows = await client.call("GET", "/jobs/rows")
        assert rows.status_code == 401
        change = await client.submit("/jobs/embedding/aej_x/retry", {"csrf": "x"})
        assert change.status_code in (303, 403)
        assert change.headers.get("location", "/sign-in").startswith("/sign-in")


async def test_the_operator_sees_every_owners_work_filters_and_opens_details(
    browser_for: Callable[[], WebClient], make_person: Callable[..., Any], webapp: WebApp
) -> None:
    await make_person("alice@example.com")
    operator = await make_person("ops@example.com", OPERATOR)
    asset_id = await _save(webapp, "alice@example.com", 2)
    job_id = await _job_of(webapp, asset_id)
    async with browser_for() as client:
        await client.sign_in(operator.key)
        page = await client.get("/jobs")
        assert page.status_code == 200
        assert 'href="/jobs" aria-current="page"' in page.text  # the nav link, for admin keys
        assert job_id in page.text and "alice@example.com" in page.text
        assert 'data-active="true"' in page.text  # a queued row: the script will poll
        assert "jobs.js" in page.text and "onclick" not in page.text
        rows = await client.call("GET", "/jobs/rows?status=done")
        assert rows.status_code == 200
        assert rows.json()["count"] == 0 and rows.json()["active"] is False
        assert rows.headers["cache-control"] == "no-store"
        bad = await client.call("GET", "/jobs/rows?status=stuck")
        assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_input"
        panel = await client.call(
            "GET", f"/jobs/embedding/{job_id}/panel?back=/jobs?type=embedding"
        )
        assert panel.status_code == 200
        html = panel.json()["html"]
        assert "Timeline" in html and "created" in html and "Cancel job" in html
        assert 'name="back" value="/jobs?type=embedding"' in html
        details = await client.get(f"/jobs/embedding/{job_id}")
        assert details.status_code == 200 and asset_id in details.text
        missing = await client.get("/jobs/embedding/aej_missing")
        assert missing.status_code == 404
        # An off-site "back" is never where a change returns to.
        evil = await client.call("GET", f"/jobs/embedding/{job_id}/panel?back=//evil.example")
        assert 'value="//evil.example"' not in evil.json()["html"]


async def test_cancel_and_retry_need_the_csrf_token_and_say_what_they_did(
    browser_for: Callable[[], WebClient], make_person: Callable[..., Any], webapp: WebApp
) -> None:
    await make_person("alice@example.com")
    operator = await make_person("ops@example.com", OPERATOR)
    asset_id = await _save(webapp, "alice@example.com", 3)
    job_id = await _job_of(webapp, asset_id)
    async with browser_for() as client:
        await client.sign_in(operator.key)
        await client.get("/jobs")
        forged = await client.submit(
            f"/jobs/embedding/{job_id}/cancel", {"reason": "x"}, csrf=False
        )
        assert forged.status_code == 403
        cross = await client.submit(
            f"/jobs/embedding/{job_id}/cancel",
            {"reason": "x"},
            headers={"Origin": "http://evil.example"},
        )
        assert cross.status_code == 403
        async with webapp.services.database.unit_of_work() as uow:
            job = await uow.jobs.get(job_id)
        assert job is not None and job.status == "queued"  # nothing changed
        empty = await client.submit(
            f"/jobs/embedding/{job_id}/cancel", {"reason": " ", "back": "/jobs?status=queued"}
        )
        assert empty.status_code == 303 and empty.headers["location"] == "/jobs?status=queued"
        shown = await client.get("/jobs?status=queued")
        assert "invalid_input" in shown.text and "reason" in shown.text
        done = await client.submit(
            f"/jobs/embedding/{job_id}/cancel", {"reason": "provider outage", "back": "/jobs"}
        )
        assert done.status_code == 303
        shown = await client.get("/jobs")
        assert f"Job {job_id} cancelled" in shown.text
        again = await client.submit(f"/jobs/embedding/{job_id}/retry", {"back": "/jobs"})
        assert again.status_code == 303
        shown = await client.get("/jobs")
        assert f"Job {job_id} queued again" in shown.text
        twice = await client.submit(f"/jobs/embedding/{job_id}/retry", {"back": "/jobs"})
        shown = await client.get(twice.headers["location"])
        assert "conflict" in shown.text and "the job is queued" in shown.text


async def test_a_non_admin_change_is_refused_and_changes_nothing(
    browser_for: Callable[[], WebClient], make_person: Callable[..., Any], webapp: WebApp
) -> None:
    alice = await make_person("alice@example.com")
    asset_id = await _save(webapp, "alice@example.com", 4)
    job_id = await _job_of(webapp, asset_id)
    async with browser_for() as client:
        await client.sign_in(alice.key)
        await client.get("/account")
        answer = await client.submit(
            f"/jobs/embedding/{job_id}/cancel", {"reason": "mine", "back": "/account"}
        )
        assert answer.status_code == 303 and answer.headers["location"] == "/account"
        shown = await client.get("/account")
        assert "forbidden" in shown.text and "&#39;admin&#39; scope" in shown.text
    async with webapp.services.database.unit_of_work() as uow:
        job = await uow.jobs.get(job_id)
    assert job is not None and job.status == "queued"
