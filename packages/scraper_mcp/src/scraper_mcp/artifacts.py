"""The artifact API of the scraper tools: store what a tool fetched as the caller's artifact.

``store_artifact(services, caller, data, *, source_kind, source_ref) -> ArtifactView`` validates
the bytes exactly as a save does, stores them privately as an artifact owned by the caller with
an expiry (``SCRAPER_ARTIFACT_TTL_SECONDS``) and returns its ``artifactId``, MIME type, size,
dimensions and ``expiresAt``. ``image_asset_save`` with that ``artifactId`` saves it.

Artifacts are rows and bytes of the asset plane, which the save handoff and the worker's sweep
in ``memory_tools`` also read, so the implementation lives in
:mod:`memory_tools.workflows.artifacts`;
scraper tools import it from here.
"""

from memory_tools.mcp.for_scrapers import ArtifactSourceKind, ArtifactView, store_artifact

__all__ = ["ArtifactSourceKind", "ArtifactView", "store_artifact"]
