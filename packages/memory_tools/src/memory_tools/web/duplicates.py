"""The duplicates page (docs/web.md#duplicates): near-duplicate images of a vault, in groups.

- ``GET /duplicates``: the vault picker and one page of groups
  (:func:`memory_tools.workflows.browsing.duplicate_groups`: ``duplicates.list_clusters`` with
  each image's size and a preview link, shown through the session's preview route as the
  library's cards are). The query carries ``vault`` and ``cursor``, so every view is a link.
- ``POST /duplicates/keep``: keep the chosen image (``keep``) of a group (its ``asset`` ids)
  and move the others to the trash (:func:`memory_tools.workflows.duplicates.keep_one`); the
  answer is a page that names every image with what happened to it (a refused one with its
  code and reason).
- ``POST /duplicates/dismiss``: "not duplicates" for a group's ``asset`` ids in ``vault``
  (:func:`memory_tools.workflows.duplicates.dismiss_cluster`): remembered, the group does not
  come back.

Which image a group's form preselects is :func:`preselected`. What may be trashed or dismissed,
and by whom, is the workflows' to decide: this module reads the form, calls them and renders.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlencode

from starlette.responses import Response
from starlette.routing import Route

from memory_tools.errors import InvalidInputFailure, NotFoundFailure
from memory_tools.services import MemoryServices
from memory_tools.web.handlers import WebRequest, action, page
from memory_tools.web.library import WRITABLE
from memory_tools.workflows.browsing import (
    DuplicateCard,
    asset_titles,
    duplicate_groups,
    library_tree,
)
from memory_tools.workflows.duplicates import dismiss_cluster, keep_one

PAGE_SIZE = 10


def preselected(cards: Sequence[DuplicateCard]) -> str:
    """The image a group's form offers to keep: the largest, then the oldest.

    The most pixels (then bytes) first: a re-encode, a thumbnail or a crop is never larger than
    what it was made from, so the largest is the one that lost nothing. Among equals the oldest
    (saved first) is the one the others were most likely copied from, and the one older links
    and notes point at.
    """
    best = min(cards, key=lambda c: (-(c.width * c.height), -c.bytes, c.created_at, c.asset_id))
    return best.asset_id


def duplicates_url(vault: str | None = None, cursor: str | None = None) -> str:
    """``/duplicates?...`` for a vault and page."""
    pairs = [(name, value) for name, value in (("vault", vault), ("cursor", cursor)) if value]
    return "/duplicates" + (f"?{urlencode(pairs)}" if pairs else "")


def _field(web: WebRequest, name: str) -> str | None:
    value = web.form().get(name)
    return value if isinstance(value, str) and value != "" else None


def _group(web: WebRequest) -> list[str]:
    """The group's asset ids, as the form lists them (the workflows check them)."""
    return [value for value in web.form().getlist("asset") if isinstance(value, str)]


async def show(web: WebRequest) -> Response:
    """The vault picker and a page of groups (or what the page is for, when there is none)."""
    params = web.request.query_params
    cursor = params.get("cursor") or None
    listing = await web.call(
        duplicate_groups, vault=params.get("vault") or None, limit=PAGE_SIZE, cursor=cursor
    )
    tree = await web.call(library_tree, vault=None, project_id=None)
    permission = next((v.permission for v in tree.vaults if v.vault == listing.vault), None)
    return web.render(
        "duplicates.html",
        title="Duplicates",
        vaults=tree.vaults,
        listing=listing,
        cursor=cursor,
        may_decide=web.may_change and permission in WRITABLE,
        preselected=preselected,
        here=duplicates_url(listing.vault, cursor),
        first_page=duplicates_url(listing.vault),
        next_page=duplicates_url(listing.vault, listing.next_cursor)
        if listing.next_cursor
        else None,
    )


async def keep(web: WebRequest) -> Response:
    """Keep one image of a group, trash the others; a page names what happened to each."""
    group, kept = _group(web), _field(web, "keep")
    if kept is None or kept not in group:
        raise InvalidInputFailure("keep: choose one of the group's images to keep")
    vault = _field(web, "vault")
    # Read before the change: the trashed images are no longer live afterwards.
    titles = await web.call(asset_titles, vault=vault, asset_ids=group)
    # Checked again for each image, as the library's bulk actions do: a session ended or a
    # key paused mid-way is refused from the next image on.
    result = await keep_one(
        web.services, web.credential(), keep=kept, trash=[a for a in group if a != kept]
    )
    return web.render(
        "duplicates_kept.html",
        title="Kept one, trashed the others",
        result=result,
        titles=titles,
        trashed=sum(1 for item in result.items if item.trashed),
        back=web.back(duplicates_url(vault)),
    )


async def dismiss(web: WebRequest) -> Response:
    """Mark a group "not duplicates"; it never comes back."""
    vault = _field(web, "vault")
    dismissed = await web.call(dismiss_cluster, asset_ids=_group(web), vault=vault)
    back = web.back(duplicates_url(vault))
    if dismissed.dismissed == 0:
        # Ids of another vault or owner match no pair here, and neither do ids dismissed
        # already: either way nothing changed, and the page says so in the same words.
        failure = NotFoundFailure(
            f"no open group of these images in {dismissed.vault}: nothing changed"
        )
        return web.redirect(back, failure=failure)
    return web.redirect(
        back,
        notice=f"Marked as not duplicates: these {len(dismissed.asset_ids)} images will not "
        "be offered together again.",
    )


def routes(services: MemoryServices) -> list[Route]:
    """``/duplicates`` and its two forms."""
    return [
        page("/duplicates", show, services),
        action("/duplicates/keep", keep, services),
        action("/duplicates/dismiss", dismiss, services),
    ]
