"""The library (docs/web.md#library): vaults → projects → folders, and a grid of images.

- ``GET /library``: the tree (:func:`memory_tools.workflows.browsing.library_tree`) beside a grid
  of one page of ``image_asset_list`` with a preview link per image
  (:func:`memory_tools.workflows.browsing.asset_grid`). The query carries where to look
  (``vault``, ``project``, ``folder``), the tools' exact filters by their names (``tags``,
  ``sourceKinds``, ``mimeTypes``, ...; the former ``kind`` and ``mime`` are still read),
  ``order`` and the page (``limit``, ``cursor``, and ``back=1`` for a previous page), so every
  view is a link. A filter refused (by its bounds or the workflow) shows its error in place of
  the grid, beside the tree.
- ``POST /library/projects`` and ``POST /library/folders``: create a project
  (``projects.create_project``) or a folder (``projects.create_folder``), then show it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import date, timedelta
from typing import Any, cast
from urllib.parse import urlencode

from starlette.datastructures import QueryParams
from starlette.responses import Response
from starlette.routing import Route

from memory_db.schema import SOURCE_KINDS
from memory_tools.errors import InvalidInputFailure, ToolFailure, http_status
from memory_tools.services import MemoryServices
from memory_tools.web.filter_query import filter_pairs, read_filters, set_filters, unset_filters
from memory_tools.web.handlers import WebRequest, action, page
from memory_tools.workflows.assets import MIME_TYPES, ListOrder, ListRequest
from memory_tools.workflows.browsing import (
    AssetGrid,
    LibraryTree,
    asset_grid,
    library_tree,
    move_destinations,
)
from memory_tools.workflows.filters import FILTER_NAMES, FilterParameters
from memory_tools.workflows.keys import list_keys
from memory_tools.workflows.projects import create_folder, create_project

PAGE_SIZE = 24

# status → (label, badge class, icon); the word and the icon say it without the colour.
STATUS_BADGES = {
    "ready": ("Ready", "ok", "✓"),
    "processing": ("Processing", "info", "◔"),
    "failed": ("Failed", "bad", "✕"),
}
KIND_LABELS = {
    "upload": "Upload",
    "scrape": "Scraped from a page",
    "screenshot": "Screenshot",
    "instagram": "Instagram",
    "external_url": "From a URL",
    "import": "Import",
}
WRITABLE = ("owner", "admin", "write")


def badge(status: str) -> tuple[str, str, str]:
    """``(label, class, icon)`` of an asset status; an unknown one is shown as it is."""
    return STATUS_BADGES.get(status, (status, "muted", "•"))


def placement_value(project_id: str | None, folder_id: str | None) -> str:
    """How the move form names a place: ``""``, ``apr_…`` or ``apr_…/afl_…``."""
    if project_id is None:
        return ""
    return project_id if folder_id is None else f"{project_id}/{folder_id}"


def place_ids(place: str) -> tuple[str | None, str | None]:
    """The project and folder a move form's place names (:func:`placement_value` reversed)."""
    project_id, _, folder_id = place.partition("/")
    if folder_id and "/" in folder_id:
        raise InvalidInputFailure("place: a project, or a project and one of its folders")
    return project_id or None, folder_id or None


def _one(params: QueryParams, name: str) -> str | None:
    return params.get(name) or None


# Links written before the library took the tools' names for its filters still work.
FORMER_NAMES = {"kind": "sourceKinds", "mime": "mimeTypes"}


def _no_filters() -> dict[str, Any]:
    return unset_filters(FILTER_NAMES)


