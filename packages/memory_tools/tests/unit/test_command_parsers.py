"""The enrich parser's choices, kept apart from the enrichers so parsing loads none of them.

The parsers must not import the workflows (every command, `admin` ones included, would load
the enrichers' pyvips, OCR and describers), so ``operator_commands`` holds the enrichers' names
itself; this keeps the two equal.
"""

from __future__ import annotations

from memory_tools.jobs.ocr_jobs import ENRICHERS
from memory_tools.serving.operator_commands import ENRICHMENT_KINDS


def test_the_enrich_parser_offers_exactly_the_enrichers() -> None:
    assert tuple(ENRICHERS) == ENRICHMENT_KINDS
