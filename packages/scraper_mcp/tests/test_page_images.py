"""The page image extraction, without a network: sources, resolution, ordering, bounds."""

from __future__ import annotations

import json

import pytest

from memory_tools.errors import NotHtml
from memory_tools.ingest import inputs
from memory_tools.ingest.fetch import FetchedBody
from memory_tools.ingest.inputs import MAX_SOURCE_REF_BYTES
from scraper_mcp.page_images import (
    MAX_DEPTH,
    MAX_ELEMENTS,
    Candidate,
    absolute,
    background_urls,
    candidates,
    deep_nesting_at,
    largest_in_srcset,
    walk,
)
from scraper_mcp.pages import decode_page, page_source_ref

PAGE = "https://example.com/articles/cats?id=1"

FULL = """<!doctype html><html lang="en-GB"><head>
<title>  Cats   of the week </title>
<meta property="og:image" content="/share/cover.jpg">
<meta property="og:image:width" content="1200"><meta property="og:image:height" content="630">
<meta name="twitter:image" content="https://cdn.example.com/tw.png">
<link rel="image_src" href="https://cdn.example.com/src.png">
<link rel="canonical" href="/articles/cats">
</head><body>
<div class="hero" style="color: red; background-image: url('/img/hero-bg.jpg')">Hero</div>
<figure>
  <picture>
    <source srcset="/img/cat-480.webp 480w, /img/cat-1600.webp 1600w, /img/cat-800.webp 800w">
    <img src="/img/cat.jpg" alt="A ginger cat" width="800" height="600">
  </picture>
  <figcaption>Marmalade, <b>asleep</b> on the sofa</figcaption>
</figure>
<img src="/img/icon.png" width="16" height="16" alt="icon">
<img src="data:image/gif;base64,R0lGODlhAQABAAAAACw=" alt="pixel">
<img src="javascript:alert(1)"><img src="blob:https://example.com/123">
<img srcset="/img/dog.jpg, /img/dog@2x.jpg 2x, /img/dog@3x.jpg 3x" alt="A dog">
<img src="/img/cat.jpg" alt="">
</body></html>"""


def _urls(found: list[Candidate]) -> list[str]:
    return [c.url for c in found]


def test_every_source_is_found_with_its_context() -> None:
    facts = walk(FULL)
    assert facts.title == "Cats of the week"
    assert facts.language == "en-GB"
    assert facts.canonical == "/articles/cats"
    found = {c.url: c for c in candidates(facts, PAGE, limit=100)}
    og = found["https://example.com/share/cover.jpg"]
    assert (og.kind, og.width, og.height, og.page_declared) == ("og_image", 1200, 630, True)
    assert found["https://cdn.example.com/tw.png"].kind == "twitter_image"
    assert found["https://cdn.example.com/src.png"].kind == "image_src"
    assert found["https://example.com/img/hero-bg.jpg"].kind == "background"
    source = found["https://example.com/img/cat-1600.webp"]
    assert source.kind == "picture_source"
    assert source.width == 1600
    assert source.alt == "A ginger cat"
    assert source.caption == "Marmalade, asleep on the sofa"
    img = found["https://example.com/img/cat.jpg"]
    assert (img.alt, img.caption, img.width, img.height) == (
        "A ginger cat",
        "Marmalade, asleep on the sofa",
        800,
        600,
    )
    assert "https://example.com/img/dog@3x.jpg" in found  # the highest density
    assert not any(url.startswith(("data:", "javascript:", "blob:")) for url in found)


def test_order_page_declared_first_then_size_then_position() -> None:
    ordered = candidates(walk(FULL), PAGE, limit=100)
    kinds = [c.kind for c in ordered]
    assert kinds[:3] == ["og_image", "twitter_image", "image_src"]
    rest = _urls(ordered[3:])
    # 1600 wide (no height: 2:3 assumed) > 800x600 > undeclared (as 300x200) > a 16 px icon.
    assert rest[0] == "https://example.com/img/cat-1600.webp"
    assert rest[1] == "https://example.com/img/cat.jpg"
    assert rest[-1] == "https://example.com/img/icon.png"
    # Undeclared sizes keep page order between themselves.
    assert rest.index("https://example.com/img/hero-bg.jpg") < rest.index(
        "https://example.com/img/dog@3x.jpg"
    )


