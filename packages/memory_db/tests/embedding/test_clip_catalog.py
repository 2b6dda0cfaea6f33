"""The CLIP catalog's data: what ``models fetch`` trusts, so a change to it must be deliberate."""

from __future__ import annotations

import dataclasses
import hashlib
import json

from memory_db.embedding.clip_catalog import CATALOG, catalog_model, is_pinned

# SHA-256 of every entry's fields (files, pins, preprocessing included) as sorted JSON. An edit of
# an entry, or of the constructors that build them, changes it: update it only together with
# the entry whose data was meant to change, and say why in the commit.
CATALOG_DIGEST = "41bb738c2dac879973bb99aba50d234e42bbd6f449abd045ce2f278984c6a068"


def test_the_catalog_data_is_exactly_what_was_reviewed() -> None:
    text = json.dumps([dataclasses.asdict(model) for model in CATALOG], sort_keys=True)
    assert hashlib.sha256(text.encode()).hexdigest() == CATALOG_DIGEST


def test_the_one_pinned_file_keeps_its_hash_and_cap() -> None:
    model = catalog_model("clip-vit-b-32-openai")
    assert model is not None and model.revision == "4c1807b705b1d015fb032789cc4d221b23025a6f"
    visual = model.files["visual.onnx"]
    assert visual.sha256 == "fd6e1402a588279d1723c7534d4bcba5bc0b14b47dfab0e46f8c47b8270d7d40"
    assert visual.byte_limit == 353_000_000
    assert not is_pinned(model)  # its text tower and tokenizer have no published hash
    assert [m.name for m in CATALOG] == [
        "clip-vit-b-32-openai",
        "clip-vit-b-16-openai",
        "clip-vit-b-32-laion2b",
        "clip-vit-b-16-laion2b",
        "siglip-b-16-224",
        "mobileclip-s2",
        "jina-clip-v1",
    ]
