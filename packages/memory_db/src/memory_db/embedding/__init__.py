"""Embedders: the contract, the Jina client, the offline local and clip embedders, a fake."""

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
from memory_db.embedding.thresholds import MatchThresholds, match_thresholds
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
    "validate_embeddings",
]
