"""The CLIP-family models ``memory-server models`` knows: where to fetch them, size, licence.

Figures are the publishers' own zero-shot ImageNet-1k top-1 accuracies; nothing here was
measured on this project's data (docs/embeddings.md#clip). Sizes are the fp32 ONNX files'
approximate total, from the parameter counts. ``commercial`` says whether the weights' licence
allows commercial use, as the licence reads; it is not legal advice.

``files`` maps each file of a model directory (clip.py) to its path in the hub repository;
``preprocessing`` is written as ``preprocessor_config.json`` (the constants the model was
trained with), so a repository's own preprocessing format does not matter.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

HUB_URL = "https://huggingface.co"

_OPENAI_MEAN = [0.48145466, 0.4578275, 0.40821073]
_OPENAI_STD = [0.26862954, 0.26130258, 0.27577711]


def _clip_preprocessing(side: int, mean: list[float], std: list[float]) -> dict[str, Any]:
    return {
        "do_resize": True,
        "size": {"shortest_edge": side},
        "do_center_crop": True,
        "crop_size": {"height": side, "width": side},
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "image_mean": mean,
        "image_std": std,
    }


def _squash_preprocessing(side: int, mean: list[float], std: list[float]) -> dict[str, Any]:
    return {
        "do_resize": True,
        "size": {"height": side, "width": side},
        "do_center_crop": False,
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "image_mean": mean,
        "image_std": std,
    }


@dataclass(frozen=True, slots=True)
class CatalogModel:
    """One model ``memory-server models fetch NAME`` can download."""

    name: str
    family: str
    dimensions: int
    size_mb: int
    licence: str
    commercial: str
    imagenet_zero_shot: str
    repo: str
    revision: str
    files: dict[str, str]
    preprocessing: dict[str, Any]
    context_length: int = 77
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


_IMMICH_FILES = {
    "visual.onnx": "visual/model.onnx",
    "textual.onnx": "textual/model.onnx",
    "tokenizer.json": "textual/tokenizer.json",
}

CATALOG: tuple[CatalogModel, ...] = (
    CatalogModel(
        name="clip-vit-b-32-openai",
        family="OpenAI CLIP",
        dimensions=512,
        size_mb=600,
        licence="MIT (the OpenAI CLIP repository's licence covers code and weights)",
        commercial="yes, by the licence; OpenAI's model card calls deployed use out of scope",
        imagenet_zero_shot="63.2% (CLIP paper, ViT-B/32)",
        repo="Xenova/clip-vit-base-patch32",
        revision="main",
        files={
            "visual.onnx": "onnx/vision_model.onnx",
            "textual.onnx": "onnx/text_model.onnx",
            "tokenizer.json": "tokenizer.json",
        },
        preprocessing=_clip_preprocessing(224, _OPENAI_MEAN, _OPENAI_STD),
    ),
    CatalogModel(
        name="clip-vit-b-16-openai",
        family="OpenAI CLIP",
        dimensions=512,
        size_mb=600,
        licence="MIT (the OpenAI CLIP repository's licence covers code and weights)",
        commercial="yes, by the licence; OpenAI's model card calls deployed use out of scope",
        imagenet_zero_shot="68.6% (CLIP paper, ViT-B/16)",
        repo="Xenova/clip-vit-base-patch16",
        revision="main",
        files={
            "visual.onnx": "onnx/vision_model.onnx",
            "textual.onnx": "onnx/text_model.onnx",
            "tokenizer.json": "tokenizer.json",
        },
        preprocessing=_clip_preprocessing(224, _OPENAI_MEAN, _OPENAI_STD),
    ),
    CatalogModel(
        name="clip-vit-b-32-laion2b",
        family="LAION OpenCLIP",
        dimensions=512,
        size_mb=600,
        licence="MIT (OpenCLIP weights trained on LAION-2B)",
        commercial="yes",
        imagenet_zero_shot="66.6% (OpenCLIP results table, ViT-B-32 laion2b_s34b_b79k)",
        repo="immich-app/ViT-B-32__laion2b_s34b_b79k",
        revision="main",
        files=dict(_IMMICH_FILES),
        preprocessing=_clip_preprocessing(224, _OPENAI_MEAN, _OPENAI_STD),
    ),
    CatalogModel(
        name="clip-vit-b-16-laion2b",
        family="LAION OpenCLIP",
        dimensions=512,
        size_mb=600,
        licence="MIT (OpenCLIP weights trained on LAION-2B)",
        commercial="yes",
        imagenet_zero_shot="70.2% (OpenCLIP results table, ViT-B-16 laion2b_s34b_b88k)",
        repo="immich-app/ViT-B-16__laion2b_s34b_b88k",
        revision="main",
        files=dict(_IMMICH_FILES),
        preprocessing=_clip_preprocessing(224, _OPENAI_MEAN, _OPENAI_STD),
    ),
    CatalogModel(
        name="siglip-b-16-224",
        family="Google SigLIP",
        dimensions=768,
        size_mb=810,
        licence="Apache-2.0",
        commercial="yes",
        imagenet_zero_shot="76.0% (OpenCLIP results table, ViT-B-16-SigLIP webli)",
        repo="immich-app/ViT-B-16-SigLIP__webli",
        revision="main",
        files=dict(_IMMICH_FILES),
        preprocessing=_squash_preprocessing(224, [0.5, 0.5, 0.5], [0.5, 0.5, 0.5]),
        context_length=64,
    ),
    CatalogModel(
        name="mobileclip-s2",
        family="Apple MobileCLIP",
        dimensions=512,
        size_mb=400,
        licence="Apple machine-learning research licence (apple-amlr): research use",
        commercial="no",
        imagenet_zero_shot="74.4% (MobileCLIP paper, S2)",
        repo="immich-app/MobileCLIP-S2-OpenCLIP",
        revision="main",
        files=dict(_IMMICH_FILES),
        preprocessing=_squash_preprocessing(256, [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]),
    ),
    CatalogModel(
        name="jina-clip-v1",
        family="Jina CLIP",
        dimensions=768,
        size_mb=890,
        licence="Apache-2.0",
        commercial="yes",
        imagenet_zero_shot="not published as an ImageNet zero-shot figure on its model card",
        repo="jinaai/jina-clip-v1",
        revision="main",
        files={
            "visual.onnx": "onnx/vision_model.onnx",
            "textual.onnx": "onnx/text_model.onnx",
            "tokenizer.json": "tokenizer.json",
        },
        preprocessing=_clip_preprocessing(224, _OPENAI_MEAN, _OPENAI_STD),
        context_length=512,
        note="jina-clip-v2 (1,024-d) is CC-BY-NC-4.0: non-commercial, not listed",
    ),
)


def catalog_model(name: str) -> CatalogModel | None:
    """The catalog entry called ``name``, or ``None``."""
    for model in CATALOG:
        if model.name == name:
            return model
    return None


__all__ = ["CATALOG", "HUB_URL", "CatalogModel", "catalog_model"]
