"""``scrape_page_images``: fetch a page, list its image candidates, optionally save the top ones.

The page comes through the server's one :class:`~memory_tools.ingest.fetch.SafeFetcher` (the
same URL policy, redirect revalidation, address checks and time limit as a save by URL), cut at
:data:`PAGE_MAX_BYTES`; the extraction is :mod:`scraper_mcp.page_images` (pure). Nothing is
stored unless the caller passes ``save``: then the top ``save.max`` candidates go through the one
save plan (:class:`~memory_tools.ingest.save.AssetSaver`), each as a URL save with source kind
``scrape`` and the page as its ``sourceRef``; a candidate saved before (the same URL and bytes,
in the same vault) answers with that asset (``deduplicated``), as the save plan decides. Each
candidate's save succeeds or fails on its own (its error is reported on it); the vault, project
and folder are checked once, first, so a refused target fails the whole call before anything is
fetched.
"""

from __future__ import annotations

import codecs
import json
import re
from typing import Annotated, Any

import anyio
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from memory_db import MemoryDbError
from memory_tools import (
    Caller,
    FeatureDisabled,
    InvalidInputFailure,
    MemoryServices,
    ToolFailure,
    resolve_vault,
)
from memory_tools.mcp.for_scrapers import (
    MAX_SOURCE_REF_BYTES,
    AssetSaver,
    FetchedBody,
    NotHtml,
    SaveRequest,
    WireModel,
    check_placement,
    policy,
    translate,
)
from scraper_mcp import page_images
from scraper_mcp.page_images import Candidate, SourceKind

PAGE_MAX_BYTES = 5 * 1024 * 1024  # a longer page is cut here (and says so: ``truncated``)
MAX_SAVES = 10  # candidates one call may save
MAX_SOURCE_REF_TEXT = 2000  # characters of one sourceRef value (``inputs.source_ref``)
HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([a-zA-Z0-9._:-]{1,40})""", re.I)
_SNIFF = 1024


class PageSave(BaseModel):
    """Save the top candidates: where, with which tags, how many."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", strict=True
    )

    vault: Annotated[str, Field(min_length=1, max_length=400)] = "Library"
    project_id: Annotated[str | None, Field(max_length=64)] = None
    folder_id: Annotated[str | None, Field(max_length=64)] = None
    tags: Annotated[list[Annotated[str, Field(max_length=64)]], Field(max_length=32)] = []
    max_count: Annotated[
        int,
        Field(
            alias="max",
            ge=1,
            le=MAX_SAVES,
            description=f"How many of the top candidates to save (1-{MAX_SAVES}).",
        ),
    ] = 3


class ImageCandidate(WireModel):
    """One image found on the page."""

    url: str = Field(description="Absolute http(s) URL of the image (the largest srcset entry).")
    source_kind: SourceKind = Field(
        description="Where it was found: og_image, twitter_image, image_src, img, "
        "picture_source or background (an inline style)."
    )
    position: int = Field(description="Order of its element on the page (0 first).")
    page_declared: bool = Field(description="The page names it its image (og/twitter/image_src).")
    alt_text: str | None
    caption: str | None = Field(description="The text of its <figure>'s <figcaption>.")
    width: int | None = Field(description="Declared width in pixels; null when undeclared.")
    height: int | None = Field(description="Declared height in pixels; null when undeclared.")
    asset_id: str | None = Field(
        default=None, description="With save: the asset this candidate was saved as."
    )
    deduplicated: bool | None = Field(
        default=None,
        description="With save: true when assetId is the asset an earlier save of this image "
        "(the same URL and bytes) made in the vault, returned unchanged, or when the new asset "
        "shares bytes you already store; null when not saved.",
    )
    save_error: str | None = Field(
        default=None, description="With save: why this candidate was not saved ('<code>: ...')."
    )


