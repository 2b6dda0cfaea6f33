"""A real warm OCR child that hangs on one read when told to (tests of time limits and crashes).

Run as ``python ocr_hanging_child.py FLAG TESSDATA``: the engine is the real one
(``memory_tools.jobs.ocr_child.serve``); while the file ``FLAG`` exists, the next image's first request (``osd``)
removes it, writes this process's id to ``FLAG.hanging`` and never answers (until killed).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from memory_tools.jobs.ocr_child import serve


def _requests(flag: Path, lines: Iterable[str]) -> Iterator[str]:
    for line in lines:
        if '"osd"' in line and flag.exists():
            flag.unlink()
            hanging = flag.with_suffix(".hanging")
            partial = flag.with_suffix(".partial")
            partial.write_text(str(os.getpid()))
            partial.rename(hanging)  # whole, or not there yet
            while True:
                time.sleep(3600)
        yield line


if __name__ == "__main__":
    sys.exit(serve(sys.argv[2], _requests(Path(sys.argv[1]), sys.stdin), sys.stdout))
