"""Bulk actions of the library and the trash (docs/web.md#bulk-actions).

The library's and the trash's selected images go to one of two routes:

- ``POST /bulk/items``: the pages' script, a JSON body ``{"action", "assetIds", "place"?,
  "tags"?}`` with the ``X-CSRF-Token`` header; it answers ``{"items": [{"assetId", "ok",
  "error"?}], "succeeded", "failed"}`` in the order given. The script (``static/bulk.js``)
  sends a selection in chunks of a few ids and shows the progress between them.
- ``POST /bulk``: the same form without scripts (the checked boxes, the ``csrf`` field) answers
  a results page; a purge asks on a page of its own first (``confirmed=yes``).

Actions: ``move`` (to ``place``, a project or ``project/folder`` of the image's vault),
``addTags`` and ``removeTags`` (``tags``), ``delete`` (to the trash), and in the trash
``restore`` and ``purge``. Every id is run by :func:`memory_tools.workflows.bulk.run_each`
with the single image's workflow, authorised alone: a refused item is answered with its code
and message and never stops the rest; the limit of ids a request may carry is the workflow's
(:data:`memory_tools.workflows.bulk.MAX_IDS`). This module only reads the request, calls the
runner and renders its answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from starlette.datastructures import FormData
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from memory_tools.errors import InvalidInputFailure
from memory_tools.services import MemoryServices
from memory_tools.web import handlers
from memory_tools.web.bodies import comma_separated
from memory_tools.web.handlers import WebRequest
from memory_tools.web.library import place_ids
from memory_tools.workflows import bulk, changes, edits
from memory_tools.workflows import trash as trash_workflows

FORM_PATH = "/bulk"
ITEMS_PATH = "/bulk/items"


@dataclass(frozen=True)
class BulkAction:
    """One action the pages offer: what it is called, and what the results page says."""

    name: str
    done: str  # "Moved": the results page's heading reads "Moved 39 of 40 images"
    takes_tags: bool = False  # the Tag field is its subject (an empty one is refused)


ACTIONS: dict[str, BulkAction] = {
    each.name: each
    for each in (
        BulkAction("move", "Moved"),
        BulkAction("addTags", "Tagged", takes_tags=True),
        BulkAction("removeTags", "Untagged", takes_tags=True),
        BulkAction("delete", "Moved to the trash"),
        BulkAction("restore", "Restored"),
        BulkAction("purge", "Purged"),
    )
}


@dataclass(frozen=True)
class BulkRequest:
    """What a bulk request asks: an action, the ids, and the action's own field."""

    action: BulkAction
    asset_ids: list[str]
    place: str = ""
    tags: list[str] = field(default_factory=list[str])

    @classmethod
    def parse(cls, action: object, asset_ids: object, place: object, tags: object) -> BulkRequest:
        """A request from the values sent; ``invalid_input`` naming what is wrong."""
        if not isinstance(action, str) or action not in ACTIONS:
            raise InvalidInputFailure(f"action: one of {', '.join(ACTIONS)}")
        chosen = ACTIONS[action]
        if not isinstance(asset_ids, list) or not all(isinstance(i, str) for i in asset_ids):
            raise InvalidInputFailure("assetIds: a list of asset ids")
        if not isinstance(place, str):
            raise InvalidInputFailure("place: a project, or a project and one of its folders")
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            raise InvalidInputFailure("tags: a list of tags")
        # The form's Tag field is the action's subject: an empty one would change nothing for
        # every image and still answer each "done".
        if chosen.takes_tags and not tags:
            raise InvalidInputFailure("tags: type the tag to add or remove")
        return cls(chosen, [str(i) for i in asset_ids], place, [str(t) for t in tags])

    @classmethod
    def from_json(cls, body: Any) -> BulkRequest:
        """The request of the pages' script: a JSON object."""
        if not isinstance(body, dict):
            raise InvalidInputFailure("the body must be a JSON object")
        sent = cast(Mapping[str, Any], body)
        return cls.parse(
            sent.get("action"), sent.get("assetIds"), sent.get("place", ""), sent.get("tags", [])
        )

    @classmethod
    def from_form(cls, form: FormData) -> BulkRequest:
        """The request of a page without scripts: its checked boxes and the button pressed."""
        tag = form.get("tag")
        return cls.parse(
            form.get("action"),
            [value for value in form.getlist("assetIds") if isinstance(value, str)],
            form.get("place") or "",
            comma_separated([tag]) if isinstance(tag, str) else [],
        )

    async def run(self, web: WebRequest) -> bulk.BulkAnswer[Any]:
        """Each id through the runner with its action's workflow, as this browser's session."""
        name = self.action.name
        services, credential, ids = web.services, web.credential(), self.asset_ids
        if name == "move":
            project_id, folder_id = place_ids(self.place)
            return await bulk.run_each(
                services,
                credential,
                changes.move_asset,
                ids,
                project_id=project_id,
                folder_id=folder_id,
            )
        if name in ("addTags", "removeTags"):
            adding = name == "addTags"
            return await bulk.run_each(
                services,
                credential,
                edits.update_asset,
                ids,
                title=None,
                description=None,
                alt_text=None,
                tags=None,
                add_tags=self.tags if adding else None,
                remove_tags=None if adding else self.tags,
            )
        if name == "delete":
            return await bulk.run_each(services, credential, changes.delete_asset, ids)
        if name == "restore":
            return await bulk.run_each(services, credential, changes.restore_asset, ids)
        return await bulk.run_each_as_caller(services, credential, trash_workflows.purge_asset, ids)


def _item(item: bulk.BulkItem[Any]) -> dict[str, Any]:
    """What the script needs of an item: its id, whether it was done, and why not."""
    answer: dict[str, Any] = {"assetId": item.asset_id, "ok": item.ok}
    if item.error is not None:
        answer["error"] = {"code": item.error.code, "message": item.error.message}
    return answer


async def run_items(web: WebRequest) -> Response:
    """``POST /bulk/items``: one chunk of a selection, answered item by item."""
    request = BulkRequest.from_json(await web.json())
    answer = await request.run(web)
    return JSONResponse(
        {
            "items": [_item(item) for item in answer.items],
            "succeeded": answer.succeeded,
            "failed": answer.failed,
        }
    )


async def run_form(web: WebRequest) -> Response:
    """``POST /bulk``: a page's checked boxes without scripts; answers a results page."""
    request = BulkRequest.from_form(web.form())
    back = web.back()
    if request.action.name == "purge" and web.form().get("confirmed") != "yes":
        # The trash's dialog confirms with scripts; without them this page asks first. It
        # looks nothing up, so it says the same for any id.
        return web.render(
            "bulk_purge.html", title="Purge now?", asset_ids=request.asset_ids, back=back
        )
    answer = await request.run(web)
    return web.render(
        "bulk_results.html",
        title=f"{request.action.done} {answer.succeeded} of {len(answer.items)}",
        action=request.action,
        answer=answer,
        refused=[item for item in answer.items if not item.ok],
        in_trash=request.action.name in ("restore", "purge"),
        back=back,
    )


def routes(services: MemoryServices) -> list[Route]:
    """The bulk form action and its JSON endpoint."""
    return [
        handlers.action(FORM_PATH, run_form, services),
        handlers.endpoint(ITEMS_PATH, run_items, services, methods=("POST",)),
    ]
