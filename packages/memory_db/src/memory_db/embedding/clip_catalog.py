"""The CLIP-family models ``memory-server models`` knows: where to fetch them, size, licence.

Figures are the publishers' own zero-shot ImageNet-1k top-1 accuracies; nothing here was
measured on this project's data (docs/embeddings.md#clip). Sizes are the fp32 ONNX files'
approximate total, from the parameter counts. ``commercial`` says whether the weights' licence
allows commercial use, as the licence reads; it is not legal advice.

``files`` maps each file of a model directory (clip.py) to a :class:`HubFile`: its path in the
hub repository and what it must hash to. ``preprocessing`` is written as
``preprocessor_config.json`` (the constants the model was trained with), so a repository's own
preprocessing format does not matter.

Pins: ``models fetch`` trusts nothing the hub (or whatever host it redirects to) says about a
file; it downloads the repository at the pinned commit (``revision``, 40 hex digits, never a
branch) and keeps a file only when its bytes hash to the pinned SHA-256 and their count is the
pinned size (or, where the hub publishes only a rounded size, stays under ``max_size``). An
entry missing any of these is listed as "not pinned" and ``models fetch`` refuses it: the
operator installs such a model by hand (docs/embeddings.md#installing-a-model-by-hand). Every
pinned value carries, in a comment, the hub page it was read from; a value no stored page
showed is left out, never guessed.

An operator (or a test) can add fully pinned entries from a JSON file with
:func:`load_catalog_file` (``memory-server models --catalog FILE``); such a file cannot
replace or weaken an entry of :data:`CATALOG`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memory_db.errors import ConfigurationError

HUB_URL = "https://huggingface.co"

_OPENAI_MEAN = [0.48145466, 0.4578275, 0.40821073]
_OPENAI_STD = [0.26862954, 0.26130258, 0.27577711]


def clip_preprocessing(
    side: int, mean: Sequence[float], std: Sequence[float], *, resize: int | None = None
) -> dict[str, Any]:
    """A CLIP-style ``preprocessor_config.json``: resize, centre crop, rescale, normalise.

    The shorter side goes to ``resize`` (default ``side``), then the centre is cropped to
    ``side`` x ``side``.
    """
    return {
        "do_resize": True,
        "size": {"shortest_edge": resize or side},
        "do_center_crop": True,
        "crop_size": {"height": side, "width": side},
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "image_mean": list(mean),
        "image_std": list(std),
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


_COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_MB = 1_000_000  # the hub's pages round sizes to decimal megabytes


@dataclass(frozen=True, slots=True)
class HubFile:
    """One file of a catalog model in its hub repository, and what its bytes must be.

    ``size`` is the exact byte count (from a Git LFS pointer); ``max_size`` a cap used only
    where the hub's pages publish a rounded size and no pointer was found (the rounded size
    rounded up to the next MB). A fetch needs ``sha256`` and one of the two.
    """

    path: str
    sha256: str | None = None
    size: int | None = None
    max_size: int | None = None

    @property
    def byte_limit(self) -> int | None:
        """The most bytes a download of this file may have (``None``: not pinned)."""
        return self.size if self.size is not None else self.max_size


@dataclass(frozen=True, slots=True)
class CatalogModel:
    """One model ``memory-server models fetch NAME`` can download (when it is pinned)."""

    name: str
    family: str
    dimensions: int
    size_mb: int
    licence: str
    commercial: str
    imagenet_zero_shot: str
    repo: str
    revision: str | None
    files: dict[str, HubFile]
    preprocessing: dict[str, Any]
    context_length: int = 77
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def pin_problems(model: CatalogModel) -> list[str]:
    """What keeps ``model`` from being fetched; empty when the commit and every file are pinned."""
    problems: list[str] = []
    if model.revision is None or not _COMMIT_RE.match(model.revision):
        problems.append("no pinned commit (revision)")
    for local, pin in model.files.items():
        if pin.sha256 is None or not _SHA256_RE.match(pin.sha256):
            problems.append(f"{local}: no pinned SHA-256")
        limit = pin.byte_limit
        if limit is None or limit <= 0:
            problems.append(f"{local}: no pinned size")
    return problems


def is_pinned(model: CatalogModel) -> bool:
    """Whether ``models fetch`` may download ``model`` (see :func:`pin_problems`)."""
    return not pin_problems(model)


# The repositories lay their files out in one of two ways: Xenova's ONNX exports (and jinaai's)
# keep both towers in ``onnx/`` and the tokenizer at the top; immich-app's keep a folder a tower.
def _onnx_folder_files(visual: HubFile | None = None) -> dict[str, HubFile]:
    """The files of an ``onnx/`` layout; ``visual`` replaces the vision tower's (a pinned one)."""
    return {
        "visual.onnx": visual or HubFile("onnx/vision_model.onnx"),
        "textual.onnx": HubFile("onnx/text_model.onnx"),
        "tokenizer.json": HubFile("tokenizer.json"),
    }


