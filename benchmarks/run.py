"""`make bench`: every benchmark in turn, then every target line they printed, in one summary.

Each benchmark prints ratios against a baseline of its own run, and its targets as lines
holding PASS or FAIL (n/a when a run cannot judge one). This runner shows each benchmark's
output as it comes, keeps those lines, and prints them all at the end under the benchmark's
title, with any benchmark that could not run. Sizes that finish in reasonable time, and the
ones a target is stated at (``scale.py --big``: recall at 300,000 vectors); the largest load
run is a flag of its script (``load.py --full``; docs/scaling.md).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
BENCHMARKS = [
    ("MCP tool layer vs repositories", ["mcp_layer.py"]),
    ("local embedder vs decoding", ["local_embedder.py"]),
    (
        "near-duplicate distance: precision and recall on the relevance photos",
        ["near_duplicates.py"],
    ),
    ("clip embedder (tiny and ViT-B/32-shaped ONNX) vs decoding", ["clip_embedder.py"]),
    ("ingest pipeline vs Pillow", ["ingest.py"]),
    ("embedding worker vs a naive loop", ["worker.py"]),
    ("OCR: CPU per read, warm engine vs a tesseract process per call", ["ocr_engine.py"]),
    ("provider cost: inputs and tokens sent, reuse off vs on", ["provider_cost.py"]),
    (
        "vector index: every selectivity, recall and speed, and peers",
        ["vector_search.py", *sys.argv[1:]],
    ),
    # --big: issue 31 states its recall target at 300,000 vectors.
    ("scale curve: 10,000, 100,000 and 300,000 vectors", ["scale.py", "--big"]),
    (
        "one search call over MCP HTTP at 100,000 assets: latency, round trips, CPU",
        ["search.py"],
    ),
    (
        "one small-image save over MCP HTTP with its worker's part: database round trips",
        ["save_round_trips.py"],
    ),
    ("server memory under 24 concurrent maximum-size saves", ["decode_memory.py"]),
    (
        "1 to 64 concurrent MCP clients against the HTTP server, and OCR's cost to searches",
        ["load.py", "--ocr-compare", "16"],
    ),
    ("page image extraction: selectolax (Lexbor) vs lxml", ["page_images.py"]),
    ("operator command start-up beside a running server vs the import floor", ["cli_startup.py"]),
    ("tools/list bytes per tool and per server against their budgets", ["tool_schemas.py"]),
]
TARGET_LINE = re.compile(r"\b(PASS|FAIL)\b|^\s*n/a\b")


def run_one(command: list[str]) -> tuple[int, list[str]]:
    """Run one benchmark, echoing its output; its exit status and its target lines."""
    found: list[str] = []
    with subprocess.Popen(
        [sys.executable, str(HERE / command[0]), *command[1:]],
        stdout=subprocess.PIPE,
        text=True,
        bufsize=1,
    ) as process:
        assert process.stdout is not None
        for line in process.stdout:
            print(line, end="", flush=True)
            if TARGET_LINE.search(line):
                found.append(line.strip())
    return process.returncode, found


def main() -> int:
    failed = 0
    summary: list[tuple[str, int, list[str]]] = []
    for title, command in BENCHMARKS:
        print(f"\n=== {title} ===", flush=True)
        status, found = run_one(command)
        failed += status != 0
        summary.append((title, status, found))
    print("\n=== every target, PASS or FAIL ===")
    for title, status, found in summary:
        if status != 0:
            print(f"{title}: DID NOT RUN (exit status {status})")
        elif found:
            print(f"{title}:")
        for line in found:
            print(f"  {line}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
