"""Image candidates of an HTML page: pure functions, no network, no database.

Two steps, so the parser can be swapped and measured (``benchmarks/page_images.py``):

1. :func:`walk` parses the page with selectolax (Lexbor) and lists, in document order, every
   element that may name an image (:class:`Found`), with the page's title, language, canonical
   URL and ``<base href>`` (:class:`PageFacts`). At most :data:`MAX_ELEMENTS` elements are
   examined, so a page of a million ``<img>`` costs a bounded walk.
2. :func:`candidates` turns those into absolute, deduplicated, ordered candidates: URLs are
   resolved against ``<base href>`` and the page's final URL (after redirects); only ``http`` and
   ``https`` are kept (``data:``, ``javascript:``, ``blob:``... dropped); a ``srcset`` resolves to
   its largest candidate (``w`` descriptors first, else the highest density).

Ordering (most likely important first): images the page declares its own (``og:image``,
``twitter:image``, ``link rel=image_src``); then by declared area, an undeclared size counting as
:data:`UNDECLARED_AREA` (a typical content image); then by position on the page. ``minWidth``
filters on the declared width; an image whose width is not declared is kept (only a download
would tell), with ``width: null``.

Why Lexbor (measured with ``make bench``, ``benchmarks/page_images.py``: 300 generated pages,
13 MB, on a shared 2-core machine): parsing alone is about 2.5x faster than lxml; with the
depth guard below (which lxml does not need: libxml2 stops at depth 255 and drops the rest)
parse + walk measured 1.1-1.6x faster over several runs, and the whole extraction is about
even (0.75-1.2x from run to run: the shared resolution step dominates and the machine's
neighbours add noise). The deciding point beyond speed: Lexbor is an HTML5 parser that
builds the tree a browser builds, where libxml2's HTML parser nests an ``<img>`` inside the
``<source>`` before it (it does not know ``<source>`` is void).

Lexbor's one weakness, measured: its cost grows with depth x tags (4,000 nested ``<div>`` and
300,000 more tags: 3.3 s). :func:`deep_nesting_at` cuts a page where it nests more than
:data:`MAX_DEPTH` elements deep, before parsing; the worst 5 MB page within that bound parses
in under a second.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Literal
from urllib.parse import urljoin, urlsplit, urlunsplit

from selectolax.lexbor import LexborHTMLParser, LexborNode

SourceKind = Literal[
    "og_image", "twitter_image", "image_src", "img", "picture_source", "background"
]
PAGE_DECLARED: frozenset[str] = frozenset({"og_image", "twitter_image", "image_src"})

MAX_ELEMENTS = 5000  # elements examined per page (images, sources, metas, styled elements)
MAX_DEPTH = 512  # open elements; the page is cut where it would nest deeper (as browsers cap it)
MAX_CANDIDATES = 100  # the most a caller may ask for
MAX_URL_LENGTH = 4096  # the fetcher's own bound; longer URLs could never be fetched
MAX_TEXT = 2000  # alt text and captions (the save's altText bound)
MAX_TITLE = 300
UNDECLARED_AREA = 300 * 200  # the area an image without declared size is ranked as
_SELECTOR = (
    "img, picture source, meta, link, figure, [style*='url(' i], base[href], html[lang], title"
)
# ``url(...)`` in an inline style: no backtracking (every quantifier stops at a delimiter), so
# a hostile style costs one pass. Only the first MAX_STYLE characters of a style are read.
_STYLE_URL = re.compile(r"url\(\s*[\"']?([^\"')\s]{1,4096})")
MAX_STYLE = 4096
MAX_STYLE_URLS = 4  # background layers read per element
MAX_SRCSET = 16384  # characters of a srcset read (a real one is a few hundred)
_TOKEN = re.compile(r"<(?:(!--)|(/?)([a-z][a-z0-9-]*))")
# Elements that never hold others open: void elements and those a sibling closes implicitly.
# Not <option>/<optgroup>: inside a <select> Lexbor keeps them open (measured: <select> and
# 40,000 <option> took 5 s to parse, 5 MiB of them far longer), so they count as nesting and a
# select of more than MAX_DEPTH options cuts the page there.
_FLAT_NAMES = (
    "area base br col embed hr img image input link meta source track wbr param keygen frame "
    "basefont bgsound p li dt dd tr td th thead tbody tfoot colgroup caption "
    "rb rt rp rtc html head body"
)
_FLAT = frozenset(_FLAT_NAMES.split())
_RAW_TEXT_NAMES = "script style textarea title xmp noscript iframe noembed noframes plaintext"
_RAW_TEXT = frozenset(_RAW_TEXT_NAMES.split())
_SPACE = re.compile(r"\s+")
# Control and format characters a text keeps out (whitespace is collapsed separately).
_CONTROL = re.compile(
    r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]"
)
_URL_UNSAFE = re.compile(r"[\s\x00-\x1f\x7f]")
_DIMENSION = re.compile(r"^\s*(\d{1,6})(?:\.\d*)?\s*(?:px)?\s*$", re.IGNORECASE)
_DENSITY = re.compile(r"\d{1,3}(?:\.\d{1,6})?")


@dataclass(frozen=True)
class Found:
    """One element that names an image, as written on the page (nothing resolved yet)."""

    kind: SourceKind
    position: int  # index among the examined elements, in document order
    src: str | None = None
    srcset: str | None = None
    alt: str | None = None
    caption: str | None = None
    width: str | None = None
    height: str | None = None


def _as_written(
    kind: SourceKind,
    position: int,
    attrs: dict[str, str | None],
    alt: str | None,
    caption: str | None,
) -> Found:
    """An ``<img>`` or ``<source>`` as written: its src, srcset and declared size."""
    return Found(
        kind,
        position,
        src=attrs.get("src"),
        srcset=attrs.get("srcset"),
        alt=alt,
        caption=caption,
        width=attrs.get("width"),
        height=attrs.get("height"),
    )


@dataclass(frozen=True)
class PageFacts:
    """What :func:`walk` read from a page."""

    title: str | None = None
    language: str | None = None
    canonical: str | None = None
    base_href: str | None = None
    found: list[Found] = field(default_factory=list[Found])
    examined: int = 0
    bounded: bool = False  # True when MAX_ELEMENTS stopped the walk or MAX_DEPTH cut the page


@dataclass(frozen=True)
class Candidate:
    """One image of the page, resolved."""

    url: str
    kind: SourceKind
    position: int
    alt: str | None
    caption: str | None
    width: int | None
    height: int | None
    page_declared: bool


def clean(text: str | None, limit: int = MAX_TEXT) -> str | None:
    """Whitespace collapsed, control characters dropped, at most ``limit`` characters."""
    if text is None:
        return None
    # Whitespace collapses, so a prefix of a few times the limit is enough to fill it.
    text = _SPACE.sub(" ", _CONTROL.sub("", text[: limit * 4])).strip()
    return text[:limit] or None


def _meta_key(attrs: dict[str, str | None]) -> str:
    return (attrs.get("property") or attrs.get("name") or "").strip().lower()


def background_urls(style: str) -> list[str]:
    """The ``url(...)`` values of an inline style's ``background``/``background-image``."""
    style = style[:MAX_STYLE]
    if "background" not in style.lower():
        return []
    return [match.group(1) for match in _STYLE_URL.finditer(style)][:MAX_STYLE_URLS]