def _tower_folder_files() -> dict[str, HubFile]:
    """The files of a ``visual/`` + ``textual/`` layout (immich-app's exports); none pinned."""
    return {
        "visual.onnx": HubFile("visual/model.onnx"),
        "textual.onnx": HubFile("textual/model.onnx"),
        "tokenizer.json": HubFile("textual/tokenizer.json"),
    }


def _openai_clip(
    name: str,
    *,
    imagenet_zero_shot: str,
    repo: str,
    revision: str | None,
    files: dict[str, HubFile],
    size_mb: int = 600,
    note: str = "",
) -> CatalogModel:
    """An OpenAI CLIP ViT-B (512-d, MIT, OpenAI's preprocessing at 224 px)."""
    return CatalogModel(
        name=name,
        family="OpenAI CLIP",
        dimensions=512,
        size_mb=size_mb,
        note=note,
        licence="MIT (the OpenAI CLIP repository's licence covers code and weights)",
        commercial="yes, by the licence; OpenAI's model card calls deployed use out of scope",
        imagenet_zero_shot=imagenet_zero_shot,
        repo=repo,
        revision=revision,
        files=files,
        preprocessing=clip_preprocessing(224, _OPENAI_MEAN, _OPENAI_STD),
    )


def _laion_clip(
    name: str, *, imagenet_zero_shot: str, repo: str, revision: str | None
) -> CatalogModel:
    """An OpenCLIP ViT-B trained on LAION-2B (512-d, MIT, OpenAI's preprocessing at 224 px)."""
    return CatalogModel(
        name=name,
        family="LAION OpenCLIP",
        dimensions=512,
        size_mb=600,
        licence="MIT (OpenCLIP weights trained on LAION-2B)",
        commercial="yes",
        imagenet_zero_shot=imagenet_zero_shot,
        repo=repo,
        revision=revision,
        files=_tower_folder_files(),
        preprocessing=clip_preprocessing(224, _OPENAI_MEAN, _OPENAI_STD),
    )


# What `memory-server models install` (and `make model`) installs when no name is given: the
# OpenAI CLIP ViT-B/32 with int8 weights. Chosen for a CPU: MIT, commercially usable, and the
# fastest candidate measured with random weights of each architecture (benchmarks/
# clip_candidates.py; docs/embeddings.md#choosing-the-recommended-model).
RECOMMENDED_MODEL = "clip-vit-b-32-openai-int8"

# Where a value below came from: "hub page" comments name the huggingface.co page that showed it.
# A file without a SHA-256 or size, or an entry without a commit, was not found on any stored
# page: it stays unpinned (and so not fetchable) rather than guessed. The families with one
# member (SigLIP, MobileCLIP, Jina CLIP) are written out as CatalogModel directly.

