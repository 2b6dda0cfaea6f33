"""Embedders: the contract, the Jina client, the offline local and clip embedders, a fake."""

from typing import TYPE_CHECKING

from memory_db.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from memory_db.embedding.clip import ClipEmbedder
    from memory_db.embedding.factory import (
        PROVIDERS,
        EmbedderIdentity,
        Embedders,
        build_embedder,
        build_embedder_for,
        check_identity,
        clip_dimensions,
        configured_identity,
    )
    from memory_db.embedding.fake import ScriptedEmbedder, hashed_vector
    from memory_db.embedding.jina import JINA_MODEL, JinaEmbedder
    from memory_db.embedding.local import LOCAL_MODEL, LocalEmbedder
    from memory_db.embedding.thresholds import (
        MatchThresholds,
        match_thresholds,
        understands_meaning,
    )
    from memory_db.embedding.types import (
        TASKS,
        Embedder,
        EmbedResult,
        EmbedValue,
        FusedInput,
        FusesByCombining,
        ImageInput,
        Task,
        TextInput,
        Usage,
    )
    from memory_db.embedding.validation import combine, normalize, validate_embeddings

# Loaded on first use: the embedders import numpy, httpx and (clip) onnxruntime, which a
# process that needs one constant of this package (`models` parsing its arguments, an `admin`
# command) should not pay for.
_LAZY = {
    "memory_db.embedding.clip": ("ClipEmbedder",),
    "memory_db.embedding.factory": (
        "PROVIDERS",
        "EmbedderIdentity",
        "Embedders",
        "build_embedder",
        "build_embedder_for",
        "check_identity",
        "clip_dimensions",
        "configured_identity",
    ),
    "memory_db.embedding.fake": (
        "ScriptedEmbedder",
        "hashed_vector",
    ),
    "memory_db.embedding.jina": (
        "JINA_MODEL",
        "JinaEmbedder",
    ),
    "memory_db.embedding.local": (
        "LOCAL_MODEL",
        "LocalEmbedder",
    ),
    "memory_db.embedding.thresholds": (
        "MatchThresholds",
        "match_thresholds",
        "understands_meaning",
    ),
    "memory_db.embedding.types": (
        "TASKS",
        "Embedder",
        "EmbedResult",
        "EmbedValue",
        "FusedInput",
        "FusesByCombining",
        "ImageInput",
        "Task",
        "TextInput",
        "Usage",
    ),
    "memory_db.embedding.validation": (
        "combine",
        "normalize",
        "validate_embeddings",
    ),
}
__getattr__ = lazy_exports(__name__, globals(), _LAZY)


__all__ = [
    "JINA_MODEL",
    "LOCAL_MODEL",
    "PROVIDERS",
    "TASKS",
    "ClipEmbedder",
    "EmbedResult",
    "EmbedValue",
    "Embedder",
    "EmbedderIdentity",
    "Embedders",
    "FusedInput",
    "FusesByCombining",
    "ImageInput",
    "JinaEmbedder",
    "LocalEmbedder",
    "MatchThresholds",
    "ScriptedEmbedder",
    "Task",
    "TextInput",
    "Usage",
    "build_embedder",
    "build_embedder_for",
    "check_identity",
    "clip_dimensions",
    "combine",
    "configured_identity",
    "hashed_vector",
    "match_thresholds",
    "normalize",
    "understands_meaning",
    "validate_embeddings",
]
