"""Reading the text in an image with Tesseract (docs/ocr.md), offline and bounded.

:func:`read_text` runs Tesseract in a warm child process (:mod:`memory_tools.jobs.ocr_engine`, the
``tesserocr`` binding with Debian's language data), fed one image at a time: the child is killed
when a read overruns its time limit, and a crash in the engine cannot take the worker with it.
Without the binding, the ``tesseract`` command does the same through pytesseract, one process
per call (:func:`ocr_binding` says which). Orientation detection (``--psm 0``) runs
first and the page is turned upright before it is read, so a screenshot saved sideways or
upside down is read too; when there is too little text to tell, the page segmentation that
detects orientation itself (``--psm 1``) reads it.

What is kept is what the engine read, verbatim: words it is less than
:data:`MIN_WORD_CONFIDENCE` sure of are left out (on a photo without text the engine reports
shapes as letters), a result without a word of two letters or digits is no text at all, and
the text is cut at :data:`MAX_TEXT_CHARS` at a word boundary. Nothing is invented, spell-checked
or "corrected".
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import importlib.util
import math
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import pytesseract
import pyvips

from memory_db import UnitOfWork
from memory_tools.ingest.plan import OCR_ENGINE
from memory_tools.jobs.ocr_engine import EngineChild, EngineFailure, WarmEngines

ENGINE = OCR_ENGINE
LANGUAGE = "eng"  # the language data Debian's tesseract-ocr-eng installs
MIN_WORD_CONFIDENCE = 50.0  # percent, as Tesseract reports it per word
MAX_TEXT_CHARS = 8000
# Tesseract reads text best at 20-30 pixels per line: a small image is read at twice its size.
UPSCALE_BELOW_EDGE = 800
DEFAULT_TIMEOUT_SECONDS = 30.0
# Orientation detection: the characters it needs before it answers (Tesseract's default, 50,
# leaves short screenshots unturned), and the confidence under which its answer is ignored.
MIN_OSD_CHARACTERS = 10
MIN_OSD_CONFIDENCE = 1.0
# Images that cannot hold readable text are not given to the engine (docs/ocr.md#skipped),
# measured with this Tesseract on rendered text (DejaVu, 3-18 pt, contrast 2-230 levels):
# - a line of text it read was never less than 8 pixels tall (9 pixels read reliably), and a
#   kept word needs two glyphs, about 16 pixels along the line: an image whose short edge is
#   under MIN_TEXT_EDGE, or whose long edge is under MIN_WORD_EDGE, holds no readable line in
#   any orientation;
# - it read text whose ink differs from its background by only 4 grey levels, so "uniform" is
#   strict: no two neighbouring pixels differ by more than MAX_UNIFORM_STEP levels (a flat
#   fill, a blank page, an imperceptible gradient).
MIN_TEXT_EDGE = 8
MIN_WORD_EDGE = 16
MAX_UNIFORM_STEP = 2
# Tesseract starts an OpenMP team per process; with several OCR jobs and requests sharing few
# cores the team's threads mostly spin: one thread read a 1280 x 800 screenshot with 40-60 %
# less CPU and the same words (docs/ocr.md#what-it-costs). An operator's own value wins.
OMP_THREAD_LIMIT = "1"
# The columns of Tesseract's TSV word table, as its command line heads them.
TSV_COLUMNS = (
    "level",
    "page_num",
    "block_num",
    "par_num",
    "line_num",
    "word_num",
    "left",
    "top",
    "width",
    "height",
    "conf",
    "text",
)


async def queue_ocr(uow: UnitOfWork, owner: str, asset_id: str) -> bool:
    """Queue an OCR job for one asset; ``False`` when one is queued or running already."""
    job = await uow.jobs.create_kind(owner, asset_id, kind="ocr", model=ENGINE)
    return job is not None


class OcrError(Exception):
    """The engine could not read an image; ``code`` is the job's recorded failure reason."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class OcrReading:
    """What the engine read in one image (``text`` is ``None`` when it read no text)."""

    text: str | None
    language: str
    confidence: float | None  # mean word confidence of the kept words, 0-100
    words: int
    engine: str
    engine_version: str
    input_sha256: str  # of the image bytes the engine was given (the rendition read)
    # Why the engine was not run, when the image cannot hold readable text (cannot_hold_text):
    # ``too_small`` or ``uniform``; the reading then has no text, and says so.
    skipped: str | None = None
    # How Tesseract ran (ocr_binding): ``tesserocr`` (a warm child) or ``pytesseract``.
    binding: str = "pytesseract"


