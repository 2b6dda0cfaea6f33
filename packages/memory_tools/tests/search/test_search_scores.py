"""What a search score says over MCP: a word match scores above zero, results come in the order
of their scores, and ``matchRepresentations`` names only the lists that contributed.

Found from outside (issue 30): a words-only search answered ``score: 0.0`` for every tag and
OCR match, with ``matchRepresentations: ["metadata", "visual"]``: the score was the best cosine
similarity, which for ``local-hash-v1`` is exactly 0.0 between a text query and an image-only
vector, and ``visual`` was named because the index returns its nearest 50 whatever they score.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastmcp import Client

from memory_tools import MemoryServices
from memory_tools.serving.job_worker import job_worker

from ..pictures import b64, picture
from ..tool_calls import call as _call


async def _read_text(services: MemoryServices, asset_id: str, text: str) -> None:
    """Store ``text`` as what OCR read in the image, as the ``ocr`` job does."""
    async with services.database.unit_of_work() as uow:
        assert await uow.assets.set_ocr("alice@example.com", asset_id, text, {"engine": "test"})


async def test_a_words_only_search_scores_tag_and_ocr_matches_above_zero_in_order(
    client_as: Callable[[str], Client[Any]], alice: Any, saving: MemoryServices
) -> None:
    async with client_as(alice.key) as client:
        tagged = await _call(
            client,
            "image_asset_save",
            {"imageBase64": b64(picture(61)), "title": "Quay at dusk", "tags": ["lighthouse"]},
        )
        read = await _call(
            client, "image_asset_save", {"imageBase64": b64(picture(62)), "title": "Boats"}
        )
        for seed, title in ((63, "Mountain bicycle race"), (64, "Birthday cake")):
            await _call(
                client, "image_asset_save", {"imageBase64": b64(picture(seed)), "title": title}
            )
        await job_worker(saving).drain()
        # After embedding, as an OCR job finishing later does: only the words can find it.
        await _read_text(saving, read["assetId"], "LIGHTHOUSE TOURS daily from the pier")
        one_word = await _call(client, "image_asset_search", {"query": "lighthouse"})
        two_words = await _call(client, "image_asset_search", {"query": "lighthouse tours"})

    for answer in (one_word, two_words):
        results = answer["results"]
        assert {r["assetId"] for r in results} == {tagged["assetId"], read["assetId"]}
        scores = [r["score"] for r in results]
        assert all(0 < score <= 1 for score in scores), scores
        # The order the caller sees is the order of the scores.
        assert scores == sorted(scores, reverse=True) and scores[0] > scores[1], scores
        for result in results:
            # A text query against an image-only vector is 0.0 for local-hash-v1: no evidence.
            assert "visual" not in result["matchRepresentations"], result
            assert "metadata" in result["matchRepresentations"], result
    by_id = {r["assetId"]: r for r in one_word["results"]}
    # The OCR text is not in the asset's vectors (read after embedding): words alone found it.
    assert by_id[read["assetId"]]["matchRepresentations"] == ["metadata"]
    # A tag weighs more than text read in the image.
    assert one_word["results"][0]["assetId"] == tagged["assetId"]
    # The image holding both words matches better than the one holding one of them.
    assert two_words["results"][0]["assetId"] == read["assetId"]
