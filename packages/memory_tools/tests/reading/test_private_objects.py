"""No stored object can be read anonymously from the S3 bucket (docs/acceptance.md).

An image is saved and embedded through the tools into a real S3 peer (moto's server, which
checks ACLs on anonymous requests), then its original and preview are asked for with plain,
unsigned GETs, as anyone who learnt a key or the bucket's address could: refused. (Listing
is the bucket's policy, set by the operator; moto does not check it.) The signed link the tools hand out opens the preview. The probe itself is
shown able to see an anonymous read: once an ACL makes one object public, the same GET succeeds.
The local store's unsigned requests are refused by the server's ``/objects`` route
(``serving/test_http.py``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import httpx
from fastmcp import Client

from memory_db.testing.s3_peers import S3Peer
from memory_tools import MemoryServices, build_memory_server
from memory_tools.serving.job_worker import job_worker

from ..pictures import b64, picture
from ..tool_calls import call


async def test_no_stored_object_is_readable_without_a_signed_link(
    alice: Any, saving: MemoryServices, moto_peer: S3Peer
) -> None:
    store, bucket = moto_peer.new_store("pv")
    services = replace(saving, store=store, default_api_key=alice.key)
    try:
        async with Client(build_memory_server(services)) as client:
            saved = await call(
                client, "image_asset_save", {"imageBase64": b64(picture(41)), "title": "Dock"}
            )
            await job_worker(services).drain()
            shown = await call(
                client, "image_asset_get", {"assetId": saved["assetId"], "includePreview": True}
            )
    finally:
        await store.close()
    keys = sorted(
        item["Key"] for item in moto_peer.client().list_objects_v2(Bucket=bucket)["Contents"]
    )
    assert len(keys) == 2 and {key.rsplit("/", 1)[1] for key in keys} == {
        "original.png",
        "preview.webp",
    }
    base = f"{moto_peer.endpoint_url}/{bucket}"
    async with httpx.AsyncClient(timeout=10) as http:
        for key in keys:
            assert (await http.get(f"{base}/{key}")).status_code == 403, key
        signed = await http.get(shown["preview"]["url"])
        assert signed.status_code == 200 and signed.content[8:12] == b"WEBP"
        # The probe can see an anonymous read: a public ACL (which our store never sets) opens it.
        moto_peer.client().put_object_acl(Bucket=bucket, Key=keys[0], ACL="public-read")
        assert (await http.get(f"{base}/{keys[0]}")).status_code == 200