@dataclass(frozen=True)
class LibraryQuery:
    """What a library URL asks for; :meth:`url` writes one back (a view is always a link).

    Where to look (``vault``, ``project``, ``folder``) is the tree's choice; ``filters`` holds
    every exact filter as typed, by the tools' camelCase names
    (:func:`memory_tools.web.filter_query.read_filters`).
    """

    vault: str | None = None
    project: str | None = None
    folder: str | None = None
    filters: dict[str, Any] = field(default_factory=_no_filters)
    order: str = "newest"
    limit: int = PAGE_SIZE
    cursor: str | None = None
    back: bool = False

    @classmethod
    def parse(cls, params: QueryParams) -> LibraryQuery:
        """The query of ``GET /library``; values are checked when the request is made."""
        return cls(
            vault=_one(params, "vault"),
            project=_one(params, "project"),
            folder=_one(params, "folder"),
            filters=_taken_days(params, read_filters(params, FILTER_NAMES, former=FORMER_NAMES)),
            order=params.get("order") or "newest",
            # Not a number: 0, which the workflow refuses with its own words.
            limit=int(limit) if (limit := params.get("limit", str(PAGE_SIZE))).isdigit() else 0,
            cursor=_one(params, "cursor"),
            back=params.get("back") == "1",
        )

    @property
    def filtered(self) -> bool:
        """Whether any filter narrows the grid (where to look is not a filter)."""
        return bool(set_filters(self.filters))

    @property
    def active(self) -> int:
        """How many filter values narrow the grid (each tag and each choice counts)."""
        return len(filter_pairs(self.filters))

    def taken_day(self, name: str) -> str:
        """The day a ``takenFrom``/``takenUntil`` control shows for its filter, or ``""``.

        Only a filter at midnight UTC is a day (``takenBefore`` is the day after the last one);
        any other instant (a link may carry one) is kept as it is, in a hidden field.
        """
        value = self.filters.get(name, "")
        match = _MIDNIGHT.fullmatch(value) if isinstance(value, str) else None
        if match is None:
            return ""
        day = date.fromisoformat(match[1])
        return (day - timedelta(days=1) if name == "takenBefore" else day).isoformat()

    def kept_filters(self, shown: tuple[str, ...]) -> list[tuple[str, str]]:
        """The filters the toolbar has no control for, as pairs its form keeps (hidden)."""
        return [(name, value) for name, value in filter_pairs(self.filters) if name not in shown]

    def request(self) -> ListRequest:
        """The ``image_asset_list`` request this view makes; ``invalid_input`` past a bound."""
        place = {"vault": self.vault, "projectId": self.project, "folderId": self.folder}
        chosen = {name: value for name, value in place.items() if value is not None}
        parameters = FilterParameters.checked(chosen | set_filters(self.filters))
        return ListRequest(
            **parameters.request_fields(),
            order=cast(ListOrder, self.order),  # the workflow checks it
            limit=self.limit,
            cursor=self.cursor,
        )

    def url(self, **changes: Any) -> str:
        """``/library?...`` for this view with ``changes``; a new view starts at page one."""
        changes.setdefault("cursor", None)
        changes.setdefault("back", False)
        view = replace(self, **changes)
        pairs: list[tuple[str, str]] = []
        for name, value in (
            ("vault", view.vault),
            ("project", view.project),
            ("folder", view.folder),
        ):
            if value:
                pairs.append((name, value))
        pairs.extend(filter_pairs(view.filters))
        if view.order != "newest":
            pairs.append(("order", view.order))
        if view.limit != PAGE_SIZE:
            pairs.append(("limit", str(view.limit)))
        if view.cursor:
            pairs.append(("cursor", view.cursor))
        if view.back:
            pairs.append(("back", "1"))
        return "/library" + (f"?{urlencode(pairs)}" if pairs else "")


# The toolbar's day controls, and the capture filters they stand for: a day in UTC, the end
# day inclusive (as the search page's day controls).
TAKEN_DAYS = {"takenFrom": "takenAfter", "takenUntil": "takenBefore"}
_MIDNIGHT = re.compile(r"(\d{4}-\d{2}-\d{2})T00:00:00Z")


