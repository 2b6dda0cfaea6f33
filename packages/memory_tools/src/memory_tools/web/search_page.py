"""The Search page (docs/web.md#search): by words, by an image, or both, with the tool's filters.

- ``GET /search?query=&...``: a search by words (or by a stored image, ``assetId``) is a plain,
  linkable GET; without a query it shows the empty form.
- ``POST /search``: the same form as ``multipart/form-data`` with a query image (chosen, or
  pasted: ``search.js`` puts it in the file field) and the CSRF token; its size is bounded by
  ``ASSET_MAX_BYTES``, as the tool bounds a query image.

Both run ``AssetSearcher.search``, the workflow of ``image_asset_search``, as the signed-in
caller and outside a transaction (a query image is decoded, words are embedded). Results show
each image's preview (a signed link), its score (0 to 1, the order of the results), its
similarity and, in words, what matched it; and the workflow's verdict (``noGoodMatch``,
``bestScore``, ``goodMatchScore``: similarities) in plain words. A refused search shows the
workflow's message and code and keeps what was typed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from starlette.datastructures import ImmutableMultiDict, UploadFile
from starlette.responses import Response
from starlette.routing import Route

from memory_db.schema import SOURCE_KINDS
from memory_tools.errors import InvalidInputFailure, ToolFailure, http_status
from memory_tools.ingest.images import FORMATS
from memory_tools.services import MemoryServices
from memory_tools.web import security
from memory_tools.web.filter_query import read_filters, set_filters, unset_filters
from memory_tools.web.handlers import FORM_MAX_BYTES, WebRequest, action, page
from memory_tools.web.rendering import human_bytes
from memory_tools.web.security import same_origin_link
from memory_tools.web.uploads import ASSET_PATH, UPLOAD_PATH
from memory_tools.workflows.assets import MIME_TYPES
from memory_tools.workflows.filters import FilterParameters
from memory_tools.workflows.projects import FolderView, ProjectView, list_folders, list_projects
from memory_tools.workflows.search import (
    MAX_SEARCH_LIMIT,
    AssetSearcher,
    SearchHit,
    SearchRequest,
    SearchView,
)
from memory_tools.workflows.vaults import list_vaults

SEARCH_PATH = "/search"
DEFAULT_LIMIT = 10
LIMITS = (10, 20, MAX_SEARCH_LIMIT)
# As the search tool bounds assetId.
MAX_ID_LENGTH = 64


@dataclass(frozen=True)
class MatchedBy:
    """How a card names one of a result's ``matchRepresentations`` to a person."""

    label: str
    meaning: str


# The representations a result can be found by, as the tool names them, in a person's words.
MATCHED = {
    "visual": MatchedBy("picture", "the picture alone is close to the query"),
    "fused": MatchedBy("picture + words", "the picture with its words is close to the query"),
    "metadata": MatchedBy(
        "words",
        "the query's words are in its title, tags, alt text, description or the text read in it",
    ),
}


# The page's date controls stand for the time filters: a day in UTC, the end one inclusive.
DAY_CONTROLS = {
    "createdAfter": "createdFrom",
    "createdBefore": "createdUntil",
    "takenAfter": "takenFrom",
    "takenBefore": "takenUntil",
}


@dataclass(frozen=True)
class SearchForm:
    """The search form as filled in.

    Read from a query string or a POST body, drawn again with the results, and turned into the
    search tool's request. ``filters`` holds every filter parameter as typed, by its camelCase
    name (:func:`memory_tools.web.filter_query.read_filters`).
    """

    query: str = ""
    asset_id: str = ""
    filters: dict[str, Any] = field(default_factory=unset_filters)
    created_from: str = ""
    created_until: str = ""
    taken_from: str = ""
    taken_until: str = ""
    limit: str = str(DEFAULT_LIMIT)
    min_score: str = ""

    @classmethod
    def read(cls, values: ImmutableMultiDict[str, Any]) -> SearchForm:
        """The form's fields from ``values`` (query parameters or form fields); others ignored."""

        def text(name: str) -> str:
            value = values.get(name)
            return value.strip() if isinstance(value, str) else ""

        return cls(
            query=text("query"),
            asset_id=text("assetId"),
            filters=read_filters(values),
            created_from=text(DAY_CONTROLS["createdAfter"]),
            created_until=text(DAY_CONTROLS["createdBefore"]),
            taken_from=text(DAY_CONTROLS["takenAfter"]),
            taken_until=text(DAY_CONTROLS["takenBefore"]),
            limit=text("limit") or str(DEFAULT_LIMIT),
            min_score=text("minScore"),
        )

    def asked(self) -> bool:
        """Whether the form asks something by itself (words, or a stored image)."""
        return bool(self.query or self.asset_id)

    def filtered(self) -> bool:
        """Whether anything beyond the words and the image is set (the filters show open)."""
        return self != replace(SearchForm(), query=self.query, asset_id=self.asset_id)

    def request(self, image: bytes | None, project_vaults: Mapping[str, str]) -> SearchRequest:
        """The search tool's request; ``invalid_input`` for what the tool's schema refuses.

        ``project_vaults``: each visible project's vault, so a project chosen under "All
        vaults" names its vault, as the workflow requires.
        """
        if len(self.asset_id) > MAX_ID_LENGTH:
            raise InvalidInputFailure(f"assetId: at most {MAX_ID_LENGTH} characters")
        values = set_filters(self.filters)
        if self.created_from:
            values["createdAfter"] = _day(self.created_from, DAY_CONTROLS["createdAfter"])
        if self.created_until:
            until = DAY_CONTROLS["createdBefore"]
            values["createdBefore"] = _day(self.created_until, until, next_day=True)
        if self.taken_from:
            values["takenAfter"] = _day(self.taken_from, DAY_CONTROLS["takenAfter"])
        if self.taken_until:
            until = DAY_CONTROLS["takenBefore"]
            values["takenBefore"] = _day(self.taken_until, until, next_day=True)
        project = str(values.get("projectId", ""))
        if "vault" not in values and project in project_vaults:
            values["vault"] = project_vaults[project]
        filters = FilterParameters.checked(values)
        return SearchRequest(
            query=self.query or None,
            asset_id=self.asset_id or None,
            image_bytes=image,
            **filters.request_fields(),
            limit=_whole(self.limit, "limit"),
            min_score=_score(self.min_score) if self.min_score else None,
            include_preview=True,
        )


