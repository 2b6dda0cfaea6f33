"""Capture time and camera over MCP (docs/tools.md): saved from EXIF, shown by get, filtered
and sorted by list and search, locations kept only when the operator says so, and backfilled
for older images by the ``capture`` job (``image_asset_enrich`` / ``memory-server enrich``)."""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from fastmcp import Client
from sqlalchemy import text

from memory_tools import MemoryServices, build_memory_server
from memory_tools.jobs.worker import WorkerConfig
from memory_tools.operations.enrich import enrich_vault
from memory_tools.serving.job_worker import job_worker

from ..ingest.exif_corpus import with_fields
from ..tool_calls import call, error

FAST = WorkerConfig(batch_size=8, poll_seconds=0.2, retry_base_seconds=0.01, retry_max_seconds=0.02)
GPS = {
    "exif-ifd3-GPSLatitudeRef": "N",
    "exif-ifd3-GPSLatitude": "48/1 51/1 30/1",
    "exif-ifd3-GPSLongitudeRef": "E",
    "exif-ifd3-GPSLongitude": "2/1 17/1 40/1",
}


def _photo(day: int, *, offset: str | None = None, seed: int = 0, gps: bool = False) -> str:
    fields = {
        "exif-ifd0-Make": "FUJIFILM",
        "exif-ifd0-Model": f"X-T{seed + 2}",
        "exif-ifd2-DateTimeOriginal": f"2023:03:{day:02d} 08:00:00",
        "exif-ifd0-ImageDescription": f"seed {seed} day {day}",  # distinct bytes
    }
    if offset is not None:
        fields["exif-ifd2-OffsetTimeOriginal"] = offset
    if gps:
        fields |= GPS
    return base64.b64encode(with_fields(fields, orientation=3).jpegsave_buffer(Q=80)).decode()


def _undated(seed: int) -> str:
    image = with_fields({"exif-ifd0-ImageDescription": f"undated {seed}"})
    return base64.b64encode(image.jpegsave_buffer(Q=80)).decode()


def _client(services: MemoryServices, key: str) -> Client[Any]:
    return Client(build_memory_server(replace(services, default_api_key=key)))


async def _save(c: Client[Any], image: str, title: str) -> str:
    saved = await call(c, "image_asset_save", {"imageBase64": image, "title": title})
    return saved["assetId"]


async def test_save_get_filter_and_sort_by_capture_time(
    services: MemoryServices, make_person: Callable[..., Any]
) -> None:
    alice = await make_person("alice@example.com")
    async with _client(services, alice.key) as c:
        march_3 = await _save(c, _photo(3, offset="+09:00", gps=True), "Tokyo")
        march_20 = await _save(c, _photo(20, seed=1), "Paris")
        undated = await _save(c, _undated(1), "Scan")
        march_10 = await _save(c, _photo(10, seed=2), "Rome")
        got = await call(c, "image_asset_get", {"assetId": march_3})
        assert got["takenAt"] == "2023-03-03T08:00:00+09:00"
        assert got["camera"] == {"make": "FUJIFILM", "model": "X-T2"}
        assert got["orientation"] == 3
        assert got["location"] is None  # ASSET_KEEP_LOCATION is off by default
        naive = await call(c, "image_asset_get", {"assetId": march_20})
        assert naive["takenAt"] == "2023-03-20T08:00:00"  # no zone: the camera gave none
        blank = await call(c, "image_asset_get", {"assetId": undated})
        assert (blank["takenAt"], blank["camera"], blank["location"]) == (None, None, None)

        async def listed(**arguments: Any) -> list[str]:
            page = await call(c, "image_asset_list", arguments)
            return [item["assetId"] for item in page["items"]]

        assert await listed(order="taken") == [march_20, march_10, march_3, undated]
        # Paging by capture time meets each asset once, the undated one last.
        first = await call(c, "image_asset_list", {"order": "taken", "limit": 3})
        rest = await call(
            c, "image_asset_list", {"order": "taken", "limit": 3, "cursor": first["nextCursor"]}
        )
        assert [i["assetId"] for i in rest["items"]] == [undated]
        assert rest["nextCursor"] is None
        window = {"takenAfter": "2023-03-05T00:00:00Z", "takenBefore": "2023-03-15T00:00:00Z"}
        assert await listed(**window) == [march_10]
        assert await listed(takenBefore="2023-03-15T00:00:00Z", order="taken") == [
            march_10,
            march_3,
        ]
        assert await listed(takenAfter="2023-03-15T00:00:00Z") == [march_20]
        # The offset counts: 08:00+09:00 on the 3rd is 23:00 UTC on the 2nd.
        assert await listed(
            takenAfter="2023-03-02T23:00:00Z", takenBefore="2023-03-03T00:00:00Z"
        ) == [march_3]
        await job_worker(services, FAST).drain()  # search finds ready images
        found = await call(c, "image_asset_search", {"query": "Rome Tokyo Paris Scan", **window})
        assert {r["assetId"] for r in found["results"]} == {march_10}
        refused = await error(c, "image_asset_list", {"takenAfter": "2023-03-05"})
        assert "takenAfter" in refused and "invalid_input" in refused
        bad_cursor = await error(
            c, "image_asset_list", {"order": "newest", "cursor": first["nextCursor"]}
        )
        assert "belongs to order 'taken'" in bad_cursor


