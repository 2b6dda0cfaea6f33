"""Images saved for the web page tests: through the save workflow, as their owner."""

from __future__ import annotations

import base64
from typing import Any

from memory_tools import MemoryServices
from memory_tools.access import Caller
from memory_tools.ingest.save import AssetSaver, SaveRequest

from ..pictures import picture

USER = frozenset({"read", "write", "destructive"})


async def save_picture(services: MemoryServices, person: Any, seed: int, **fields: Any) -> str:
    """Save picture ``seed`` as ``person`` (a conftest ``Person``); its asset id."""
    caller = Caller(person.email, person.key_id, USER)
    request = SaveRequest(image_base64=base64.b64encode(picture(seed)).decode(), **fields)
    return (await AssetSaver(services).save(caller, request)).asset_id