class _Captions:
    """The ``<figcaption>`` of an element's ``<figure>``, read once per figure.

    A figure of thousands of images and a megabyte of caption must not cost images x caption.
    """

    def __init__(self) -> None:
        self._by_figure: dict[int, str | None] = {}

    def of(self, node: LexborNode) -> str | None:
        figure = node.parent
        depth = 0
        while figure is not None and figure.tag != "figure" and depth < 8:
            figure = figure.parent
            depth += 1
        if figure is None or figure.tag != "figure":
            return None
        key = figure.mem_id
        if key not in self._by_figure:
            caption = figure.css_first("figcaption")
            text = caption.text(separator=" ") if caption is not None else None
            self._by_figure[key] = clean(text[: MAX_TEXT * 4] if text else None)
        return self._by_figure[key]


def _picture_alt(source: LexborNode) -> str | None:
    """A ``<picture>`` source's alt text is its sibling ``<img>``'s."""
    picture = source.parent
    if picture is None or picture.tag != "picture":
        return None
    img = picture.css_first("img")
    return clean(img.attributes.get("alt")) if img is not None else None


def deep_nesting_at(html: str, max_depth: int = MAX_DEPTH) -> int | None:
    """Where ``html`` first opens more than ``max_depth`` elements at once; ``None`` if never.

    Lexbor's tree builder checks element scopes by scanning the stack of open elements, so a
    page of nested ``<div>`` followed by many tags costs depth x tags: measured, 4,000 nested
    ``<div>`` and 300,000 more tags took 3.3 s, and 5 MiB can hold far worse. This linear scan
    (a regular expression; comments and raw text skipped) over-estimates the depth (it closes
    nothing implicitly but the elements in ``_FLAT``), so a cut page is cut no later than the
    parser would have gone deep.
    """
    lower = html.lower()
    depth = 0
    skip = 0
    for match in _TOKEN.finditer(lower):
        start = match.start()
        if start < skip:
            continue
        if match.group(1):  # a comment: nothing in it counts
            end = lower.find("-->", start + 4)
            if end < 0:
                return None
            skip = end + 3
            continue
        name = match.group(3)
        if name in _FLAT:
            continue
        if match.group(2):
            depth = max(0, depth - 1)
        elif name in _RAW_TEXT:
            end = lower.find("</" + name, match.end())
            if end < 0:
                return None
            skip = end
        else:
            depth += 1
            if depth > max_depth:
                return start
    return None


