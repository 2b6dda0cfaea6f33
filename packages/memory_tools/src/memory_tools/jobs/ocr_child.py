"""The warm OCR engine's child process: Tesseract loaded once, fed one image at a time.

Started by :mod:`memory_tools.jobs.ocr_engine` as ``python .../ocr_child.py TESSDATA`` (by its path,
so that nothing but the standard library and the binding is loaded into it).
It loads the ``tesserocr`` binding with the English and orientation (OSD) language data, then
answers requests read from stdin, one JSON object per line, each with one JSON line on stdout:

- ``{"op": "osd", "path": P, "min_characters": N}``: orientation detection (``--psm 0``);
  answers ``{"ok": true, "rotate": degrees clockwise, "confidence": c}`` or
  ``{"ok": true, "rotate": null}`` when there is too little text to tell;
- ``{"op": "words", "path": P, "psm": 1 | 3}``: the word table, Tesseract's TSV (what the
  ``tesseract`` command prints for ``tsv``): ``{"ok": true, "tsv": "..."}``.

A failure to read one image answers ``{"ok": false, "error": "..."}`` and the child goes on;
a failure to start answers ``{"ok": false, "fatal": true, "error": "..."}`` on its first line
and exits. The first line of a started child is ``{"ok": true, "version": "5.x.y"}``.

The parent reads the image from a file it wrote (never through this pipe) and kills the child
when a request overruns its time limit; a crash of the engine ends only this process. Nothing
here logs: the parent decides what is said about a job.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from typing import Any, TextIO, cast

# Tesseract's own orientation ids, as its command line turns them into "Rotate:" (the degrees
# that turn the page upright): TessBaseAPI::GetOsdText, OrientationIdToValue.
_ROTATE_FOR_ORIENTATION = {0: 0, 90: 270, 180: 180, 270: 90}


def _answer(out: TextIO, answer: dict[str, Any]) -> None:
    out.write(json.dumps(answer) + "\n")
    out.flush()


def serve(tessdata: str, requests: Iterable[str], out: TextIO) -> int:
    """Answer requests until stdin closes; the exit status."""
    try:
        import tesserocr

        words = tesserocr.PyTessBaseAPI(path=tessdata, lang="eng", psm=tesserocr.PSM.AUTO)
        osd = tesserocr.PyTessBaseAPI(path=tessdata, lang="osd", psm=tesserocr.PSM.OSD_ONLY)
        version = str(tesserocr.tesseract_version()).split()[1]
    except Exception as exc:  # no binding, no language data: the parent says ocr_unavailable
        _answer(out, {"ok": False, "fatal": True, "error": f"{type(exc).__name__}: {exc}"})
        return 1
    _answer(out, {"ok": True, "version": version})
    for line in requests:
        try:
            request = json.loads(line)
            if request["op"] == "osd":
                osd.SetVariable("min_characters_to_try", str(int(request["min_characters"])))
                osd.SetImageFile(str(request["path"]))
                found: Any = osd.DetectOrientationScript()
                osd.Clear()
                if not found:
                    _answer(out, {"ok": True, "rotate": None})
                    continue
                rotate = _ROTATE_FOR_ORIENTATION.get(int(found["orient_deg"]))
                _answer(
                    out,
                    {"ok": True, "rotate": rotate, "confidence": float(found["orient_conf"])},
                )
            elif request["op"] == "words":
                # The binding's PSM constants are plain ints (its stub says an enum).
                words.SetPageSegMode(cast(Any, int(request["psm"])))
                words.SetImageFile(str(request["path"]))
                tsv = str(words.GetTSVText(0))
                words.Clear()
                _answer(out, {"ok": True, "tsv": tsv})
            else:
                _answer(out, {"ok": False, "error": "unknown request"})
        except Exception as exc:  # one image failed: say so and read the next
            _answer(out, {"ok": False, "error": type(exc).__name__})
    return 0


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1], sys.stdin, sys.stdout))
