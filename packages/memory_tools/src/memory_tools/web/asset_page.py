"""One image's page (docs/web.md#asset-page) and its actions.

- ``GET /assets/{assetId}``: a large preview, metadata, tags, source and page context, and the
  embedding state of each representation (:func:`memory_tools.workflows.browsing.asset_detail`).
- ``POST /assets/{assetId}/edit``: title, description and tags (``edits.update_asset``); a
  refusal redirects to the asset page (post-redirect-get), which shows the error beside the
  form, focused, with what was typed. ``GET`` of an action's address (a reload, a bookmark)
  redirects to the asset page.
- ``POST /assets/{assetId}/move``: to a project or folder of its vault (``changes.move_asset``).
- ``GET /assets/{assetId}/original``: a 303 to a freshly signed download link of the original
  (:func:`memory_tools.workflows.browsing.original_link`); it changes nothing.
- ``GET /app/previews/{assetId}``: a redirect to a freshly signed link of the preview
  (:func:`memory_tools.workflows.browsing.preview_link`), for a live image or one in the trash.
  Every
  ``<img>`` of the pages points here, so an image scrolled into view after the signed links'
  lifetime still loads; the redirect may be cached for half that lifetime, never longer.
- ``GET /assets/{assetId}/delete``: the confirmation page (the asset page asks in a dialog
  when scripts run); ``POST`` deletes (``changes.delete_asset``) and goes to the library.
- ``POST /assets/{assetId}/retry``: queue a failed representation again
  (``job_queue.retry_asset_embedding``).
- ``POST /assets/{assetId}/context``: accept or clear the generated description
  (``describe.review_context``; docs/generated-context.md).

Another owner's image answers the not-found page, exactly like an id that does not exist.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from memory_tools.errors import ToolFailure, Unavailable
from memory_tools.jobs.describe import review_context
from memory_tools.jobs.queue import OPERATOR_CANCEL, retry_asset_embedding
from memory_tools.services import MemoryServices
from memory_tools.web import security
from memory_tools.web.bodies import comma_separated
from memory_tools.web.handlers import WebRequest, action, endpoint, page
from memory_tools.web.library import KIND_LABELS, badge, place_ids, placement_value
from memory_tools.web.rendering import PREVIEW_ROUTE, Flash, read_flash
from memory_tools.workflows.assets import RepresentationState
from memory_tools.workflows.browsing import AssetDetail, asset_detail, original_link, preview_link
from memory_tools.workflows.changes import delete_asset, move_asset
from memory_tools.workflows.edits import update_asset

# Embedding state of a representation → (label, badge class, icon).
REPRESENTATION_BADGES = {
    "queued": ("Queued", "info", "◷"),
    "running": ("Running", "info", "▶"),
    "retry": ("Retrying", "warn", "↻"),
    "done": ("Embedded", "ok", "✓"),
    "failed": ("Failed", "bad", "✕"),
    "cancelled": ("Cancelled", "muted", "⊘"),
}
REPRESENTATIONS = (
    ("visual", "Visual", "the image alone"),
    ("fused", "Fused", "the image with its title, description and page text"),
)
SHA256_SHOWN = 12
# The id of a refused edit's message: the redirect's fragment scrolls to it, and it is focused.
EDIT_ERROR_ID = "asset-edit-error"
EDIT_FORM = "edit"


def representation_badge(status: str) -> tuple[str, str, str]:
    """``(label, class, icon)`` of a representation's embedding state."""
    return REPRESENTATION_BADGES.get(status, (status, "muted", "•"))


def can_retry(state: RepresentationState) -> bool:
    """Whether Retry is offered: for a failure, or for an operator's cancel.

    ``retry_asset_embedding`` refuses a job the server cancelled (superseded, or for a deleted
    image), so no button offers it.
    """
    return state.status == "failed" or (
        state.status == "cancelled" and state.last_error_code == OPERATOR_CANCEL
    )