def cannot_hold_text(image: pyvips.Image) -> str | None:
    """Why ``image`` (as decoded, before any upscaling) cannot hold readable text, or ``None``.

    ``too_small``: no line of readable glyphs fits (:data:`MIN_TEXT_EDGE`,
    :data:`MIN_WORD_EDGE`). ``uniform``: no neighbouring pixels differ by more than
    :data:`MAX_UNIFORM_STEP` grey levels, so there is no edge a glyph could be drawn with. Both
    are cheap (one pass over the pixels) and err towards reading: an image that might hold
    text is read.
    """
    if (
        min(image.width, image.height) < MIN_TEXT_EDGE
        or max(image.width, image.height) < MIN_WORD_EDGE
    ):
        return "too_small"
    if image.hasalpha():
        image = image.flatten(background=[255, 255, 255])
    grey = image.colourspace("b-w")[0].cast("short")
    across = (
        grey.crop(1, 0, grey.width - 1, grey.height) - grey.crop(0, 0, grey.width - 1, grey.height)
    ).abs()
    down = (
        grey.crop(0, 1, grey.width, grey.height - 1) - grey.crop(0, 0, grey.width, grey.height - 1)
    ).abs()
    steepest = max(cast(float, across.max()), cast(float, down.max()))
    if steepest <= MAX_UNIFORM_STEP:
        return "uniform"
    return None


@functools.cache
def engine_version() -> str:
    """The installed Tesseract's version; :class:`OcrError` ``ocr_unavailable`` when missing."""
    try:
        return str(pytesseract.get_tesseract_version())
    except pytesseract.TesseractNotFoundError:
        raise OcrError(
            "ocr_unavailable", "Tesseract is not installed (Debian package tesseract-ocr)"
        ) from None


@functools.cache
def ocr_binding() -> str:
    """How this process runs Tesseract: ``tesserocr`` (warm children) or ``pytesseract``.

    ``tesserocr`` when the binding is installed (a dependency: its wheel carries the engine),
    ``pytesseract`` (a ``tesseract`` process per call) only when it is not. Recorded in every
    reading's provenance (``binding``) and in the worker's start-up line.
    """
    return "tesserocr" if importlib.util.find_spec("tesserocr") is not None else "pytesseract"


@functools.cache
def warm_engines() -> WarmEngines:
    """The warm engines of this process (children start on first use, not here).

    Their idle children are ended when the process exits (a child also ends by itself when
    its parent dies: its input closes).
    """
    engines = WarmEngines()
    atexit.register(engines.close)
    return engines


