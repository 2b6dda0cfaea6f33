"""The operator's Jobs page (docs/web.md#jobs): the server's work queue, for keys with ``admin``.

- ``GET /jobs``: the table of embedding, purge and reconciliation work, newest first, with the
  status and type filters in one toolbar and a cursor for older rows. The first page is
  rendered on the server; ``jobs.js`` then reloads the rows (skeleton rows while it does) when
  a filter changes, and polls them only while a queued, running or retrying row is shown.
- ``GET /jobs/rows``: those rows as an HTML fragment in JSON (the script's endpoint).
- ``GET /jobs/{type}/{id}``: one job's details (a page), and ``.../panel`` the same as a
  fragment for the side panel.
- ``POST /jobs/embedding/{id}/retry`` and ``.../cancel``: the operator's retry and cancel.

Every one of them runs a :mod:`memory_tools.jobs.queue` workflow, which checks the ``admin``
scope: a key without it gets the forbidden page (or a 403 answer), never a row.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from memory_tools.jobs.queue import (
    JOB_STATUSES,
    JOB_TYPES,
    JobDetails,
    JobPage,
    cancel_job,
    job_details,
    list_jobs,
    retry_job,
)
from memory_tools.services import MemoryServices
from memory_tools.web import security
from memory_tools.web.handlers import WebRequest, action, endpoint, page
from memory_tools.web.rendering import render_template

PAGE_SIZE = 50

STATUS_LABELS = {
    "queued": ("Queued", "info", "◷", "Waiting for a worker"),
    "running": ("Running", "info", "▶", "A worker holds it under a lease"),
    "retry": ("Retrying", "warn", "↻", "An attempt failed; the next one is due later"),
    "done": ("Done", "ok", "✓", "Finished"),
    "failed": ("Failed", "bad", "✕", "Gave up: retry it once the cause is fixed"),
    "cancelled": ("Cancelled", "muted", "⊘", "Stopped before it ran; retry it to run again"),
}
TYPE_LABELS = {
    "embedding": ("Embedding", "Vectors of one representation of an image"),
    "ocr": ("OCR", "Reading the text in an image"),
    "describe": ("Describe", "A generated description of an image"),
    "purge": ("Purge", "Deleting the bytes of a deleted image's object"),
    "reconcile": ("Reconcile", "Listing the store against the accounts"),
}


def when(value: datetime | None) -> str:
    """A timestamp as the table shows it (UTC, to the second)."""
    return "—" if value is None else value.strftime("%Y-%m-%d %H:%M:%S UTC")


def _filters(web: WebRequest) -> dict[str, str]:
    query = web.request.query_params
    return {
        name: query.get(name, "")
        for name in ("status", "type", "cursor")
        if query.get(name, "") != ""
    }


def _context(**extra: Any) -> dict[str, Any]:
    return {
        "when": when,
        "statuses": STATUS_LABELS,
        "types": TYPE_LABELS,
        **extra,
    }


def _rows_html(answer: JobPage) -> str:
    return render_template("jobs_rows.html", _context(jobs=answer.jobs))


def _details_html(web: WebRequest, details: JobDetails, back: str) -> str:
    return render_template(
        "jobs_details.html", _context(details=details, csrf=web.who.csrf_token, back=back)
    )


def _older(filters: dict[str, str], cursor: str | None) -> str | None:
    if cursor is None:
        return None
    kept = {name: value for name, value in filters.items() if name != "cursor"}
    return "/jobs?" + urlencode({**kept, "cursor": cursor})


async def _page(web: WebRequest, filters: dict[str, str]) -> JobPage:
    return await web.call(
        list_jobs,
        status=filters.get("status"),
        type=filters.get("type"),
        cursor=filters.get("cursor"),
        limit=PAGE_SIZE,
    )


def routes(services: MemoryServices) -> list[Route]:
    """The routes of the Jobs page."""

    async def show(web: WebRequest) -> Response:
        filters = _filters(web)
        answer = await _page(web, filters)
        return web.render(
            "jobs.html",
            **_context(
                title="Jobs",
                filters=filters,
                job_statuses=JOB_STATUSES,
                job_types=JOB_TYPES,
                rows_html=_rows_html(answer),
                count=len(answer.jobs),
                active=answer.active,
                older=_older(filters, answer.next_cursor),
                poll_ms=services.settings.web_jobs_poll_milliseconds,
            ),
        )

    async def rows(web: WebRequest) -> Response:
        filters = _filters(web)
        answer = await _page(web, filters)
        return JSONResponse(
            {
                "html": _rows_html(answer),
                "count": len(answer.jobs),
                "active": answer.active,
                "older": _older(filters, answer.next_cursor),
            },
            headers={"Cache-Control": "no-store"},
        )

    async def details(web: WebRequest) -> Response:
        params = web.request.path_params
        found = await web.call(job_details, type=params["type"], job_id=params["job_id"])
        return web.render(
            "jobs_detail_page.html",
            title=f"Job {found.job.id}",
            details_html=_details_html(web, found, "/jobs"),
        )

    async def panel(web: WebRequest) -> Response:
        params = web.request.path_params
        found = await web.call(job_details, type=params["type"], job_id=params["job_id"])
        # Where the panel's Retry and Cancel return to: the table as the operator filtered it.
        back = security.safe_next(web.request.query_params.get("back"), "/jobs")
        return JSONResponse(
            {"html": _details_html(web, found, back), "status": found.job.status},
            headers={"Cache-Control": "no-store"},
        )

    async def retry(web: WebRequest) -> Response:
        job_id = web.request.path_params["job_id"]
        changed = await web.call(retry_job, job_id=job_id)
        return web.redirect(web.back("/jobs"), notice=f"Job {changed.job.id} queued again")

    async def cancel(web: WebRequest) -> Response:
        job_id = web.request.path_params["job_id"]
        reason = web.form().get("reason")
        changed = await web.call(
            cancel_job, job_id=job_id, reason=reason if isinstance(reason, str) else ""
        )
        return web.redirect(web.back("/jobs"), notice=f"Job {changed.job.id} cancelled")

    return [
        page("/jobs", show, services),
        endpoint("/jobs/rows", rows, services),
        page("/jobs/{type:str}/{job_id:str}", details, services),
        endpoint("/jobs/{type:str}/{job_id:str}/panel", panel, services),
        action("/jobs/embedding/{job_id:str}/retry", retry, services),
        action("/jobs/embedding/{job_id:str}/cancel", cancel, services),
    ]