def web_link(url: object) -> str | None:
    """``url`` when it is an http(s) link a page may point at; ``None`` to show it as text."""
    if isinstance(url, str) and url.lower().startswith(("https://", "http://")):
        return url
    return None


def _render(
    web: WebRequest,
    detail: AssetDetail,
    *,
    status: int = 200,
    edit_failure: ToolFailure | Flash | None = None,
    typed: dict[str, str] | None = None,
    **layout: Any,
) -> Response:
    asset = detail.asset
    states = {state.representation: state for state in asset.representations}
    source_ref: dict[str, Any] = dict(asset.source_ref)
    return web.render(
        "asset.html",
        status=status,
        title=asset.title,
        detail=detail,
        asset=asset,
        states=states,
        representations=REPRESENTATIONS,
        can_retry=can_retry,
        badge=badge,
        kind_labels=KIND_LABELS,
        representation_badge=representation_badge,
        web_link=web_link,
        source_ref=source_ref,
        sha_short=detail.sha256[:SHA256_SHOWN],
        current_place=placement_value(asset.project_id, asset.folder_id),
        placement_value=placement_value,
        edit_failure=edit_failure,
        typed=typed
        or {
            "title": asset.title,
            "description": asset.description or "",
            "tags": ", ".join(asset.tags),
        },
        back=f"/assets/{asset.asset_id}",
        edit_error_id=EDIT_ERROR_ID,
        **layout,
    )


def _asset_path(asset_id: str) -> str:
    return f"/assets/{quote(asset_id, safe='')}"


async def show_asset(web: WebRequest) -> Response:
    """The asset page; a refused edit's flash is shown beside the form, not at the top."""
    asset_id = web.request.path_params["asset_id"]
    detail = await web.call(asset_detail, asset_id=asset_id)
    flash = read_flash(web.request)
    if flash is None or flash.kind != "error" or flash.form != EDIT_FORM:
        return _render(web, detail)
    typed = {
        "title": detail.asset.title,
        "description": detail.asset.description or "",
        "tags": ", ".join(detail.asset.tags),
    }
    typed |= {name: value for name, value in (flash.fields or {}).items() if name in typed}
    # flash=None: the layout's banner stays empty (render_page still clears the cookie).
    return _render(web, detail, edit_failure=flash, typed=typed, flash=None)


async def to_asset_page(web: WebRequest) -> Response:
    """``GET`` of an action's address (reloaded or bookmarked): the asset page, never a 405."""
    return RedirectResponse(_asset_path(web.request.path_params["asset_id"]), status_code=303)


def _text(web: WebRequest, name: str) -> str:
    value = web.form().get(name)
    return value if isinstance(value, str) else ""


async def edit_asset(web: WebRequest) -> Response:
    """Save title, description and tags; a refusal shows the form again as it was typed."""
    asset_id = web.request.path_params["asset_id"]
    typed = {name: _text(web, name) for name in ("title", "description", "tags")}
    tags = comma_separated([typed["tags"]])
    try:
        edit = await web.call(
            update_asset,
            asset_id=asset_id,
            title=typed["title"],
            description=typed["description"],
            alt_text=None,
            tags=tags,
        )
    except ToolFailure as failure:
        if failure.code in ("unauthenticated", "not_found"):
            raise
        # Post-redirect-get: the address bar shows the asset page (a reload shows it again,
        # never re-posts or meets a 405); its fragment scrolls to the message beside the form.
        return web.redirect(
            f"{_asset_path(asset_id)}#{EDIT_ERROR_ID}",
            failure=failure,
            form=EDIT_FORM,
            fields=typed,
        )
    notice = "Saved." if edit.changed else "Nothing to save: it already read so."
    return web.redirect(f"/assets/{asset_id}", notice=notice)