def read_text(
    data: bytes,
    *,
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
    max_chars: int = MAX_TEXT_CHARS,
    engines: WarmEngines | None = None,
) -> OcrReading:
    """Read the text in ``data`` (an image pyvips decodes: the sanitised preview) synchronously.

    With the ``tesserocr`` binding, in a warm child of ``engines`` (default:
    :func:`warm_engines`); without it, in ``tesseract`` processes (pytesseract). Raises
    :class:`OcrError`: ``ocr_unavailable`` (no Tesseract), ``ocr_timeout`` (over ``timeout``
    seconds; the process is killed), ``ocr_failed`` (the engine or the decode failed).
    """
    binding = ocr_binding()
    version = engine_version() if binding == "pytesseract" else ""
    try:
        image = pyvips.Image.new_from_buffer(data, "").copy_memory()
        skipped = cannot_hold_text(image)
        if skipped is None:
            if max(image.width, image.height) < UPSCALE_BELOW_EDGE:
                image = image.resize(2, kernel="linear")
            if image.hasalpha():
                image = image.flatten(background=[255, 255, 255])
            image = image.colourspace("b-w").copy_memory()
    except pyvips.Error:
        raise OcrError("ocr_failed", "the image could not be prepared for OCR") from None
    deadline = time.monotonic() + timeout
    with tempfile.TemporaryDirectory(prefix="memory-ocr-") as scratch:
        path = Path(scratch) / "input.png"
        warm = (engines or warm_engines()) if binding == "tesserocr" else None
        if warm is not None and skipped and warm.version is not None:
            # Nothing to read: the engine's version is known without a child, so none is
            # started (or taken from another read) for this image.
            version, answer = warm.version, None
        elif warm is not None:
            try:
                with warm.session(deadline) as child:
                    version = child.version
                    answer = None if skipped else _read_warm(child, image, path, deadline)
            except EngineFailure as exc:
                if exc.code == "ocr_timeout":
                    raise OcrError(
                        "ocr_timeout", f"OCR took longer than {timeout:g} s; the engine was killed"
                    ) from None
                raise OcrError(exc.code, exc.message) from None
        else:
            answer = None if skipped else _read_processes(image, path, deadline, timeout)
    reading = OcrReading(
        text=None,
        language=LANGUAGE,
        confidence=None,
        words=0,
        engine=ENGINE,
        engine_version=version,
        input_sha256=hashlib.sha256(data).hexdigest(),
        skipped=skipped,
        binding=binding,
    )
    if answer is None:
        return reading
    text, confidence, words = _kept_text(answer, max_chars)
    return replace(reading, text=text, confidence=confidence, words=words)


def _read_warm(
    child: EngineChild, image: pyvips.Image, path: Path, deadline: float
) -> dict[str, list[Any]]:
    """Orientation, then the words, by one warm child (as :func:`_read_processes` does)."""
    path.write_bytes(image.pngsave_buffer(compression=1))
    osd = child.ask(
        {"op": "osd", "path": str(path), "min_characters": MIN_OSD_CHARACTERS}, deadline
    )
    rotate: int | None = None
    confident = float(osd.get("confidence") or 0.0) >= MIN_OSD_CONFIDENCE
    if osd.get("ok") and osd.get("rotate") in (0, 90, 180, 270) and confident:
        rotate = int(osd["rotate"])
    if rotate:
        path.write_bytes(image.rot(f"d{rotate}").pngsave_buffer(compression=1))
    psm = 1 if rotate is None else 3
    answer = child.ask({"op": "words", "path": str(path), "psm": psm}, deadline)
    if not answer.get("ok") or not isinstance(answer.get("tsv"), str):
        raise OcrError("ocr_failed", f"Tesseract failed ({answer.get('error', 'no words')})")
    return _word_table(str(answer["tsv"]))


def _word_table(tsv: str) -> dict[str, list[Any]]:
    """Tesseract's TSV as pytesseract's ``Output.DICT`` reads it (the same numbers, truncated)."""
    table: dict[str, list[Any]] = {column: [] for column in TSV_COLUMNS}
    for row in tsv.strip("\n").split("\n"):
        cells = row.split("\t")
        if len(cells) < len(TSV_COLUMNS) - 1:
            continue
        cells += [""] * (len(TSV_COLUMNS) - len(cells))
        for column, cell in zip(TSV_COLUMNS, cells, strict=False):
            if column == "text":
                table[column].append(cell)
                continue
            try:
                table[column].append(int(float(cell)))
            except ValueError:
                table[column].append(cell)
    return table


def _read_processes(
    image: pyvips.Image, path: Path, deadline: float, timeout: float
) -> dict[str, list[Any]]:
    """Orientation, then the words, each by a ``tesseract`` process (pytesseract)."""
    # pytesseract starts its processes with this process's environment (see OMP_THREAD_LIMIT).
    os.environ.setdefault("OMP_THREAD_LIMIT", OMP_THREAD_LIMIT)
    path.write_bytes(image.pngsave_buffer(compression=1))
    # Orientation first: a screenshot saved sideways or upside down is turned upright.
    # Too little text to tell is no answer: then the page segmentation that detects
    # orientation itself reads it (--psm 1); an upright page is read with --psm 3.
    rotate = _tesseract(_orientation, path, deadline, timeout)
    if rotate:
        path.write_bytes(image.rot(f"d{rotate}").pngsave_buffer(compression=1))
    config = "--psm 1" if rotate is None else "--psm 3"
    answer = _tesseract(functools.partial(_words, config=config), path, deadline, timeout)
    if not isinstance(answer, dict):
        raise OcrError("ocr_failed", "Tesseract answered something other than its word table")
    return cast(dict[str, list[Any]], answer)


