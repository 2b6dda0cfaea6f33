"""`make bench`: every benchmark in turn; each prints ratios against a baseline of its own run.

Sizes that finish in reasonable time; the large ones are flags of each script
(``scale.py --big``, ``load.py --full``; docs/scaling.md).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
BENCHMARKS = [
    ("MCP tool layer vs repositories", ["mcp_layer.py"]),
    ("local embedder vs decoding", ["local_embedder.py"]),
    ("clip embedder (tiny and ViT-B/32-shaped ONNX) vs decoding", ["clip_embedder.py"]),
    ("ingest pipeline vs Pillow", ["ingest.py"]),
    ("embedding worker vs a naive loop", ["worker.py"]),
    ("provider cost: inputs and tokens sent, reuse off vs on", ["provider_cost.py"]),
    (
        "vector index: every selectivity, recall and speed, and peers",
        ["vector_search.py", *sys.argv[1:]],
    ),
    ("scale curve: 10,000 and 100,000 vectors (--big adds 300,000)", ["scale.py"]),
    ("search: whole call vs bare vector query", ["search.py"]),
    ("server memory under 24 concurrent maximum-size saves", ["decode_memory.py"]),
    ("1 to 64 concurrent MCP clients against the HTTP server", ["load.py"]),
    ("page image extraction: selectolax (Lexbor) vs lxml", ["page_images.py"]),
    ("operator command start-up beside a running server vs the import floor", ["cli_startup.py"]),
]


def main() -> int:
    failed = 0
    for title, command in BENCHMARKS:
        print(f"\n=== {title} ===", flush=True)
        result = subprocess.run([sys.executable, str(HERE / command[0]), *command[1:]], check=False)
        failed += result.returncode != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
