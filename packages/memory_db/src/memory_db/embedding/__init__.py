"""Embedders: the contract, the Jina client, the offline local embedder and a fake."""

from memory_db.embedding.factory import build_embedder
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
    ImageInput,
    Task,
    TextInput,
    Usage,
)
from memory_db.embedding.validation import combine, normalize, validate_embeddings

__all__ = [
    "JINA_MODEL",
    "LOCAL_MODEL",
    "TASKS",
    "EmbedResult",
    "EmbedValue",
    "Embedder",
    "FusedInput",
    "ImageInput",
    "JinaEmbedder",
    "LocalEmbedder",
    "MatchThresholds",
    "ScriptedEmbedder",
    "Task",
    "TextInput",
    "Usage",
    "build_embedder",
    "combine",
    "hashed_vector",
    "match_thresholds",
    "normalize",
    "validate_embeddings",
]