CATALOG: tuple[CatalogModel, ...] = (
    _openai_clip(
        "clip-vit-b-32-openai",
        imagenet_zero_shot="63.2% (CLIP paper, ViT-B/32)",
        repo="Xenova/clip-vit-base-patch32",
        # hub page: https://huggingface.co/Xenova/clip-vit-base-patch32/tree/4c1807b705b1d015fb032789cc4d221b23025a6f/onnx
        revision="4c1807b705b1d015fb032789cc4d221b23025a6f",
        # No stored page gives text_model.onnx's SHA-256 at this commit, nor any SHA-256 of
        # tokenizer.json (a plain git file: its pages show no hash): only the vision tower is
        # pinned.
        files=_onnx_folder_files(
            visual=HubFile(
                "onnx/vision_model.onnx",
                # hub page: https://huggingface.co/Xenova/clip-vit-base-patch32/blob/4c1807b705b1d015fb032789cc4d221b23025a6f/onnx/vision_model.onnx
                # ("Git LFS Details", SHA256; "Size of remote file: 352 MB", rounded: a cap)
                sha256="fd6e1402a588279d1723c7534d4bcba5bc0b14b47dfab0e46f8c47b8270d7d40",
                max_size=353 * _MB,
            )
        ),
    ),
    _openai_clip(
        RECOMMENDED_MODEL,
        imagenet_zero_shot="63.2% (CLIP paper, ViT-B/32; int8 weights not evaluated by OpenAI)",
        repo="Xenova/clip-vit-base-patch32",
        # The int8 exports (dynamically quantized by Xenova, added by 6ef1ebc "Upload 4 files")
        # beside the fp32 ones. hub page: https://huggingface.co/Xenova/clip-vit-base-patch32/tree/4c1807b705b1d015fb032789cc4d221b23025a6f/onnx
        # (vision_model_quantized.onnx 89.1 MB, text_model_quantized.onnx 64.5 MB, both last
        # changed by "Upload 4 files"). The commit below is the one at which the public
        # repositories quoted for the vision tower and the tokenizer fetch and check all three
        # files; no stored hub page names it.
        revision="d15189d7028b43f1d3e65039190477f6af591c2a",
        files={
            "visual.onnx": HubFile(
                "onnx/vision_model_quantized.onnx",
                # No stored hub page shows this file's SHA-256 (the tree page above shows
                # "89.1 MB"). The SHA-256 and exact size are the ones at least five unrelated
                # public repositories (source corpus) pin and check when they download this
                # file at this commit (or at 6ef1ebc), all alike; the size agrees with the
                # hub's rounded 89.1 MB. A wrong pin can only refuse a download, never accept
                # other bytes.
                sha256="583fd1110a514667812fee7d684952aaf82a99b959760c8d7dca7e0ab9839299",
                size=89_117_001,
            ),
            "textual.onnx": HubFile(
                "onnx/text_model_quantized.onnx",
                # hub page: https://huggingface.co/Xenova/clip-vit-base-patch32/blob/b8b103f67eef16b29539311ff78dde6c4a754370/onnx/text_model_quantized.onnx
                # ("Git LFS Details", SHA256; "64.5 MB"). The exact size is the one the same
                # public repositories pin beside that SHA-256.
                sha256="73baab855d406190da9faa498cfedf65f15cf309f4cc7385b7b032e6d08e5c3a",
                size=64_504_507,
            ),
            "tokenizer.json": HubFile(
                "tokenizer.json",
                # A plain git file: no hub page shows a SHA-256 of it, and no stored page shows
                # this tokenizer stored with Git LFS elsewhere. The SHA-256 and size are those
                # the same public repositories pin at this commit, all alike (one also pins its
                # git blob id, bc1f77d20440541dd073ebae6f6c401087c7d34e).
                sha256="f7f3b7af117d467b58374797691a6438d3e6b9e9cef800dfd5dced7f697a90cd",
                size=2_224_119,
            ),
        },
        size_mb=156,
        note="the recommended model (`models install`): int8 weights, a quarter of the "
        "download (docs/embeddings.md#the-recommended-model)",
    ),
    _openai_clip(
        "clip-vit-b-16-openai",
        imagenet_zero_shot="68.6% (CLIP paper, ViT-B/16)",
        repo="Xenova/clip-vit-base-patch16",
        revision=None,
        files=_onnx_folder_files(),
    ),
    _laion_clip(
        "clip-vit-b-32-laion2b",
        imagenet_zero_shot="66.6% (OpenCLIP results table, ViT-B-32 laion2b_s34b_b79k)",
        # The hub spells the pretrained tag with hyphens ("laion2b-s34b-b79k"), not OpenCLIP's
        # underscores. hub page: https://huggingface.co/immich-app/ViT-B-32__laion2b-s34b-b79k/tree/927497311ca58ec911247a796e4ac5bb49efe4f0
        repo="immich-app/ViT-B-32__laion2b-s34b-b79k",
        # main has moved since (textual/tokenizer.json was replaced, 2.22 MB -> 3.64 MB:
        # https://huggingface.co/immich-app/ViT-B-32__laion2b-s34b-b79k/blob/main/textual/tokenizer.json);
        # no stored page gives the SHA-256s of the files at this commit: not pinned.
        revision="927497311ca58ec911247a796e4ac5bb49efe4f0",
    ),
    _laion_clip(
        "clip-vit-b-16-laion2b",
        imagenet_zero_shot="70.2% (OpenCLIP results table, ViT-B-16 laion2b_s34b_b88k)",
        repo="immich-app/ViT-B-16__laion2b-s34b-b88k",
        revision=None,
    ),
    CatalogModel(
        name="siglip-b-16-224",
        family="Google SigLIP",
        dimensions=768,
        size_mb=810,
        licence="Apache-2.0",
        commercial="yes",
        imagenet_zero_shot="76.0% (OpenCLIP results table, ViT-B-16-SigLIP webli)",
        # No stored page of this repository was found (only its -256 and -384 siblings, whose
        # visual/preprocess_cfg.json is the same squash resize with mean = std = 0.5:
        # https://huggingface.co/immich-app/ViT-L-16-SigLIP-256__webli/blob/b1e296467ab83ba018270f05253f56888b7f1db9/visual/preprocess_cfg.json).
        repo="immich-app/ViT-B-16-SigLIP__webli",
        revision=None,
        files=_tower_folder_files(),
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
        # No stored page of this repository was found: not pinned.
        repo="immich-app/MobileCLIP-S2-OpenCLIP",
        revision=None,
        files=_tower_folder_files(),
        # MobileCLIP resizes the shorter side to 256 and crops the centre, without normalising
        # (mean 0, std 1), not a squash: hub page (the S0 sibling's processor config)
        # https://huggingface.co/Xenova/mobileclip_s0/blob/9db4e77d9bbdeb1c1e8c1efa9702047e8d2d5ec2/preprocessor_config.json
        preprocessing=clip_preprocessing(256, [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]),
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
        # The commit after "fix-onnx-weights (#23)", which replaced onnx/text_model.onnx; no
        # stored page gives the files' SHA-256s, so the entry stays unpinned. hub page:
        # https://huggingface.co/jinaai/jina-clip-v1/tree/fd7f7158b59ba9347679ec009a6547936d2c7378/onnx
        revision="fd7f7158b59ba9347679ec009a6547936d2c7378",
        files=_onnx_folder_files(),
        preprocessing=clip_preprocessing(224, _OPENAI_MEAN, _OPENAI_STD),
        context_length=512,
        note="jina-clip-v2 (1,024-d) is CC-BY-NC-4.0: non-commercial, not listed",
    ),
)