def _taken_days(params: QueryParams, filters: dict[str, Any]) -> dict[str, Any]:
    """``filters`` with a day chosen in ``takenFrom``/``takenUntil`` as its capture filter.

    A day is written as the instant it starts (the day after, for the inclusive end), so the
    page's links carry the tools' own filters; a value that is not a day is passed on as it
    is, for the filter's check to refuse with its own words.
    """
    read = dict(filters)
    for control, name in TAKEN_DAYS.items():
        value = (params.get(control) or "").strip()
        if not value:
            continue
        try:
            day = date.fromisoformat(value)
        except ValueError:
            read[name] = value
            continue
        if name == "takenBefore":
            day += timedelta(days=1)
        read[name] = f"{day.isoformat()}T00:00:00Z"
    return read


def _heading(query: LibraryQuery, tree: LibraryTree) -> str:
    if query.vault is None:
        return "All images"
    project = next(
        (p for p in tree.projects.get(query.vault, []) if p.project_id == query.project), None
    )
    if project is None:
        return query.vault
    folder = next((f for f in tree.folders if f.folder_id == query.folder), None)
    return f"{project.name}{folder.path}" if folder is not None else project.name


async def show_library(web: WebRequest) -> Response:
    """The tree and one page of the grid; a refused filter shows its error in the grid."""
    query = LibraryQuery.parse(web.request.query_params)
    tree = await web.call(library_tree, vault=query.vault, project_id=query.project)
    grid: AssetGrid | None = None
    failure: ToolFailure | None = None
    try:
        grid = await web.call(asset_grid, query.request(), backward=query.back)
    except ToolFailure as refused:
        if refused.code == "unauthenticated":
            raise
        failure = refused
    writable_vaults = [v.vault for v in tree.vaults if v.permission in WRITABLE and web.may_change]
    # The "Saved by" choices: the viewer's keys (an operator's: everyone's), newest first.
    saved_by_keys = (await web.call(list_keys)).keys
    # Where the bulk bar can move the selection to; each image's move is still its own call.
    destinations = await web.call(move_destinations)
    return web.render(
        "library.html",
        status=200 if failure is None else http_status(failure),
        title="Library",
        heading=_heading(query, tree),
        query=query,
        tree=tree,
        grid=grid,
        failure=failure,
        badge=badge,
        kinds=[(kind, KIND_LABELS.get(kind, kind)) for kind in SOURCE_KINDS],
        mime_types=MIME_TYPES,
        page_size=PAGE_SIZE,
        writable_vaults=writable_vaults,
        saved_by_keys=saved_by_keys,
        bulk_enabled=web.may_change,
        destinations=destinations,
        placement_value=placement_value,
        reset_url=query.url(filters=_no_filters(), order="newest"),
        here=str(web.request.url.path)
        + (f"?{web.request.url.query}" if web.request.url.query else ""),
    )


def _field(web: WebRequest, name: str) -> str | None:
    value = web.form().get(name)
    return value if isinstance(value, str) and value != "" else None


async def create_project_action(web: WebRequest) -> Response:
    """Create a project in the chosen vault; show it."""
    vault = _field(web, "vault") or "Library"
    made = await web.call(
        create_project,
        vault=vault,
        name=_field(web, "name") or "",
        description=_field(web, "description"),
    )
    return web.redirect(
        LibraryQuery(vault=made.vault, project=made.project_id).url(),
        notice=f"Project “{made.name}” created.",
    )


async def create_folder_action(web: WebRequest) -> Response:
    """Create a folder in a project (inside a folder when ``parent`` is given); show it."""
    made = await web.call(
        create_folder,
        vault=_field(web, "vault") or "",
        project_id=_field(web, "project") or "",
        parent_id=_field(web, "parent"),
        name=_field(web, "name") or "",
    )
    return web.redirect(
        LibraryQuery(vault=made.vault, project=made.project_id, folder=made.folder_id).url(),
        notice=f"Folder “{made.path}” created.",
    )


def routes(services: MemoryServices) -> list[Route]:
    """``/library`` and its two forms."""
    return [
        page("/library", show_library, services),
        action("/library/projects", create_project_action, services),
        action("/library/folders", create_folder_action, services),
    ]