def _words(path: str, left: int, *, config: str) -> Any:
    """Tesseract's word table of the page (text, confidence and place of every word)."""
    answer: Any = pytesseract.image_to_data(
        path, lang=LANGUAGE, config=config, timeout=left, output_type=pytesseract.Output.DICT
    )
    return answer


def _orientation(path: str, left: int) -> int | None:
    """Degrees (clockwise) that turn the page upright, or ``None`` when it cannot tell."""
    try:
        answer: Any = pytesseract.image_to_osd(
            path,
            config=f"--psm 0 -c min_characters_to_try={MIN_OSD_CHARACTERS}",
            timeout=left,
            output_type=pytesseract.Output.DICT,
        )
    except pytesseract.TesseractError:
        return None  # too few characters to tell
    if not isinstance(answer, dict):
        return None
    osd = cast(dict[str, Any], answer)
    try:
        rotate, confidence = int(osd.get("rotate", 0)), float(osd.get("orientation_conf", 0.0))
    except (TypeError, ValueError):
        return None
    if rotate not in (0, 90, 180, 270) or confidence < MIN_OSD_CONFIDENCE:
        return None
    return rotate


def _tesseract(call: Callable[[str, int], Any], path: Path, deadline: float, timeout: float) -> Any:
    """Run one Tesseract call within what is left of the time limit, mapping its failures."""
    left = math.ceil(deadline - time.monotonic())  # whole seconds (the binding's type)
    if left <= 0:
        raise OcrError("ocr_timeout", f"OCR took longer than {timeout:g} s")
    try:
        return call(str(path), left)
    except pytesseract.TesseractNotFoundError:
        engine_version.cache_clear()
        raise OcrError(
            "ocr_unavailable", "Tesseract is not installed (Debian package tesseract-ocr)"
        ) from None
    except RuntimeError as exc:  # pytesseract's timeout (it kills the process)
        if "timeout" in str(exc).lower():
            raise OcrError("ocr_timeout", f"OCR took longer than {timeout:g} s") from None
        raise OcrError("ocr_failed", f"Tesseract failed ({type(exc).__name__})") from None
    except (pytesseract.TesseractError, OSError, ValueError) as exc:
        raise OcrError("ocr_failed", f"Tesseract failed ({type(exc).__name__})") from None


def _kept_text(data: dict[str, list[Any]], max_chars: int) -> tuple[str | None, float | None, int]:
    """The confident words, line by line as the engine found them, bounded."""
    lines: dict[tuple[int, int, int], list[str]] = {}
    confidences: list[float] = []
    keys = zip(
        data.get("text", []),
        data.get("conf", []),
        data.get("block_num", []),
        data.get("par_num", []),
        data.get("line_num", []),
        strict=False,
    )
    for word, conf, block, paragraph, line in keys:
        word = str(word).strip()
        try:
            confidence = float(conf)
        except (TypeError, ValueError):
            continue
        if not word or not math.isfinite(confidence) or confidence < MIN_WORD_CONFIDENCE:
            continue
        lines.setdefault((int(block), int(paragraph), int(line)), []).append(word)
        confidences.append(confidence)
    if not any(sum(ch.isalnum() for ch in word) >= 2 for ws in lines.values() for word in ws):
        return None, None, 0
    text = "\n".join(" ".join(words) for words in lines.values())
    if len(text) > max_chars:
        cut = text.rfind(" ", 0, max_chars + 1)
        text = text[: cut if cut > 0 else max_chars].rstrip()
    return text, round(sum(confidences) / len(confidences), 1), len(confidences)


__all__ = [
    "ENGINE",
    "LANGUAGE",
    "MAX_TEXT_CHARS",
    "MIN_WORD_CONFIDENCE",
    "OcrError",
    "OcrReading",
    "cannot_hold_text",
    "engine_version",
    "ocr_binding",
    "queue_ocr",
    "read_text",
    "warm_engines",
]