def test_duplicates_merge_into_one_candidate_keeping_context() -> None:
    ordered = candidates(walk(FULL), PAGE, limit=100)
    cats = [c for c in ordered if c.url == "https://example.com/img/cat.jpg"]
    assert len(cats) == 1
    assert cats[0].alt == "A ginger cat"  # the second <img> had an empty alt
    assert len(_urls(ordered)) == len(set(_urls(ordered)))
    page = """<meta property="og:image" content="https://x.example/a.jpg">
    <img src="https://x.example/a.jpg" alt="Alt from img" width="640" height="480">"""
    (merged,) = candidates(walk(page), PAGE, limit=10)
    assert (merged.kind, merged.page_declared, merged.alt, merged.width) == (
        "og_image",
        True,
        "Alt from img",
        640,
    )


def test_min_width_filters_on_declared_width_and_keeps_undeclared() -> None:
    kept = candidates(walk(FULL), PAGE, limit=100, min_width=700)
    widths = {c.url: c.width for c in kept}
    assert "https://example.com/img/icon.png" not in widths
    assert widths["https://example.com/img/cat.jpg"] == 800
    assert widths["https://example.com/img/hero-bg.jpg"] is None  # undeclared: kept


def test_limit_bounds_the_answer() -> None:
    assert len(candidates(walk(FULL), PAGE, limit=2)) == 2


def test_base_href_and_final_url_resolve_relative_urls() -> None:
    page = '<base href="https://static.example.net/v2/"><img src="pic.png"><img src="/abs.png">'
    urls = _urls(candidates(walk(page), "https://example.com/a/b", limit=10))
    assert urls == ["https://static.example.net/v2/pic.png", "https://static.example.net/abs.png"]
    # A base that is not http(s) is ignored: the page's own URL is the base.
    page = '<base href="javascript:void(0)/"><img src="pic.png">'
    assert _urls(candidates(walk(page), "https://example.com/a/b", limit=10)) == [
        "https://example.com/a/pic.png"
    ]


def test_srcset_largest_candidate() -> None:
    assert largest_in_srcset("a.jpg 320w, b.jpg 1280w, c.jpg 640w") == ("b.jpg", 1280)
    assert largest_in_srcset("a.jpg, b.jpg 2x, c.jpg 1.5x") == ("b.jpg", None)
    assert largest_in_srcset("a.jpg 2x, b.jpg 100w") == ("b.jpg", 100)
    # Widths as declared widths are read: at most 6 digits; a huge one is no width at all.
    assert largest_in_srcset("a.jpg 320w, b.jpg 1" + "0" * 400 + "w") == ("a.jpg", 320)
    assert largest_in_srcset("a.jpg 320w, b.jpg 99999999999w") == ("a.jpg", 320)
    assert largest_in_srcset("a.jpg 1x, b.jpg 1e999x") == ("a.jpg", None)
    # Commas inside a URL (a CDN's resize parameters) do not split it.
    assert largest_in_srcset("https://cdn.x/i/w_200,h_100/a.jpg 200w, /b.jpg 100w") == (
        "https://cdn.x/i/w_200,h_100/a.jpg",
        200,
    )
    assert largest_in_srcset("  ,  ") is None
    assert largest_in_srcset("a.jpg bogusw, b.jpg 2x") == ("b.jpg", None)


def test_only_fetchable_urls_survive() -> None:
    base = "https://example.com/"
    assert absolute("data:image/png;base64,AAAA", base) is None
    assert absolute("javascript:alert(1)", base) is None
    assert absolute("file:///etc/passwd", base) is None
    assert absolute("ftp://example.com/a.png", base) is None
    assert absolute("https://a b.example/x.png", base) is None
    assert absolute("/x.png#frag", base) == "https://example.com/x.png"
    assert absolute("https://example.com/" + "a" * 5000, base) is None
    assert absolute("http://[::1", base) is None  # unparseable


