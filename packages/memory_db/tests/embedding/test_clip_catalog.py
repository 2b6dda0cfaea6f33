"""The CLIP catalog's data: what ``models fetch`` trusts, so a change to it must be deliberate."""

from __future__ import annotations

import dataclasses
import hashlib
import json

from memory_db.embedding.clip_catalog import (
    CATALOG,
    RECOMMENDED_MODEL,
    catalog_model,
    is_pinned,
    pin_problems,
)

# SHA-256 of every entry's fields (files, pins, preprocessing included) as sorted JSON. An edit of
# an entry, or of the constructors that build them, changes it: update it only together with
# the entry whose data was meant to change, and say why in the commit.
CATALOG_DIGEST = "f5e6399a8f326bcf8177b077d17c8c14e4cc6d8a04dcfb2a1b1ce42bff69fd59"


def test_the_catalog_data_is_exactly_what_was_reviewed() -> None:
    text = json.dumps([dataclasses.asdict(model) for model in CATALOG], sort_keys=True)
    assert hashlib.sha256(text.encode()).hexdigest() == CATALOG_DIGEST


def test_the_recommended_model_is_fully_pinned_to_exact_sizes() -> None:
    model = catalog_model(RECOMMENDED_MODEL)
    assert model is not None and pin_problems(model) == []
    assert model.revision == "d15189d7028b43f1d3e65039190477f6af591c2a"
    assert model.commercial.startswith("yes") and model.dimensions == 512
    pins = {local: (pin.path, pin.sha256, pin.size) for local, pin in model.files.items()}
    assert pins == {
        "visual.onnx": (
            "onnx/vision_model_quantized.onnx",
            "583fd1110a514667812fee7d684952aaf82a99b959760c8d7dca7e0ab9839299",
            89_117_001,
        ),
        "textual.onnx": (
            "onnx/text_model_quantized.onnx",
            "73baab855d406190da9faa498cfedf65f15cf309f4cc7385b7b032e6d08e5c3a",
            64_504_507,
        ),
        "tokenizer.json": (
            "tokenizer.json",
            "f7f3b7af117d467b58374797691a6438d3e6b9e9cef800dfd5dced7f697a90cd",
            2_224_119,
        ),
    }


def test_the_one_pinned_file_keeps_its_hash_and_cap() -> None:
    model = catalog_model("clip-vit-b-32-openai")
    assert model is not None and model.revision == "4c1807b705b1d015fb032789cc4d221b23025a6f"
    visual = model.files["visual.onnx"]
    assert visual.sha256 == "fd6e1402a588279d1723c7534d4bcba5bc0b14b47dfab0e46f8c47b8270d7d40"
    assert visual.byte_limit == 353_000_000
    assert not is_pinned(model)  # its text tower and tokenizer have no published hash
    assert [m.name for m in CATALOG] == [
        "clip-vit-b-32-openai",
        RECOMMENDED_MODEL,
        "clip-vit-b-16-openai",
        "clip-vit-b-32-laion2b",
        "clip-vit-b-16-laion2b",
        "siglip-b-16-224",
        "mobileclip-s2",
        "jina-clip-v1",
    ]
