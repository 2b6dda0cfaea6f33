"""Page image extraction: selectolax (Lexbor, the runtime parser) against lxml, same run.

The corpus is generated (seeded, so every run reads the same pages): pages of 20 to 400 images
in every form ``scrape_page_images`` reads (``<img>`` with ``srcset``, ``<picture><source>``,
``og:image``/``twitter:image``/``image_src``, ``<figure>`` captions, inline background images),
with text between them, and every fifth page broken (unclosed tags, stray quotes, truncated).
Each parser runs the same walk (the same elements, in document order) and the same shared
candidate step (:func:`scraper_mcp.page_images.candidates`); both must find the same candidate
URLs on every page, or the comparison would be meaningless and the run fails.

Reports pages/second for each (best of ``--rounds``) and the ratio; the baseline is lxml,
measured in the same run. No absolute target: the numbers depend on the machine.

Usage: python benchmarks/page_images.py [--pages 300] [--rounds 5]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable

import lxml.html

from scraper_mcp import page_images
from scraper_mcp.page_images import Found, PageFacts, candidates, clean

PAGE_URL = "https://bench.example.com/section/article.html"
_XPATH = (
    "//img | //picture/source | //meta | //link | //figure | //*[contains(@style, 'url(')]"
    " | //base[@href] | //html[@lang] | //title"
)


def generate(count: int, seed: int = 16) -> list[str]:
    """``count`` pages, every fifth one broken."""
    rng = random.Random(seed)
    pages: list[str] = []
    for number in range(count):
        parts = [
            f'<!doctype html><html lang="en"><head><title>Page {number}</title>',
            f'<meta property="og:image" content="/og/{number}.jpg">',
            '<meta property="og:image:width" content="1200">',
            f'<meta name="twitter:image" content="https://cdn.example.net/tw/{number}.png">',
            f'<link rel="canonical" href="/a/{number}"><link rel="stylesheet" href="/s.css">',
            "</head><body><header><nav><ul>",
            *(f'<li><a href="/n/{n}">Link {n}</a></li>' for n in range(30)),
            "</ul></nav></header><main>",
        ]
        for index in range(rng.randint(20, 400)):
            kind = rng.randrange(6)
            if kind < 2:
                parts.append(
                    f'<img src="/i/{number}/{index}.jpg" '
                    f'srcset="/i/{number}/{index}-480.jpg 480w, /i/{number}/{index}-960.jpg 960w"'
                    f' alt="Picture {index} of page {number}" width="480" height="320">'
                )
            elif kind == 2:
                parts.append(
                    f'<figure><picture><source srcset="/p/{index}.webp 1x, /p/{index}@2x.webp 2x">'
                    f'<img src="/p/{index}.jpg" alt="Figure {index}"></picture>'
                    f"<figcaption>Caption of figure {index}, with <em>emphasis</em></figcaption>"
                    "</figure>"
                )
            elif kind == 3:
                parts.append(
                    f'<div class="card" style="background-image: url(/bg/{index}.png)">Card</div>'
                )
            else:
                words = " ".join(rng.choice(("lorem", "ipsum", "dolor", "sit")) for _ in range(60))
                parts.append(f"<p>{words} <a href='/x/{index}'>more</a></p>")
        parts.append("</main><footer>Footer</footer></body></html>")
        page = "".join(parts)
        if number % 5 == 4:
            page = page.replace("</p>", "", 7).replace('alt="', "alt=\"'", 3)[: len(page) * 4 // 5]
        pages.append(page)
    return pages


def walk_lxml(html: str, *, max_elements: int = page_images.MAX_ELEMENTS) -> PageFacts:
    """The same walk as :func:`scraper_mcp.page_images.walk`, over lxml (for comparison)."""
    root = lxml.html.document_fromstring(html)
    title = language = canonical = base_href = None
    found: list[Found] = []
    examined = 0
    bounded = False
    last_og: int | None = None
    for node in root.xpath(_XPATH):
        if examined >= max_elements:
            bounded = True
            break
        examined += 1
        tag, attrs, position = node.tag, node.attrib, examined - 1
        if tag == "img":
            found.append(
                Found(
                    "img",
                    position,
                    src=attrs.get("src"),
                    srcset=attrs.get("srcset"),
                    alt=clean(attrs.get("alt")),
                    caption=_caption(node),
                    width=attrs.get("width"),
                    height=attrs.get("height"),
                )
            )
        elif tag == "source":
            img = node.getparent().find("img")
            found.append(
                Found(
                    "picture_source",
                    position,
                    srcset=attrs.get("srcset"),
                    src=attrs.get("src"),
                    alt=clean(img.get("alt")) if img is not None else None,
                    caption=_caption(node),
                )
            )
        elif tag == "meta":
            key = (attrs.get("property") or attrs.get("name") or "").strip().lower()
            content = attrs.get("content")
            if key == "og:image" and content:
                found.append(Found("og_image", position, src=content))
                last_og = len(found) - 1
            elif key == "og:image:width" and last_og is not None:
                og = found[last_og]
                found[last_og] = Found(og.kind, og.position, src=og.src, width=content)
            elif key == "twitter:image" and content:
                found.append(Found("twitter_image", position, src=content))
        elif tag == "link":
            rel = (attrs.get("rel") or "").lower().split()
            if "image_src" in rel:
                found.append(Found("image_src", position, src=attrs.get("href")))
            elif "canonical" in rel and canonical is None:
                canonical = attrs.get("href")
        elif tag == "base" and base_href is None:
            base_href = attrs.get("href")
        elif tag == "html" and language is None:
            language = attrs.get("lang")
        elif tag == "title" and title is None:
            title = clean(node.text_content())
        style = attrs.get("style")
        if style:
            found.extend(
                Found("background", position, src=url) for url in page_images.background_urls(style)
            )
    return PageFacts(title, language, canonical, base_href, found, examined, bounded)


def _caption(node: lxml.html.HtmlElement) -> str | None:
    figure = node.getparent()
    depth = 0
    while figure is not None and figure.tag != "figure" and depth < 8:
        figure = figure.getparent()
        depth += 1
    if figure is None or figure.tag != "figure":
        return None
    caption = figure.find(".//figcaption")
    return clean(caption.text_content()) if caption is not None else None


def _extract(walk: Callable[[str], PageFacts], html: str) -> list[str]:
    return [c.url for c in candidates(walk(html), PAGE_URL, limit=page_images.MAX_CANDIDATES)]


def _rates(
    contenders: dict[str, Callable[[str], object]], pages: list[str], rounds: int
) -> dict[str, float]:
    """Pages per second of each contender, best of ``rounds``, the contenders interleaved (so
    a neighbour's load on a shared machine hits both alike)."""
    best = dict.fromkeys(contenders, float("inf"))
    for _ in range(rounds):
        for name, run in contenders.items():
            start = time.perf_counter()
            for html in pages:
                run(html)
            best[name] = min(best[name], time.perf_counter() - start)
    return {name: len(pages) / seconds for name, seconds in best.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--pages", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    pages = generate(options.pages)
    megabytes = sum(len(page) for page in pages) / 1e6
    print(f"{len(pages)} generated pages, {megabytes:.1f} MB of HTML")
    differ = [
        number
        for number, html in enumerate(pages)
        if _extract(page_images.walk, html) != _extract(walk_lxml, html)
    ]
    if differ:
        print(f"FAIL: the parsers disagree on pages {differ[:10]}", file=sys.stderr)
        return 1
    walks = _rates({"lexbor": page_images.walk, "lxml": walk_lxml}, pages, options.rounds)
    whole = _rates(
        {
            "lexbor": lambda html: _extract(page_images.walk, html),
            "lxml": lambda html: _extract(walk_lxml, html),
        },
        pages,
        options.rounds,
    )
    # The worst page the bound allows: 5 MB nested to just below MAX_DEPTH, then only tags
    # (each costs Lexbor a scan of the open elements). Deeper pages are cut before parsing.
    hostile = "<body>" + "<div>" * (page_images.MAX_DEPTH - 1) + "<div></div>" * 450_000
    start = time.perf_counter()
    page_images.walk(hostile)
    print(f"hostile 5 MB page at the depth bound: {time.perf_counter() - start:.2f} s (Lexbor)")
    for label, rates in (("parse + walk", walks), ("whole extraction", whole)):
        ratio = rates["lexbor"] / rates["lxml"]
        print(f"{label}:")
        print(f"  lxml (baseline)      {rates['lxml']:8.1f} pages/s")
        print(f"  selectolax (Lexbor)  {rates['lexbor']:8.1f} pages/s   {ratio:.2f}x lxml")
    return 0


if __name__ == "__main__":
    sys.exit(main())
