"""Every filter reaches every caller surface: the tools, the search page and the library.

The filters are declared once (``FilterParameters``, with ``AssetFilter`` for their SQL); each
test here enumerates them, so a filter one surface lacks fails here, not in a user's hands.
The tools' side is ``test_tool_registry.test_list_and_search_declare_every_filter_alike``.
"""

from __future__ import annotations

import re
from dataclasses import fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from starlette.datastructures import QueryParams

from memory_db.repositories import AssetFilter
from memory_tools.errors import InvalidInputFailure
from memory_tools.web import search_page
from memory_tools.web.filter_query import read_filters
from memory_tools.web.library import LibraryQuery
from memory_tools.web.search_page import DAY_CONTROLS, SearchForm
from memory_tools.workflows.assets import FilterFields
from memory_tools.workflows.filters import FILTER_NAMES, PLACEMENT, FilterParameters

# One value a caller may send for each parameter, as a tool receives it.
SAMPLES: dict[str, Any] = {
    "vault": "Library",
    "projectId": "apr_sample",
    "folderId": "afl_sample",
    "includeSubfolders": True,
    "tags": ["beach"],
    "untagged": True,
    "sourceKinds": ["scrape"],
    "sourceHost": "example.com",
    "mimeTypes": ["image/png"],
    "createdAfter": "2026-11-30T00:00:00Z",
    "createdBefore": "2026-12-01T00:00:00Z",
    "savedBy": "akey_sample",
    "takenAfter": "2023-03-01T00:00:00Z",
    "takenBefore": "2023-04-01T00:00:00Z",
}
# The search page's day controls for the two instants (a day in UTC; the end day inclusive).
DAYS = {
    "createdFrom": "2026-11-30",
    "createdUntil": "2026-11-30",
    "takenFrom": "2023-03-01",
    "takenUntil": "2023-03-31",
}
TEMPLATES = Path(search_page.__file__).with_name("templates")
ALIASES = {name: info.alias or name for name, info in FilterParameters.model_fields.items()}


def _as_sent(alias: str) -> str:
    """The sample of ``alias`` as a page's query string carries it."""
    value = SAMPLES[alias]
    return "on" if value is True else value[0] if isinstance(value, list) else value


def _placed(request: FilterFields) -> dict[str, Any]:
    """Where a request looks and what it keeps, as ``FilterParameters.request_fields`` says."""
    return {
        "vault": request.vault,
        "project_id": request.project_id,
        "folder_id": request.folder_id,
        "include_subfolders": request.include_subfolders,
        "filters": request.filters,
    }


def test_every_exact_filter_a_caller_sets_is_a_parameter() -> None:
    settable = [f.name for f in fields(AssetFilter) if f.metadata["condition"].set_by_caller]
    assert list(FILTER_NAMES) == settable
    assert set(FilterParameters.model_fields) == {*PLACEMENT, *FILTER_NAMES}
    assert set(SAMPLES) == set(ALIASES.values()), "give each parameter a sample value"


@pytest.mark.parametrize("name", list(FilterParameters.model_fields))
def test_the_search_page_reads_every_parameter(name: str) -> None:
    alias = ALIASES[name]
    day = DAY_CONTROLS.get(alias)
    sent = {day: DAYS[day]} if day else {alias: _as_sent(alias)}
    form = SearchForm.read(QueryParams({"query": "harbour", **sent}))
    expected = FilterParameters.checked({alias: SAMPLES[alias]}).request_fields()
    assert _placed(form.request(None, {})) == expected
    assert form.filtered()
    assert expected != FilterParameters().request_fields(), "the sample must filter"


def test_the_search_page_has_a_control_for_every_parameter() -> None:
    template = (TEMPLATES / "search.html").read_text()
    named = set(re.findall(r'name="([A-Za-z]+)"', template))
    wanted = {DAY_CONTROLS.get(alias, alias) for alias in ALIASES.values()}
    assert wanted <= named, f"no control for {sorted(wanted - named)}"


@pytest.mark.parametrize("name", FILTER_NAMES)
def test_the_library_reads_and_links_every_exact_filter(name: str) -> None:
    alias = ALIASES[name]
    query = LibraryQuery.parse(QueryParams({alias: _as_sent(alias)}))
    expected = FilterParameters.checked({alias: SAMPLES[alias]}).request_fields()
    assert _placed(query.request()) == expected
    assert query.filtered and query.active == 1
    # The link the page writes for this view asks for the same filter.
    linked = LibraryQuery.parse(QueryParams(query.url().split("?", 1)[1]))
    assert linked == query


def test_the_library_still_reads_its_former_filter_names() -> None:
    query = LibraryQuery.parse(QueryParams("kind=upload&mime=image/png&tags=a,+b"))
    assert query.filters == read_filters(
        QueryParams("sourceKinds=upload&mimeTypes=image/png&tags=a&tags=b"), FILTER_NAMES
    )
    assert query.url() == "/library?" + "tags=a&tags=b&sourceKinds=upload&mimeTypes=image%2Fpng"


def test_the_pages_refuse_what_the_tools_bounds_refuse() -> None:
    too_many = "&".join(f"tags=t{n}" for n in range(33))
    for refused, message in (
        (too_many, "tags: at most 32 values"),
        ("sourceHost=" + "h" * 254, "sourceHost: at most 253 characters"),
        ("createdAfter=yesterday", "createdAfter: not an ISO 8601 instant"),
    ):
        with pytest.raises(InvalidInputFailure, match=message):
            LibraryQuery.parse(QueryParams(refused)).request()
        with pytest.raises(InvalidInputFailure, match=message):
            SearchForm.read(QueryParams(f"query=x&{refused}")).request(None, {})


def test_a_day_on_the_search_page_is_its_whole_utc_day() -> None:
    form = SearchForm.read(QueryParams("query=x&createdFrom=2026-11-30&createdUntil=2026-11-30"))
    filters = form.request(None, {}).filters
    assert filters.created_after == datetime(2026, 11, 30, tzinfo=UTC)
    assert filters.created_before == datetime(2026, 12, 1, tzinfo=UTC)


def test_the_librarys_taken_days_are_whole_utc_days_and_its_links_carry_the_filters() -> None:
    query = LibraryQuery.parse(QueryParams("takenFrom=2023-03-01&takenUntil=2023-03-31"))
    filters = query.request().filters
    assert filters.taken_after == datetime(2023, 3, 1, tzinfo=UTC)
    assert filters.taken_before == datetime(2023, 4, 1, tzinfo=UTC)
    # The controls show the days again; the link names the tools' filters, not the controls.
    assert (query.taken_day("takenAfter"), query.taken_day("takenBefore")) == (
        "2023-03-01",
        "2023-03-31",
    )
    assert query.url() == (
        "/library?takenAfter=2023-03-01T00%3A00%3A00Z&takenBefore=2023-04-01T00%3A00%3A00Z"
    )
    # An instant that is not a day is kept as sent (a hidden field), with no day shown.
    exact = LibraryQuery.parse(QueryParams("takenAfter=2023-03-01T12:30:00%2B01:00"))
    assert exact.taken_day("takenAfter") == ""
    assert exact.kept_filters(()) == [("takenAfter", "2023-03-01T12:30:00+01:00")]
    with pytest.raises(InvalidInputFailure, match="takenAfter: not an ISO 8601 instant"):
        LibraryQuery.parse(QueryParams("takenFrom=last+March")).request()