async def test_the_location_is_stored_only_with_asset_keep_location(
    services: MemoryServices, make_person: Callable[..., Any]
) -> None:
    alice = await make_person("alice@example.com")
    keeping = replace(
        services, settings=services.settings.model_copy(update={"asset_keep_location": True})
    )
    async with _client(keeping, alice.key) as c:
        kept = await _save(c, _photo(4, gps=True), "Kept")
        got = await call(c, "image_asset_get", {"assetId": kept})
        assert got["location"] == {"latitude": 48.858333, "longitude": 2.294444}
    async with _client(services, alice.key) as c:
        dropped = await _save(c, _photo(5, gps=True), "Dropped")
    async with services.database.engine.connect() as conn:
        rows = dict(
            (await conn.execute(text("SELECT id, latitude FROM mem_assets"))).all()  # type: ignore[arg-type]
        )
    assert rows[kept] == 48.858333 and rows[dropped] is None


async def test_the_capture_job_backfills_older_images_idempotently(
    services: MemoryServices, make_person: Callable[..., Any]
) -> None:
    alice = await make_person("alice@example.com")
    async with _client(services, alice.key) as c:
        older = [await _save(c, _photo(day, seed=day), f"Old {day}") for day in (6, 7)]
    # As saved before capture fields existed.
    async with services.database.engine.begin() as conn:
        await conn.execute(
            text("UPDATE mem_assets SET taken_at = NULL, camera_make = NULL, orientation = NULL")
        )
    seen: list[tuple[int, int]] = []
    report = await enrich_vault(
        services, alice.email, "Library", ["capture"], progress=lambda d, t: seen.append((d, t))
    )
    assert (report.assets, report.queued, seen) == (2, 2, [(2, 2)])
    await job_worker(services, FAST).drain()
    async with _client(services, alice.key) as c:
        got = await call(c, "image_asset_get", {"assetId": older[0]})
        assert got["takenAt"] == "2023-03-06T08:00:00"
        assert got["camera"] == {"make": "FUJIFILM", "model": "X-T8"}
        # Again over MCP: the same fields, one more done job.
        again = await call(c, "image_asset_enrich", {"assetId": older[0], "what": ["capture"]})
        assert again["queued"] == ["capture"]
    await job_worker(services, FAST).drain()
    async with _client(services, alice.key) as c:
        rerun = await call(c, "image_asset_get", {"assetId": older[0]})
        fields = ("takenAt", "camera", "orientation", "location", "updatedAt")
        assert {f: rerun[f] for f in fields} == {f: got[f] for f in fields}
    async with services.database.engine.connect() as conn:
        done = (
            await conn.execute(
                text(
                    "SELECT count(*) FROM mem_asset_embedding_jobs WHERE kind = 'capture' AND status = 'done'"
                )
            )
        ).scalar()
    assert done == 3