async def move(web: WebRequest) -> Response:
    """Move to the chosen project or folder (or out of any project)."""
    asset_id = web.request.path_params["asset_id"]
    project_id, folder_id = place_ids(_text(web, "place"))
    moved = await web.call(
        move_asset, asset_id=asset_id, project_id=project_id, folder_id=folder_id
    )
    notice = "Moved." if moved.moved else "It is already there."
    return web.redirect(f"/assets/{asset_id}", notice=notice)


async def download_original(web: WebRequest) -> Response:
    """A 303 to a freshly signed download link of the original bytes."""
    link = await web.call(original_link, asset_id=web.request.path_params["asset_id"])
    if link.url is None:
        raise Unavailable(link.unavailable or "no download link can be given now")
    return RedirectResponse(link.url, status_code=303, headers={"Cache-Control": "no-store"})


async def preview(web: WebRequest) -> Response:
    """A redirect to a fresh signed link of the preview, cached for half the link's life.

    A browser that reuses the cached redirect then still reaches a link with time left; one
    that asks again gets a new link. ``private``: the answer is this session's, never a proxy's.
    """
    services = web.services
    link = await web.call(preview_link, asset_id=web.request.path_params["asset_id"])
    url = link.url or ""  # preview_link answers unavailable rather than a link without a url
    fresh_for = services.settings.asset_signed_get_ttl_seconds // 2
    cache = f"private, max-age={fresh_for}" if fresh_for >= 1 else "private, no-store"
    return RedirectResponse(
        security.same_origin_link(services, url),
        status_code=303,
        headers={"Cache-Control": cache},
    )


async def confirm_delete(web: WebRequest) -> Response:
    """The confirmation page of a delete (what the dialog asks, for a browser without scripts)."""
    detail = await web.call(asset_detail, asset_id=web.request.path_params["asset_id"])
    return web.render(
        "asset_delete.html",
        title=f"Delete {detail.asset.title}?",
        asset=detail.asset,
        back=f"/assets/{detail.asset.asset_id}",
    )


async def delete(web: WebRequest) -> Response:
    """Move the image to the trash, then show the library with a link to the trash."""
    deleted = await web.call(delete_asset, asset_id=web.request.path_params["asset_id"])
    notice = "Moved to the trash." if not deleted.already_deleted else "It was already deleted."
    return web.redirect("/library", notice=notice, link=("/trash", "Open the trash"))


async def retry(web: WebRequest) -> Response:
    """Queue a failed representation's embedding again."""
    asset_id = web.request.path_params["asset_id"]
    queued = await web.call(
        retry_asset_embedding, asset_id=asset_id, representation=_text(web, "representation")
    )
    return web.redirect(
        f"/assets/{asset_id}", notice=f"The {queued.representation} embedding is queued again."
    )


async def review(web: WebRequest) -> Response:
    """Accept the generated description, or clear it (it then leaves search)."""
    asset_id = web.request.path_params["asset_id"]
    choice = _text(web, "decision")
    await web.call(review_context, asset_id=asset_id, decision=choice)
    notice = "Description accepted." if choice == "accept" else "Description cleared."
    return web.redirect(f"/assets/{asset_id}", notice=notice)


def routes(services: MemoryServices) -> list[Route]:
    """The asset page and its actions."""
    return [
        page("/assets/{asset_id}", show_asset, services),
        page("/assets/{asset_id}/original", download_original, services),
        endpoint(PREVIEW_ROUTE, preview, services),
        page("/assets/{asset_id}/delete", confirm_delete, services),
        *(
            page(f"/assets/{{asset_id}}/{name}", to_asset_page, services)
            for name in ("edit", "move", "retry", "context")
        ),
        action("/assets/{asset_id}/edit", edit_asset, services),
        action("/assets/{asset_id}/move", move, services),
        action("/assets/{asset_id}/delete", delete, services),
        action("/assets/{asset_id}/retry", retry, services),
        action("/assets/{asset_id}/context", review, services),
    ]