class PageImages(WireModel):
    """A page's image candidates, most likely important first."""

    page_url: str = Field(description="The page's final URL, after redirects.")
    title: str | None
    canonical_url: str | None
    language: str | None
    truncated: bool = Field(description=f"The page was longer than {PAGE_MAX_BYTES} bytes.")
    elements_bounded: bool = Field(
        description=f"The page had more than {page_images.MAX_ELEMENTS} image-bearing elements, "
        f"or nested more than {page_images.MAX_DEPTH} elements deep; only what came before was "
        "examined."
    )
    candidates: list[ImageCandidate]
    saved: int = Field(description="How many candidates were saved (0 without save).")


def declared_media_type(declared: str | None) -> tuple[str | None, str | None]:
    """The media type and charset parameter of a ``Content-Type`` header."""
    if not declared:
        return None, None
    media, *params = declared.split(";")
    charset = None
    for param in params:
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset":
            charset = value.strip().strip("\"'") or None
    return media.strip().lower(), charset


# The encodings of the WHATWG Encoding Standard Python has, by their codec names. A page that
# declares UTF-16 without a BOM is almost always UTF-8, as browsers assume: not listed.
_WEB_CODECS = frozenset(
    [
        "utf-8",
        "ascii",
        "iso8859-1",
        "iso8859-2",
        "iso8859-3",
        "iso8859-4",
        "iso8859-5",
        "iso8859-6",
        "iso8859-7",
        "iso8859-8",
        "iso8859-10",
        "iso8859-13",
        "iso8859-14",
        "iso8859-15",
        "iso8859-16",
        "cp1250",
        "cp1251",
        "cp1252",
        "cp1253",
        "cp1254",
        "cp1255",
        "cp1256",
        "cp1257",
        "cp1258",
        "cp866",
        "cp874",
        "koi8-r",
        "koi8-u",
        "mac-roman",
        "mac-cyrillic",
        "gbk",
        "gb18030",
        "big5",
        "euc_jp",
        "iso2022_jp",
        "shift_jis",
        "euc_kr",
    ]
)


def decode_page(body: FetchedBody) -> str:
    """The page as text (``not_html`` if it is not an HTML page).

    The encoding: a byte-order mark, else the ``Content-Type`` charset, else a ``<meta charset>``
    in the first KiB, else UTF-8; undecodable bytes become U+FFFD.
    """
    media, charset = declared_media_type(body.declared_type)
    head = body.data[:_SNIFF]
    if media is not None and media not in HTML_TYPES:
        raise NotHtml(f"the page is {media[:80]}, not HTML")
    if media is None and b"<" not in head:
        raise NotHtml("the answer has no Content-Type and does not look like HTML")
    for bom, name in (
        (codecs.BOM_UTF8, "utf-8-sig"),
        (codecs.BOM_UTF16_LE, "utf-16"),
        (codecs.BOM_UTF16_BE, "utf-16"),
    ):
        if body.data.startswith(bom):
            return body.data.decode(name, errors="replace")
    if charset is None:
        match = _META_CHARSET.search(head)
        charset = match.group(1).decode("ascii") if match else None
    try:
        codec = codecs.lookup(charset or "utf-8").name
    except LookupError:
        codec = "utf-8"
    if codec not in _WEB_CODECS:
        # Only the web's text encodings: Python's codec registry also holds transforms (zlib,
        # base64, rot13), escapes that rewrite the text (unicode_escape) and idna.
        codec = "utf-8"
    return body.data.decode(codec, errors="replace")


def _view(candidate: Candidate) -> ImageCandidate:
    return ImageCandidate(
        url=candidate.url,
        source_kind=candidate.kind,
        position=candidate.position,
        page_declared=candidate.page_declared,
        alt_text=candidate.alt,
        caption=candidate.caption,
        width=candidate.width,
        height=candidate.height,
    )