def test_broken_html_is_read_as_a_browser_would() -> None:
    page = (
        "<html><body><div><p><img src=a.png alt=unquoted width=300 height=200 <img src='b.png'"
        "<table><tr><td><img src=\"c.png\" alt='in table'</td></div></span></body>"
        "<img src=d.png>\x00\x01<img src=e.png alt='ctl\x07chars'>"
    )
    urls = _urls(candidates(walk(page), "https://example.com/", limit=10))
    assert "https://example.com/a.png" in urls
    assert "https://example.com/e.png" in urls
    assert all(c.alt is None or "\x07" not in c.alt for c in candidates(walk(page), PAGE, limit=10))


def test_the_walk_is_bounded() -> None:
    page = "<body>" + "".join(f'<img src="/i/{n}.png">' for n in range(MAX_ELEMENTS + 500))
    facts = walk(page)
    assert facts.bounded
    assert facts.examined == MAX_ELEMENTS
    assert len(facts.found) == MAX_ELEMENTS
    assert not walk(FULL).bounded


def _body(data: bytes, content_type: str | None) -> FetchedBody:
    return FetchedBody(data=data, final_url=PAGE, declared_type=content_type, redirects=0)


def test_charsets() -> None:
    latin = "<title>Caf\xe9 cr\xe8me</title>".encode("latin-1")
    assert "Café crème" in decode_page(_body(latin, "text/html; charset=ISO-8859-1"))
    meta = b'<meta charset="windows-1252"><title>Caf\xe9</title>'
    assert "Café" in decode_page(_body(meta, "text/html"))
    bom = "\ufeff<title>Ünïcode</title>".encode("utf-16-le")
    assert "Ünïcode" in decode_page(_body(bom, "text/html"))
    # An unknown charset falls back to UTF-8; undecodable bytes become U+FFFD, not an error.
    assert "\ufffd" in decode_page(_body(b"<p>\xff\xfe\xfa</p>", "text/html; charset=bogus-1"))
    assert "Café" in decode_page(_body("<p>Café</p>".encode(), None))  # sniffed as HTML


@pytest.mark.parametrize(
    "label", ["zlib", "base64", "hex", "rot13", "bz2", "uu", "quopri", "undefined", "idna"]
)
def test_a_codec_that_is_not_a_web_encoding_reads_as_utf8(label: str) -> None:
    """Python's codec registry holds transforms and escapes; a page only gets web encodings."""
    page = "<title>Café \\u0041</title>".encode()
    for declared in (f"text/html; charset={label}", "text/html"):
        data = page if "charset" in declared else f'<meta charset="{label}">'.encode() + page
        assert "Café \\u0041" in decode_page(_body(data, declared))
    escaped = decode_page(_body(page, "text/html; charset=unicode_escape"))
    assert "\\u0041" in escaped  # not read as an escape


@pytest.mark.parametrize(
    ("data", "content_type"),
    [
        (b"\x89PNG\r\n\x1a\n....", "image/png"),
        (b'{"a": 1}', "application/json"),
        (b"%PDF-1.7", "application/pdf"),
        (b"\x89PNG\r\n\x1a\n....", None),
    ],
)
def test_non_html_answers_are_refused(data: bytes, content_type: str | None) -> None:
    with pytest.raises(NotHtml) as refused:
        decode_page(_body(data, content_type))
    assert refused.value.code == "not_html"


def test_a_select_bomb_is_cut_before_it_is_parsed() -> None:
    """<select> and tens of thousands of <option>: Lexbor keeps each open (seconds of CPU)."""
    for filler in ("<option>", "<option><optgroup>"):
        page = '<img src="/before.png"><select>' + filler * 60_000 + '<img src="/after.png">'
        assert deep_nesting_at(page) is not None
        facts = walk(page)
        assert facts.bounded
        assert [f.src for f in facts.found] == ["/before.png"]


