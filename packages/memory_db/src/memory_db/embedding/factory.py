"""The embedder the settings select."""

from __future__ import annotations

from memory_db.embedding.jina import JinaEmbedder
from memory_db.embedding.local import DIMENSIONS as LOCAL_DIMENSIONS
from memory_db.embedding.local import LocalEmbedder
from memory_db.embedding.types import Embedder
from memory_db.errors import ConfigurationError
from memory_db.settings import MemorySettings


def build_embedder(settings: MemorySettings) -> Embedder:
    """``LocalEmbedder`` or ``JinaEmbedder`` per ``ASSET_EMBED_PROVIDER``."""
    if settings.asset_embed_provider == "local":
        if settings.asset_embed_dim != LOCAL_DIMENSIONS:
            raise ConfigurationError(
                f"ASSET_EMBED_DIM: the local embedder makes {LOCAL_DIMENSIONS}-d vectors"
            )
        return LocalEmbedder()
    return JinaEmbedder(
        api_keys=[key.get_secret_value() for key in settings.jina_api_keys],
        base_url=settings.jina_base_url,
        model=settings.asset_embed_model,
        dimensions=settings.asset_embed_dim,
        fused_mode=settings.asset_embed_fused_mode,
        fused_image_weight=settings.asset_embed_fused_image_weight,
    )
