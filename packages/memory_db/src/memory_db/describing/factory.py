"""The describer a process's settings configure, or none (generated context is off)."""

from __future__ import annotations

from memory_db.describing.openai import OpenAIDescriber
from memory_db.describing.types import Describer
from memory_db.errors import ConfigurationError
from memory_db.settings import MemorySettings


def build_describer(settings: MemorySettings) -> Describer | None:
    """An ``OpenAIDescriber`` when ``ASSET_DESCRIBE_BASE_URL`` is set, else ``None`` (off)."""
    if settings.asset_describe_base_url is None:
        return None
    if settings.asset_describe_model is None:  # settings built by hand skip their own check
        raise ConfigurationError("ASSET_DESCRIBE_MODEL is required with ASSET_DESCRIBE_BASE_URL")
    return OpenAIDescriber(
        base_url=settings.asset_describe_base_url,
        model=settings.asset_describe_model,
        api_keys=[key.get_secret_value() for key in settings.asset_describe_api_key],
        key_cooldown=settings.asset_describe_key_cooldown_seconds,
    )
