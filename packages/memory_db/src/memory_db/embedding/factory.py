"""Embedders by identity: the configured one, and the one each vector index was filled with.

An index records the identity of its embedder (provider, model, dimensions; never a secret).
Every process builds embedders from that identity on demand (:class:`Embedders`), so a search
embeds its query with the model of the index it reads, and a switch to an index of another
model needs no restart. Secrets (``JINA_API_KEYS``) and the provider's address still come from
the process's settings.
"""

from __future__ import annotations

from dataclasses import dataclass

from memory_db.embedding.clip import ClipEmbedder, check_model_name, model_path, read_manifest
from memory_db.embedding.clip_catalog import catalog_model
from memory_db.embedding.jina import JinaEmbedder
from memory_db.embedding.local import DIMENSIONS as LOCAL_DIMENSIONS
from memory_db.embedding.local import LOCAL_MODEL, LocalEmbedder
from memory_db.embedding.types import Embedder
from memory_db.errors import ConfigurationError
from memory_db.settings import MemorySettings

PROVIDERS = ("local", "jina", "clip")


@dataclass(frozen=True, slots=True)
class EmbedderIdentity:
    """Which embedder makes an index's vectors: vectors of two identities are never compared."""

    provider: str
    model: str
    dimensions: int

    def __str__(self) -> str:
        return f"{self.provider}/{self.model}/{self.dimensions}"


def configured_identity(settings: MemorySettings) -> EmbedderIdentity:
    """The identity ``ASSET_EMBED_PROVIDER``, ``ASSET_EMBED_MODEL`` and ``ASSET_EMBED_DIM`` name."""
    if settings.asset_embed_provider == "local":
        return EmbedderIdentity("local", LOCAL_MODEL, settings.asset_embed_dim)
    if settings.asset_embed_provider == "clip":
        if "asset_embed_model" not in settings.model_fields_set:
            raise ConfigurationError(
                "ASSET_EMBED_PROVIDER=clip needs ASSET_EMBED_MODEL: the name of a model directory "
                "under ASSET_EMBED_MODEL_DIR (memory-server models list)"
            )
        model = settings.asset_embed_model
        if "asset_embed_dim" in settings.model_fields_set:
            return EmbedderIdentity("clip", model, settings.asset_embed_dim)
        return EmbedderIdentity("clip", model, clip_dimensions(model, settings))
    return EmbedderIdentity("jina", settings.asset_embed_model, settings.asset_embed_dim)


def clip_dimensions(model: str, settings: MemorySettings) -> int:
    """The dimension of clip model ``model`` when none is given: model.json's, else the catalog's.

    ``ConfigurationError`` asking for ``ASSET_EMBED_DIM`` when neither says.
    """
    directory = model_path(settings.model_dir, model)
    if not directory.is_dir():
        raise ConfigurationError(
            f"clip model {model}: no model directory at {directory} "
            "(ASSET_EMBED_MODEL_DIR/ASSET_EMBED_MODEL; memory-server models fetch NAME)"
        )
    declared = read_manifest(directory).get("dimensions")
    if isinstance(declared, int) and declared > 0:
        return declared
    entry = catalog_model(model)
    if entry is not None:
        return entry.dimensions
    raise ConfigurationError(
        f"ASSET_EMBED_DIM: set the dimension of clip model {model} (its directory has no "
        "model.json saying it)"
    )


def check_identity(identity: EmbedderIdentity) -> None:
    """``ConfigurationError`` for an identity no provider can make (checked before building)."""
    if identity.provider not in PROVIDERS:
        raise ConfigurationError(
            f"unknown embedding provider {identity.provider!r} (one of {', '.join(PROVIDERS)})"
        )
    if identity.provider == "local":
        if identity.model != LOCAL_MODEL:
            raise ConfigurationError(f"the local embedder's model is {LOCAL_MODEL}")
        if identity.dimensions != LOCAL_DIMENSIONS:
            raise ConfigurationError(
                f"ASSET_EMBED_DIM: the local embedder makes {LOCAL_DIMENSIONS}-d vectors"
            )
    if not identity.model or len(identity.model) > 200:
        raise ConfigurationError("an embedding model name has 1-200 characters")
    if identity.provider == "clip":
        check_model_name(identity.model)


def build_embedder_for(identity: EmbedderIdentity, settings: MemorySettings) -> Embedder:
    """A new embedder of ``identity``.

    Jina keys and address, the clip model directory and the fused weighting come from
    ``settings``.
    """
    check_identity(identity)
    if identity.provider == "local":
        return LocalEmbedder()
    if identity.provider == "clip":
        # The model is found by name under this process's ASSET_EMBED_MODEL_DIR: an index
        # records the name, so it means the same model on every machine that has it.
        return ClipEmbedder(
            model_path(settings.model_dir, identity.model),
            dimensions=identity.dimensions,
            fused_image_weight=settings.asset_embed_fused_image_weight,
        )
    if not settings.jina_api_keys:
        raise ConfigurationError(
            f"the index's embedder {identity} needs JINA_API_KEYS in this process's environment"
        )
    return JinaEmbedder(
        api_keys=[key.get_secret_value() for key in settings.jina_api_keys],
        base_url=settings.jina_base_url,
        model=identity.model,
        dimensions=identity.dimensions,
        fused_mode=settings.asset_embed_fused_mode,
        fused_image_weight=settings.asset_embed_fused_image_weight,
    )


def build_embedder(settings: MemorySettings) -> Embedder:
    """``LocalEmbedder``, ``JinaEmbedder`` or ``ClipEmbedder`` per ``ASSET_EMBED_PROVIDER``."""
    return build_embedder_for(configured_identity(settings), settings)


class Embedders:
    """The embedders of one process by identity, each built once, on first use.

    ``configured``, when given, answers for ``configured_as`` (the identity the settings name,
    or the one it was created with): it is the process's own embedder and is not closed here.
    """

    def __init__(
        self,
        settings: MemorySettings,
        configured: Embedder | None = None,
        configured_as: EmbedderIdentity | None = None,
    ) -> None:
        self._settings = settings
        self._built: dict[EmbedderIdentity, Embedder] = {}
        self._own: dict[EmbedderIdentity, Embedder] = {}
        self.configured_identity: EmbedderIdentity | None = None
        if configured is not None:
            identity = configured_as or EmbedderIdentity(
                settings.asset_embed_provider, configured.model, configured.dimensions
            )
            self._built[identity] = configured
            self.configured_identity = identity

    def get(self, identity: EmbedderIdentity) -> Embedder:
        """The embedder of ``identity``; ``ConfigurationError`` if this process cannot build it."""
        embedder = self._built.get(identity)
        if embedder is None:
            embedder = build_embedder_for(identity, self._settings)
            self._built[identity] = embedder
            self._own[identity] = embedder
        return embedder

    async def close(self) -> None:
        """Close the embedders built here (not the configured one, which its owner closes)."""
        built, self._own = self._own, {}
        for identity, embedder in built.items():
            self._built.pop(identity, None)
            await embedder.close()
