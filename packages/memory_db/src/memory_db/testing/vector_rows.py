"""One stored vector of a test library, with the metadata a test rarely cares about."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from memory_db.vectors import VectorRecord


def vector_row(
    asset_id: str,
    vector: Iterable[float],
    *,
    object_id: str | None = None,
    representation: str = "visual",
    project_id: str | None = None,
    model: str = "local-hash-v1",
    created_at: datetime | None = None,
) -> VectorRecord:
    """``vector`` as the ``representation`` of ``asset_id``: an uploaded PNG, in no folder.

    ``object_id``: the asset's object (``aob_`` and the id's body when not given).
    """
    return VectorRecord(
        asset_id=asset_id,
        object_id=object_id if object_id is not None else "aob_" + asset_id[4:],
        project_id=project_id,
        folder_id=None,
        representation=representation,
        model=model,
        mime_type="image/png",
        source_kind="upload",
        created_at=created_at if created_at is not None else datetime.now(UTC),
        embedding=[float(x) for x in vector],
    )