def _day(value: str, name: str, *, next_day: bool = False) -> datetime:
    """The start (UTC) of the day ``value`` names, or of the next day (an inclusive end)."""
    try:
        day = date.fromisoformat(value)
    except ValueError:
        raise InvalidInputFailure(f"{name}: give a date as YYYY-MM-DD") from None
    start = datetime.combine(day, time(), tzinfo=UTC)
    return start + timedelta(days=1) if next_day else start


def _whole(value: str, name: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise InvalidInputFailure(f"{name}: a whole number") from None


def _score(value: str) -> float:
    try:
        score = float(value)
    except ValueError:
        raise InvalidInputFailure("minScore: a similarity between -1 and 1") from None
    if not math.isfinite(score):
        raise InvalidInputFailure("minScore: a similarity between -1 and 1")
    return score


async def _query_image(form: Mapping[str, Any]) -> tuple[bytes | None, str | None]:
    """The query image of a POSTed form and a name to show for it; none when the field is empty."""
    upload = form.get("image")
    if not isinstance(upload, UploadFile):
        return None, None
    data = await upload.read()
    if not data and not upload.filename:
        return None, None  # the file field was left empty
    return data, f"{upload.filename or 'pasted image'} ({human_bytes(len(data))})"


def routes(services: MemoryServices) -> list[Route]:
    """``GET /search`` and ``POST /search``."""
    searcher = AssetSearcher(services)
    # A query image may be as large as ASSET_MAX_BYTES; the other fields are a small form.
    post_limit = services.settings.asset_max_bytes + FORM_MAX_BYTES

    async def choices(
        web: WebRequest, form: SearchForm
    ) -> tuple[list[str], list[ProjectView], list[FolderView]]:
        vaults = [v.vault for v in (await web.call(list_vaults)).vaults]
        projects = (await web.call(list_projects, vault=None, include_archived=False)).projects
        folders: list[FolderView] = []
        chosen = [p for p in projects if p.project_id == form.filters["projectId"]]
        if chosen:
            tree = await web.call(
                list_folders, vault=chosen[0].vault, project_id=chosen[0].project_id
            )
            folders = tree.folders
        return vaults, projects, folders

    async def run(
        web: WebRequest,
        form: SearchForm,
        image: bytes | None,
        image_name: str | None,
    ) -> Response:
        vaults, projects, folders = await choices(web, form)
        view: SearchView | None = None
        failure: ToolFailure | None = None
        if form.asked() or image is not None:
            try:
                request = form.request(image, {p.project_id: p.vault for p in projects})
                view = await web.call_as_caller(searcher.search, request)
            except ToolFailure as refused:
                failure = refused
        if view is not None:
            view = _same_origin_previews(services, view)
        return web.render(
            "search.html",
            status=200 if failure is None else _status(failure),
            title="Search",
            form=form,
            view=view,
            failure=failure,
            image_name=image_name,
            vaults=vaults,
            projects=projects,
            folders=folders,
            source_kinds=SOURCE_KINDS,
            mime_types=MIME_TYPES,
            limits=LIMITS,
            matched=MATCHED,
            search_path=SEARCH_PATH,
            upload_path=UPLOAD_PATH,
            asset_path=ASSET_PATH,
            csrf_field=security.CSRF_FIELD,
            max_size=human_bytes(services.settings.asset_max_bytes),
            formats=", ".join(f.name.upper() for f in FORMATS.values()),
        )

    async def show(web: WebRequest) -> Response:
        return await run(web, SearchForm.read(web.request.query_params), None, None)

    async def search_with_image(web: WebRequest) -> Response:
        form = web.form()
        image, image_name = await _query_image(form)
        return await run(web, SearchForm.read(form), image, image_name)

    return [
        page(SEARCH_PATH, show, services),
        action(SEARCH_PATH, search_with_image, services, max_bytes=post_limit),
    ]


def _status(failure: ToolFailure) -> int:
    return http_status(failure)


def _same_origin_previews(services: MemoryServices, view: SearchView) -> SearchView:
    """The view with each preview link as :func:`same_origin_link` makes it."""
    results: list[SearchHit] = []
    for hit in view.results:
        preview = hit.preview
        if preview is not None and preview.url is not None:
            preview = preview.model_copy(update={"url": same_origin_link(services, preview.url)})
        results.append(hit.model_copy(update={"preview": preview}))
    return view.model_copy(update={"results": results})