def walk(html: str, *, max_elements: int = MAX_ELEMENTS) -> PageFacts:
    """Every element of ``html`` that may name an image, in document order (Lexbor).

    A page nested deeper than :data:`MAX_DEPTH` is read up to where it gets that deep.
    """
    cut = deep_nesting_at(html)
    if cut is not None:
        html = html[:cut]
    tree = LexborHTMLParser(html)
    title: str | None = None
    language: str | None = None
    canonical: str | None = None
    base_href: str | None = None
    found: list[Found] = []
    examined = 0
    bounded = False
    last_og: int | None = None
    captions = _Captions()
    for node in tree.css(_SELECTOR):
        if examined >= max_elements:
            bounded = True
            break
        examined += 1
        tag = node.tag
        attrs = node.attributes
        position = examined - 1
        if tag == "img":
            alt = clean(attrs.get("alt"))
            found.append(_as_written("img", position, attrs, alt, captions.of(node)))
        elif tag == "source":
            alt = _picture_alt(node)
            found.append(_as_written("picture_source", position, attrs, alt, captions.of(node)))
        elif tag == "meta":
            key = _meta_key(attrs)
            content = attrs.get("content")
            if key in ("og:image", "og:image:url", "og:image:secure_url") and content:
                if key == "og:image" or last_og is None:
                    found.append(Found("og_image", position, src=content))
                    last_og = len(found) - 1
            elif key in ("og:image:width", "og:image:height") and last_og is not None:
                side = "width" if key.endswith("width") else "height"
                found[last_og] = replace(found[last_og], **{side: content})
            elif key in ("twitter:image", "twitter:image:src") and content:
                found.append(Found("twitter_image", position, src=content))
            elif key == "og:image:alt" and last_og is not None:
                found[last_og] = replace(found[last_og], alt=clean(content))
        elif tag == "link":
            rel = (attrs.get("rel") or "").lower().split()
            if "image_src" in rel:
                found.append(Found("image_src", position, src=attrs.get("href")))
            elif "canonical" in rel and canonical is None:
                canonical = attrs.get("href")
        elif tag == "base" and base_href is None:
            base_href = attrs.get("href")
        elif tag == "html" and language is None:
            language = clean(attrs.get("lang"), 35)
        elif tag == "title" and title is None:
            title = clean(node.text(), MAX_TITLE)
        style = attrs.get("style") if tag not in ("meta", "link", "base", "title") else None
        if style:
            found.extend(Found("background", position, src=url) for url in background_urls(style))
    bounded = bounded or cut is not None
    return PageFacts(title, language, canonical, base_href, found, examined, bounded)


def _dimension(value: str | None) -> int | None:
    if value is None:
        return None
    match = _DIMENSION.match(value)
    if match is None:
        return None
    number = int(match.group(1))
    return number if number > 0 else None