def test_deep_nesting_is_cut_where_it_gets_too_deep() -> None:
    # Lexbor's cost grows with depth x tags: a page nests at most MAX_DEPTH elements deep.
    page = '<body><img src="/before.png">' + "<div>" * 20_000 + '<img src="/after.png">'
    facts = walk(page)
    assert facts.bounded
    assert [f.src for f in facts.found] == ["/before.png"]
    assert deep_nesting_at(page) == page.index("<div>") + MAX_DEPTH * len("<div>")
    # Closed elements, flat ones (void, implicitly closed), comments and raw text never count.
    deep_but_fine = (
        "<div></div>" * 5_000
        + "<p>unclosed" * 5_000
        + "<li>item" * 5_000
        + "<br><img src=x.png><hr>" * 1_000
        + "<!--"
        + "<div>" * 5_000
        + "-->"
        + "<script>"
        + "var s = '<div>';" * 5_000
        + "</script>"
        + "<div>" * MAX_DEPTH
        + '<img src="/deepest.png">'
    )
    assert deep_nesting_at(deep_but_fine) is None
    facts = walk(deep_but_fine)
    assert not facts.bounded
    assert "/deepest.png" in [f.src for f in facts.found]
    # An unterminated comment or script hides the rest, which the parser would hide too.
    assert deep_nesting_at("<!--" + "<div>" * 5_000) is None
    assert deep_nesting_at("<script>" + "<div>" * 5_000) is None


def test_hostile_shapes_cost_one_pass() -> None:
    # A figure of many images and a huge caption: the caption is read once, bounded.
    page = (
        "<figure><figcaption>"
        + "word " * 200_000
        + "</figcaption>"
        + '<img src="a.png">' * 2_000
        + "</figure>"
    )
    facts = walk(page)
    assert len(facts.found) == 2_000
    assert all(f.caption is not None and len(f.caption) <= 2000 for f in facts.found)
    # A style of unterminated url( and quotes: bounded, and at most four layers per element.
    assert len(background_urls("background: " + "url('x" * 100_000)) == 4
    assert background_urls("background: url(a.png), url('b.png'), url(\"c.png\")") == [
        "a.png",
        "b.png",
        "c.png",
    ]
    assert len(background_urls("background:" + "url(a.png)," * 50)) == 4
    assert background_urls("mask-image: url(a.png)") == []
    # A srcset padded with megabytes of spaces is read only so far.
    assert largest_in_srcset(" " * 3_000_000 + "a.png 2x") is None
    # A huge alt text is cut to the save's bound.
    (img,) = walk('<img alt="' + "a " * 2_000_000 + '" src="a.png">').found
    assert img.alt is not None and len(img.alt) == 2000


def test_the_page_context_fits_a_saves_source_ref() -> None:
    long_url = "https://example.com/" + "a" * 1900
    candidate = Candidate(
        url="https://example.com/a.png",
        kind="img",
        position=0,
        alt="é" * 2000,
        caption="\u2028caption " * 250,
        width=None,
        height=None,
        page_declared=False,
    )
    ref = page_source_ref(long_url, "Title", candidate)
    assert ref["pageUrl"] == long_url and ref["pageTitle"] == "Title"
    assert ref["altText"].startswith("éé")
    assert len(json.dumps(ref).encode()) <= MAX_SOURCE_REF_BYTES
    assert inputs.source_ref(ref)  # the save accepts it
    # The bound counts bytes as the save does (JSON with escapes: an é takes six).
    assert set(page_source_ref("https://example.com/p", None, candidate)) == {
        "pageUrl",
        "altText",
    }
    fits = Candidate(
        url="https://example.com/a.png",
        kind="img",
        position=0,
        alt="a" * 1000,
        caption="c" * 1000,
        width=None,
        height=None,
        page_declared=False,
    )
    assert page_source_ref("https://example.com/p", "T", fits) == {
        "pageUrl": "https://example.com/p",
        "pageTitle": "T",
        "altText": "a" * 1000,
        "caption": "c" * 1000,
    }
    # A page URL longer than a sourceRef value may be is left out rather than cut.
    assert "pageUrl" not in page_source_ref("https://e.com/" + "a" * 2100, "T", candidate)