async def scrape_page_images(
    caller: Caller,
    services: MemoryServices,
    *,
    url: str,
    limit: int,
    min_width: int | None,
    save: PageSave | None,
) -> PageImages:
    """Fetch ``url`` and list its image candidates; with ``save``, save the top ones."""
    policy.require(services.settings)
    fetcher = services.fetcher
    if fetcher is None:
        raise FeatureDisabled("fetching pages is not configured on this server")
    if save is not None:
        await _check_target(caller, services, save)
    async with services.call_admission.stepped_aside():
        body = await fetcher.fetch_page(url, max_bytes=PAGE_MAX_BYTES)
    text = decode_page(body)
    facts = await anyio.to_thread.run_sync(page_images.walk, text)
    found = page_images.candidates(facts, body.final_url, limit=limit, min_width=min_width)
    views = [_view(candidate) for candidate in found]
    saved = 0
    if save is not None:
        saver = AssetSaver(services)
        for index, candidate in enumerate(found[: save.max_count]):
            views[index] = await _save_one(saver, caller, save, facts, body.final_url, candidate)
            saved += views[index].asset_id is not None
    return PageImages(
        page_url=body.final_url,
        title=facts.title,
        canonical_url=page_images.absolute(facts.canonical, body.final_url),
        language=facts.language,
        truncated=body.truncated,
        elements_bounded=facts.bounded,
        candidates=views,
        saved=saved,
    )


async def _check_target(caller: Caller, services: MemoryServices, save: PageSave) -> None:
    """The save's vault is writable and its project/folder exist, before anything is fetched."""
    if save.folder_id is not None and save.project_id is None:
        raise InvalidInputFailure("save.folderId: give the folder's projectId as well")
    if services.embedder is None:
        raise FeatureDisabled("no embedder is configured on this server")
    async with services.database.unit_of_work() as uow:
        vault = await resolve_vault(uow, caller, save.vault, "write")
        try:
            await check_placement(uow, vault.record.scope, save.project_id, save.folder_id)
        except MemoryDbError as exc:
            raise translate(exc) from None


def page_source_ref(page_url: str, title: str | None, candidate: Candidate) -> dict[str, Any]:
    """A candidate's page context as a save's ``sourceRef``, within its byte bound.

    In order of use: the page URL (left out if longer than a value may be), its title, the
    alt text, the caption; a text that does not fit is shortened to what does.
    """
    ref: dict[str, Any] = {}
    fields = (
        ("pageUrl", page_url),
        ("pageTitle", title),
        ("altText", candidate.alt),
        ("caption", candidate.caption),
    )
    for key, value in fields:
        if not value or len(value) > MAX_SOURCE_REF_TEXT:
            continue  # a longer URL would be refused, and a text is never longer
        room = MAX_SOURCE_REF_BYTES - len(json.dumps({**ref, key: ""}).encode())
        if len(json.dumps(value).encode()) - 2 <= room:
            ref[key] = value
        elif key != "pageUrl" and room > 0:
            # Worst case 6 bytes of JSON per character (\uXXXX); cut, then trim to fit.
            cut = value[: room // 6 + 1]
            while cut and len(json.dumps(cut).encode()) - 2 > room:
                cut = cut[: len(cut) * 9 // 10]
            if cut.strip():
                ref[key] = cut.strip()
    return ref


async def _save_one(
    saver: AssetSaver,
    caller: Caller,
    save: PageSave,
    facts: page_images.PageFacts,
    page_url: str,
    candidate: Candidate,
) -> ImageCandidate:
    """Save one candidate; a refusal is reported on it, never raised."""
    source_ref = page_source_ref(page_url, facts.title, candidate)
    request = SaveRequest(
        vault=save.vault,
        source_url=candidate.url,
        alt_text=candidate.alt,
        tags=list(save.tags),
        source_ref=source_ref,
        project_id=save.project_id,
        folder_id=save.folder_id,
        url_source_kind="scrape",
    )
    view = _view(candidate)
    try:
        result = await saver.save(caller, request)
    except ToolFailure as failure:
        return view.model_copy(update={"save_error": str(failure)})
    return view.model_copy(
        update={"asset_id": result.asset_id, "deduplicated": result.deduplicated}
    )