def largest_in_srcset(srcset: str) -> tuple[str, int | None] | None:
    """The largest candidate of a ``srcset``: its URL and its ``w`` width when it has one.

    ``w`` descriptors win over densities (``2x``); a candidate without a descriptor is ``1x``.
    URLs containing commas are read as the HTML standard does: a URL is a run without spaces,
    and a trailing comma ends it.
    """
    best: tuple[float, float, str, int | None] | None = None
    srcset = srcset[:MAX_SRCSET]
    position, length = 0, len(srcset)
    while position < length:
        while position < length and (srcset[position].isspace() or srcset[position] == ","):
            position += 1
        start = position
        while position < length and not srcset[position].isspace():
            position += 1
        url = srcset[start:position]
        descriptors = ""
        if url.endswith(","):
            url = url.rstrip(",")
        else:
            end = srcset.find(",", position)
            end = length if end < 0 else end
            descriptors = srcset[position:end].strip().lower()
            position = end + 1
        if not url:
            continue
        width: int | None = None
        density = 1.0
        for descriptor in descriptors.split():
            if descriptor.endswith("w"):
                # As declared widths: at most 6 digits (a longer one is no width at all).
                width = _dimension(descriptor[:-1]) or width
            elif descriptor.endswith("x") and _DENSITY.fullmatch(descriptor[:-1]):
                density = float(descriptor[:-1])
        rank = (1.0 if width is not None else 0.0, float(width) if width is not None else density)
        if best is None or rank > best[:2]:
            best = (*rank, url, width)
    return None if best is None else (best[2], best[3])


def absolute(raw: str | None, base: str) -> str | None:
    """``raw`` resolved against ``base``, if it is an http(s) URL we could fetch; else ``None``."""
    if not raw:
        return None
    raw = raw.strip()
    if not raw or len(raw) > MAX_URL_LENGTH:
        return None
    try:
        joined = urljoin(base, raw)
        parts = urlsplit(joined)
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    if _URL_UNSAFE.search(joined):
        return None
    url = urlunsplit(parts._replace(fragment=""))
    return url if len(url) <= MAX_URL_LENGTH else None


def base_url(facts: PageFacts, final_url: str) -> str:
    """What relative URLs resolve against: ``<base href>`` (if http(s)), else the final URL."""
    base = absolute(facts.base_href, final_url)
    return base or final_url


def _resolve(item: Found, base: str) -> Candidate | None:
    width, height = _dimension(item.width), _dimension(item.height)
    url = absolute(item.src, base)
    if item.srcset:
        largest = largest_in_srcset(item.srcset)
        resolved = absolute(largest[0], base) if largest else None
        if resolved is not None and largest is not None:
            url = resolved
            if largest[1] is not None:
                # The w descriptor is the chosen file's own width; keep the declared ratio.
                if width and height:
                    height = max(1, round(height * largest[1] / width))
                width = largest[1]
    if url is None:
        return None
    return Candidate(
        url=url,
        kind=item.kind,
        position=item.position,
        alt=item.alt,
        caption=item.caption,
        width=width,
        height=height,
        page_declared=item.kind in PAGE_DECLARED,
    )


def _importance(candidate: Candidate) -> tuple[int, int, int]:
    if candidate.width and candidate.height:
        area = candidate.width * candidate.height
    elif candidate.width:
        area = candidate.width * candidate.width * 2 // 3
    else:
        area = UNDECLARED_AREA
    return (0 if candidate.page_declared else 1, -area, candidate.position)


def candidates(
    facts: PageFacts, final_url: str, *, limit: int, min_width: int | None = None
) -> list[Candidate]:
    """The page's image candidates: absolute, deduplicated, filtered, ordered, at most ``limit``.

    Duplicates (the same absolute URL) merge into the most important one, which takes the alt
    text, caption and sizes the others declare when it has none of its own.
    """
    base = base_url(facts, final_url)
    merged: dict[str, Candidate] = {}
    for item in facts.found:
        candidate = _resolve(item, base)
        if candidate is None:
            continue
        first = merged.get(candidate.url)
        if first is None:
            merged[candidate.url] = candidate
            continue
        lead, other = sorted((first, candidate), key=_importance)
        merged[candidate.url] = replace(
            lead,
            alt=lead.alt or other.alt,
            caption=lead.caption or other.caption,
            width=lead.width or other.width,
            height=lead.height or other.height,
            page_declared=lead.page_declared or other.page_declared,
        )
    chosen = [
        candidate
        for candidate in merged.values()
        if min_width is None or candidate.width is None or candidate.width >= min_width
    ]
    chosen.sort(key=_importance)
    return chosen[:limit]
