"""Visible assets are read as plain rows: the same records the ORM gave, none held by the session.

``AssetRepository`` lists, finds, gets and pages the trash from one set of columns
(``_visible``) and builds each record from the row itself. The reference here is the ORM's
reading of the same rows (``asset_record`` of the loaded objects), so every field, the JSON
and array ones included, must come back as it did.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from sqlalchemy import event, select, text

from memory_db import Database
from memory_db.repositories import AssetFilter, StoredAsset
from memory_db.repositories._base import asset_object_join
from memory_db.repositories.assets import asset_record
from memory_db.schema import ApiKey, Asset, AssetObject
from memory_db.testing.library_rows import fill_library
from memory_db.unit_of_work import session_of

OWNER = "rows@example.com"


def _reference(asset: Asset, stored: AssetObject) -> StoredAsset:
    """What the ORM reading of the same rows gave."""
    return StoredAsset(
        asset=asset_record(asset),
        mime_type=stored.mime_type,
        width=stored.width,
        height=stored.height,
        bytes=stored.bytes,
        preview_storage_key=stored.preview_storage_key,
        object_status=stored.status,
        preview_sha256=stored.preview_sha256,
        storage_key=stored.storage_key,
    )


async def test_listed_found_got_and_trashed_assets_are_the_orm_records_held_by_no_session(
    database: Database,
) -> None:
    [library] = await fill_library(database, OWNER, {"Library": 100}, projects_per_vault=1)
    async with database.unit_of_work() as uow:
        # Every kind of value a record carries: JSON objects and arrays, times, numbers, NULLs.
        await session_of(uow).execute(
            text(
                'UPDATE mem_assets SET metadata = \'{"lens": {"mm": 35}, "n": [1, 2]}\', '
                'source_ref = \'{"page": "https://example.com/a"}\', '
                'ocr = \'{"engine": "tesseract", "words": 3}\', ocr_text = \'three words here\', '
                "taken_at = created_at - interval '3 days', taken_offset_minutes = 120, "
                "camera_make = 'Make', latitude = 48.8566, longitude = 2.3522, orientation = 6, "
                "description = 'a description', original_file_name = 'photo.jpg' "
                "WHERE id IN (SELECT id FROM mem_assets ORDER BY id LIMIT 30)"
            )
        )
    loaded: list[object] = []

    def count_load(target: object, _context: object) -> None:
        loaded.append(target)

    event.listen(Asset, "load", count_load)
    event.listen(AssetObject, "load", count_load)
    try:
        async with database.unit_of_work() as uow:
            listed = await uow.assets.list_visible(
                [library.scope], AssetFilter(), newest_first=True, limit=1_000
            )
            found = await uow.assets.find_visible([library.scope], AssetFilter(), limit=1_000)
            got = await uow.assets.get_visible([library.scope], listed[0].asset.id)
            trashed = await uow.assets.trash(
                [library.scope], window=timedelta(days=30), limit=1_000
            )
    finally:
        event.remove(Asset, "load", count_load)
        event.remove(AssetObject, "load", count_load)
    # Plain rows: no ORM object was built (each was copied into a record again).
    assert loaded == []
    async with database.unit_of_work() as uow:
        rows = (
            await session_of(uow).execute(
                select(Asset, AssetObject, ApiKey.label)
                .join(AssetObject, asset_object_join())
                .outerjoin(ApiKey, ApiKey.id == Asset.saved_by_key_id)
            )
        ).all()
        reference = {asset.id: (_reference(asset, stored), label) for asset, stored, label in rows}

    assert len(listed) > 80 and sorted(r.asset.id for r in listed) == sorted(
        r.asset.id for r in found
    )
    assert any(r.asset.ocr is not None and r.asset.metadata for r in listed)
    for record in [*listed, *found]:
        assert record == reference[record.asset.id][0]
    assert got is not None
    assert got == replace(reference[got.asset.id][0], saved_by_label=reference[got.asset.id][1])
    assert trashed, "the library has deleted assets"
    for entry in trashed:
        assert entry.stored == reference[entry.stored.asset.id][0]
        assert entry.deleted_at is not None
    # Each record's JSON values are its own.
    first = next(r for r in listed if r.asset.metadata)
    again = next(r for r in found if r.asset.id == first.asset.id)
    assert first.asset.metadata is not again.asset.metadata
    assert first.asset.tags is not again.asset.tags