_LOCAL_FILES = ("visual.onnx", "textual.onnx", "tokenizer.json")


def catalog_model(name: str, catalog: tuple[CatalogModel, ...] = CATALOG) -> CatalogModel | None:
    """The entry called ``name`` in ``catalog`` (the built-in one by default), or ``None``."""
    for model in catalog:
        if model.name == name:
            return model
    return None


def _text(entry: dict[str, Any], key: str, where: str, default: str | None = None) -> str:
    value = entry.get(key, default)
    if not isinstance(value, str) or not value:
        raise ValueError(f"{where}: {key!r} must be a non-empty string")
    return value


def _positive(entry: dict[str, Any], key: str, where: str, default: int | None = None) -> int:
    value = entry.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{where}: {key!r} must be a positive integer")
    return value


def _catalog_file_entry(entry: Any, where: str) -> CatalogModel:
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: an entry must be a JSON object")
    raw: dict[str, Any] = entry  # pyright: ignore[reportUnknownVariableType]
    name = _text(raw, "name", where)
    # Here, not at the top: the catalog is read by every operator command's parser, and the
    # embedder module brings numpy and onnxruntime, which those commands never need.
    from memory_db.embedding.clip import check_model_name

    try:
        check_model_name(name)  # it names a directory under ASSET_EMBED_MODEL_DIR
    except ConfigurationError:
        raise ValueError(
            f"{where}: {name!r} is not a model name (letters, digits, '.', '_', '-')"
        ) from None
    where = f"{where} ({name})"
    files = raw.get("files")
    if not isinstance(files, dict) or sorted(files) != sorted(_LOCAL_FILES):  # pyright: ignore[reportUnknownArgumentType]
        raise ValueError(f"{where}: 'files' must map exactly {', '.join(_LOCAL_FILES)}")
    pins: dict[str, HubFile] = {}
    for local in _LOCAL_FILES:
        spec: Any = files[local]
        if not isinstance(spec, dict):
            raise ValueError(f"{where}: files[{local!r}] must be a JSON object")
        pin: dict[str, Any] = spec  # pyright: ignore[reportUnknownVariableType]
        pins[local] = HubFile(
            path=_text(pin, "path", f"{where} {local}"),
            sha256=_text(pin, "sha256", f"{where} {local}").lower(),
            size=_positive(pin, "size", f"{where} {local}"),
        )
    preprocessing = raw.get("preprocessing")
    if not isinstance(preprocessing, dict):
        raise ValueError(f"{where}: 'preprocessing' must be a JSON object")
    model = CatalogModel(
        name=name,
        family=_text(raw, "family", where, "operator catalog file"),
        dimensions=_positive(raw, "dimensions", where),
        size_mb=_positive(raw, "sizeMB", where, 1),
        licence=_text(raw, "licence", where, "as its publisher states"),
        commercial=_text(raw, "commercialUse", where, "see its licence"),
        imagenet_zero_shot=_text(raw, "imagenetZeroShot", where, "not given"),
        repo=_text(raw, "repo", where),
        revision=_text(raw, "revision", where).lower(),
        files=pins,
        preprocessing=dict(preprocessing),  # pyright: ignore[reportUnknownArgumentType]
        context_length=_positive(raw, "contextLength", where, 77),
    )
    problems = pin_problems(model)
    if problems:
        raise ValueError(f"{where}: not fully pinned ({'; '.join(problems)})")
    return model


