"""The trash page: recently deleted images, restore, and purge now (docs/web.md#trash).

``GET /trash`` lists the deleted images the caller could restore
(:func:`memory_tools.workflows.trash.
list_trash`), most recently deleted first, with the time left before the purge. Two actions,
each a POST with the CSRF token that redirects back with what happened:

- ``POST /trash/{asset_id}/restore``: :func:`memory_tools.workflows.changes.restore_asset`, the
workflow
  of ``image_asset_restore``;
- ``POST /trash/{asset_id}/purge``: :func:`memory_tools.workflows.trash.purge_asset`, after a
  confirmation dialog (``confirmed=yes``); without it, a page that asks first.

Another owner's image, or one no longer in the trash, is refused like an id that never existed.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from starlette.responses import Response
from starlette.routing import Route

from memory_tools.services import MemoryServices
from memory_tools.web.handlers import WebRequest, action, page
from memory_tools.workflows import changes
from memory_tools.workflows import trash as trash_workflows

PAGE_SIZE = 24
_PLACEMENTS = {
    "original": "where it was",
    "project_root": "to its project's root (its folder is gone)",
    "unfiled": "to Unfiled (its project is gone or archived)",
}


def time_left(until: datetime, now: datetime) -> str:
    """``3 d 4 h``, ``5 h 12 min``, ``8 min``, or ``less than a minute``, until ``until``."""
    left = until - now
    if left <= timedelta(minutes=1):
        return "less than a minute"
    minutes = int(left.total_seconds() // 60)
    days, rest = divmod(minutes, 24 * 60)
    hours, minutes = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min"


def routes(services: MemoryServices) -> list[Route]:
    """``/trash`` and its restore and purge actions."""

    async def show(web: WebRequest) -> Response:
        cursor = web.request.query_params.get("cursor") or None
        listing = await web.call(trash_workflows.list_trash, limit=PAGE_SIZE, cursor=cursor)
        now = datetime.now(UTC)
        return web.render(
            "trash.html",
            title="Trash",
            listing=listing,
            cursor=cursor,
            left={item.asset_id: time_left(item.purge_at, now) for item in listing.items},
        )

    async def restore(web: WebRequest) -> Response:
        asset_id = web.request.path_params["asset_id"]
        restored = await web.call(changes.restore_asset, asset_id=asset_id)
        back = web.back("/trash")
        if restored.already_active:
            return web.redirect(back, notice="That image is not in the trash: nothing to restore.")
        return web.redirect(
            back,
            notice=f"Restored {_PLACEMENTS.get(restored.placement, restored.placement)}; "
            "it is being embedded again.",
        )

    async def purge(web: WebRequest) -> Response:
        asset_id = web.request.path_params["asset_id"]
        if web.form().get("confirmed") != "yes":
            # The page's dialog confirms with scripts; without them, this page asks first.
            # It looks nothing up, so it says the same for any id.
            return web.render(
                "trash_purge.html", title="Purge now?", asset_id=asset_id, back=web.back("/trash")
            )
        purged = await web.call_as_caller(trash_workflows.purge_asset, services, asset_id=asset_id)
        if purged.bytes_deleted:
            notice = "Purged: the image and its bytes are gone."
        elif purged.bytes_kept is not None:
            notice = f"Purged: the image is gone; its bytes stay ({purged.bytes_kept})."
        else:  # in a vault shared with the caller: nothing said of the owner's bytes
            notice = "Purged: the image is gone."
        return web.redirect(web.back("/trash"), notice=notice)

    return [
        page("/trash", show, services),
        action("/trash/{asset_id}/restore", restore, services),
        action("/trash/{asset_id}/purge", purge, services),
    ]