def load_catalog_file(path: Path) -> tuple[CatalogModel, ...]:
    """Extra, fully pinned entries from a JSON file: ``{"models": [{...}, ...]}``.

    Each entry names ``name``, ``dimensions``, ``repo``, ``revision`` (a 40-hex commit),
    ``files`` (``visual.onnx``, ``textual.onnx``, ``tokenizer.json``, each ``{"path",
    "sha256", "size"}`` with the exact size) and ``preprocessing``; ``contextLength``,
    ``family``, ``licence``, ``commercialUse``, ``imagenetZeroShot`` and ``sizeMB`` are
    optional. ``ValueError`` naming the first problem; a name of the built-in catalog is one
    (a file adds models, it never replaces a built-in pin).
    """
    where = str(path)
    try:
        document: Any = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{where}: not a readable JSON catalog file ({exc})") from None
    entries: Any = document.get("models") if isinstance(document, dict) else None  # pyright: ignore[reportUnknownMemberType]
    if not isinstance(entries, list) or not entries:
        raise ValueError(f'{where}: expected {{"models": [ ... ]}} with at least one entry')
    models: list[CatalogModel] = []
    for index, entry in enumerate(entries):  # pyright: ignore[reportUnknownArgumentType, reportUnknownVariableType]
        model = _catalog_file_entry(entry, f"{where} models[{index}]")
        if catalog_model(model.name) is not None:
            raise ValueError(
                f"{where}: {model.name!r} is a built-in catalog entry; a catalog file cannot "
                "replace its pins (choose another name)"
            )
        if any(m.name == model.name for m in models):
            raise ValueError(f"{where}: {model.name!r} appears twice")
        models.append(model)
    return tuple(models)


__all__ = [
    "CATALOG",
    "HUB_URL",
    "RECOMMENDED_MODEL",
    "CatalogModel",
    "HubFile",
    "catalog_model",
    "clip_preprocessing",
    "is_pinned",
    "load_catalog_file",
    "pin_problems",
]
