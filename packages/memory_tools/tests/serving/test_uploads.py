"""Direct uploads: initiate, PUT to the signed URL, finalise — over a real HTTP server.

The replay tests run against the local store and both S3 peers (moto, s3rver): a finished
upload's link must never change a validated original, and after one worker sweep the bytes in
the store per namespace are exactly what ``used_bytes`` accounts for.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import pyvips
from sqlalchemy import text

from memory_db.embedding import LocalEmbedder
from memory_db.storage import S3AssetObjectStore
from memory_db.testing.s3_peers import S3Peer
from memory_tools import MemoryServices
from memory_tools.operations import admin
from memory_tools.serving.app import build_http_server
from memory_tools.serving.job_worker import job_worker


def _png(seed: int = 1) -> bytes:
    xyz = pyvips.Image.xyz(32, 24)
    red = ((xyz[0] * (seed + 3)) % 256).cast("uchar")
    return (
        red.bandjoin([red, (xyz[1] * 9 % 256).cast("uchar")])
        .copy(interpretation="srgb")
        .pngsave_buffer()
    )


def _jpeg() -> bytes:
    return pyvips.Image.xyz(16, 16)[0].cast("uchar").jpegsave_buffer()


@pytest.fixture
def uploading(services: MemoryServices) -> MemoryServices:
    return replace(services, embedder=LocalEmbedder())


async def _state(services: MemoryServices, owner: str) -> tuple[int, int, int]:
    async with services.database.engine.connect() as conn:
        row = (
            await conn.execute(
                text(
                    "SELECT used_bytes, reserved_bytes, (SELECT count(*) FROM mem_assets "
                    "WHERE owner_identity = :o) FROM mem_asset_namespaces WHERE owner_identity = :o"
                ),
                {"o": owner},
            )
        ).one()
    return int(row[0]), int(row[1]), int(row[2])


def _files(services: MemoryServices) -> list[str]:
    root = services.store.root  # type: ignore[attr-defined]
    return (
        sorted(p.name for p in root.rglob("*") if p.is_file() and not p.name.endswith(".json"))
        if root.exists()
        else []
    )


async def _upload(
    http: httpx.AsyncClient,
    base: str,
    key: str,
    data: bytes,
    content_type: str = "image/png",
    **extra: Any,
) -> httpx.Response:
    ticket = await _start(http, base, key, len(data), content_type, **extra)
    put = await _put(http, base, ticket, data)
    assert put.status_code == 200, put.text
    return await _complete(http, base, key, ticket)


async def _start(
    http: httpx.AsyncClient,
    base: str,
    key: str,
    length: int,
    content_type: str = "image/png",
    **extra: Any,
) -> dict[str, Any]:
    started = await http.post(
        f"{base}/uploads",
        json={"contentType": content_type, "contentLength": length, **extra},
        headers={"Authorization": f"Bearer {key}"},
    )
    assert started.status_code == 201, started.text
    return started.json()


def _local(base: str, url: str) -> str:
    """Links of the local store name http://testserver (the fixture's public base): reach the
    test server instead. S3 links go to the peer as they are."""
    parsed = httpx.URL(url)
    if parsed.host != "testserver":
        return url
    return str(httpx.URL(base).join(parsed.raw_path.decode()))


async def _put(
    http: httpx.AsyncClient, base: str, ticket: dict[str, Any], data: bytes
) -> httpx.Response:
    return await http.request(
        ticket["method"], _local(base, ticket["url"]), content=data, headers=ticket["headers"]
    )


async def _complete(
    http: httpx.AsyncClient, base: str, key: str, ticket: dict[str, Any]
) -> httpx.Response:
    return await http.post(
        _local(base, ticket["completeUrl"]), json={}, headers={"Authorization": f"Bearer {key}"}
    )


async def test_upload_initiate_put_and_complete(
    uploading: MemoryServices, serve_http: Callable[..., Any], make_key: Callable[..., Any]
) -> None:
    key = await make_key("up@example.com")
    data = _png()
    async with serve_http(build_http_server(uploading)) as mcp_url, httpx.AsyncClient() as http:
        base = mcp_url.removesuffix("/mcp")
        done = await _upload(http, base, key, data, title="Uploaded gradient", tags=["Up"])
        assert done.status_code == 200, done.text
        asset = done.json()
        assert asset["assetId"].startswith("ast_") and asset["embeddingStatus"] == "pending"
        assert (asset["width"], asset["height"], asset["bytes"]) == (32, 24, len(data))
        assert len(asset["jobIds"]) == 2
        used, reserved, assets = await _state(uploading, "up@example.com")
        assert used > len(data) and reserved == 0 and assets == 1
        assert sorted(_files(uploading)) == ["original.png", "preview.webp"]
        # The same bytes again: a second asset sharing the stored object, nothing new stored.
        again = await _upload(http, base, key, data, title="Other title")
        assert again.json()["objectId"] == asset["objectId"] and again.json()["deduplicated"]
        assert sorted(_files(uploading)) == ["original.png", "preview.webp"]


async def test_an_upload_keeps_its_file_name_and_is_titled_after_it(
    uploading: MemoryServices, serve_http: Callable[..., Any], make_key: Callable[..., Any]
) -> None:
    key = await make_key("named@example.com")
    async with serve_http(build_http_server(uploading)) as mcp_url, httpx.AsyncClient() as http:
        base = mcp_url.removesuffix("/mcp")
        done = await _upload(http, base, key, _png(5), fileName="/tmp/x/Harbour_at_dusk.PNG")
        assert done.status_code == 200, done.text
        refused = await http.post(
            f"{base}/uploads",
            json={"contentType": "image/png", "contentLength": 10, "fileName": "a\x00b.png"},
            headers={"Authorization": f"Bearer {key}"},
        )
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "invalid_input"
    assert "fileName" in refused.json()["error"]["message"]
    async with uploading.database.unit_of_work() as uow:
        asset = await uow.assets.get_for_owner("named@example.com", done.json()["assetId"])
    assert asset is not None
    assert (asset.original_file_name, asset.title) == ("Harbour_at_dusk.PNG", "Harbour_at_dusk")
    assert asset.metadata["titleSource"] == "derived"


async def test_a_lying_upload_is_refused_and_its_bytes_removed(
    uploading: MemoryServices, serve_http: Callable[..., Any], make_key: Callable[..., Any]
) -> None:
    key = await make_key("liar@example.com")
    async with serve_http(build_http_server(uploading)) as mcp_url, httpx.AsyncClient() as http:
        base = mcp_url.removesuffix("/mcp")
        refused = await _upload(http, base, key, _jpeg(), content_type="image/png")
    assert refused.status_code == 422
    assert refused.json()["error"]["code"] == "invalid_image"
    assert "image/jpeg, not the declared image/png" in refused.json()["error"]["message"]
    assert _files(uploading) == []
    assert await _state(uploading, "liar@example.com") == (0, 0, 0)


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"contentType": "image/svg+xml", "contentLength": 10}, 422, "invalid_input"),
        ({"contentType": "image/png", "contentLength": 0}, 422, "invalid_input"),
        ({"contentType": "image/png", "contentLength": 10**12}, 422, "invalid_input"),
        ({"contentType": "image/png", "contentLength": 10, "extra": 1}, 422, "invalid_input"),
        ({"contentType": "image/png", "contentLength": 10, "vault": "Nope"}, 404, "not_found"),
        ({"contentType": "image/png", "contentLength": 5_000_000}, 507, "quota_exceeded"),
    ],
)
async def test_bad_initiations_are_refused_and_reserve_nothing(
    uploading: MemoryServices,
    serve_http: Callable[..., Any],
    database: Any,
    make_key: Callable[..., Any],
    body: dict[str, Any],
    status: int,
    code: str,
) -> None:
    await admin.create_identity(database, "small@example.com", 1_000_000)
    key = await make_key("small@example.com")
    async with serve_http(build_http_server(uploading)) as mcp_url, httpx.AsyncClient() as http:
        base = mcp_url.removesuffix("/mcp")
        answer = await http.post(
            f"{base}/uploads", json=body, headers={"Authorization": f"Bearer {key}"}
        )
    assert answer.status_code == status, answer.text
    assert answer.json()["error"]["code"] == code
    assert await _state(uploading, "small@example.com") == (0, 0, 0)


async def test_uploads_need_a_key_and_belong_to_their_caller(
    uploading: MemoryServices, serve_http: Callable[..., Any], make_key: Callable[..., Any]
) -> None:
    owner = await make_key("owner@example.com")
    other = await make_key("other@example.com")
    async with serve_http(build_http_server(uploading)) as mcp_url, httpx.AsyncClient() as http:
        base = mcp_url.removesuffix("/mcp")
        anonymous = await http.post(
            f"{base}/uploads", json={"contentType": "image/png", "contentLength": 5}
        )
        assert anonymous.status_code == 401
        started = await http.post(
            f"{base}/uploads",
            json={"contentType": "image/png", "contentLength": 5},
            headers={"Authorization": f"Bearer {owner}"},
        )
        upload_id = started.json()["uploadId"]
        early = await http.post(
            f"{base}/uploads/{upload_id}/complete",
            json={},
            headers={"Authorization": f"Bearer {owner}"},
        )
        assert (
            early.status_code == 422 and "nothing was uploaded" in early.json()["error"]["message"]
        )
        stolen = await http.post(
            f"{base}/uploads/{upload_id}/complete",
            json={},
            headers={"Authorization": f"Bearer {other}"},
        )
        assert stolen.status_code == 404 and stolen.json()["error"]["code"] == "not_found"


# --- absolute completeUrl ------------------------------------------------------------------


async def test_complete_url_is_absolute_like_url(
    uploading: MemoryServices, serve_http: Callable[..., Any], make_key: Callable[..., Any]
) -> None:
    key = await make_key("absolute@example.com")
    async with serve_http(build_http_server(uploading)) as mcp_url, httpx.AsyncClient() as http:
        base = mcp_url.removesuffix("/mcp")
        ticket = await _start(http, base, key, 10)
        # Built without a bootstrap, the base is where the request arrived.
        assert ticket["completeUrl"] == f"{base}/uploads/{ticket['uploadId']}/complete"
    configured = replace(uploading, public_base_url="http://testserver")
    async with serve_http(build_http_server(configured)) as mcp_url, httpx.AsyncClient() as http:
        base = mcp_url.removesuffix("/mcp")
        ticket = await _start(http, base, key, 10)
        url, complete = httpx.URL(ticket["url"]), httpx.URL(ticket["completeUrl"])
        assert (complete.scheme, complete.host, complete.port) == (url.scheme, url.host, url.port)
        assert complete.path == f"/uploads/{ticket['uploadId']}/complete"


# --- single-use links ----------------------------------------------------------------------


def _other_bytes(length: int) -> bytes:
    """Bytes of exactly ``length`` that are not an image (what a hostile replay sends)."""
    page = b"<html><script>document.title='replayed'</script></html>"
    return (page * (length // len(page) + 1))[:length]


async def test_an_open_upload_link_takes_one_set_of_bytes_into_staging(
    uploading: MemoryServices, serve_http: Callable[..., Any], make_key: Callable[..., Any]
) -> None:
    key = await make_key("once@example.com")
    data = _png(5)
    async with serve_http(build_http_server(uploading)) as mcp_url, httpx.AsyncClient() as http:
        base = mcp_url.removesuffix("/mcp")
        ticket = await _start(http, base, key, len(data))
        url = _local(base, ticket["url"])
        assert "/uploads/aur_" in url and "/objects/aob_" not in url  # a staging key
        bad_type = await http.put(url, content=data, headers={"Content-Type": "text/html"})
        assert bad_type.status_code == 403
        longer = await http.put(url, content=data + b"x", headers={"Content-Type": "image/png"})
        assert longer.status_code == 403  # the signed length does not match
        assert _files(uploading) == []
        assert (await _put(http, base, ticket, data)).status_code == 200
        assert (await _put(http, base, ticket, data)).status_code == 200  # a retried PUT
        other = await _put(http, base, ticket, _other_bytes(len(data)))
        assert other.status_code == 409  # the link has delivered its bytes
        done = await _complete(http, base, key, ticket)
        assert done.status_code == 200, done.text
        assert sorted(_files(uploading)) == ["original.png", "preview.webp"]  # staging removed
        after = await _put(http, base, ticket, data)
        assert after.status_code == 403 and "used or has expired" in after.text


@pytest.fixture(params=["local", "moto", "s3rver"])
async def replaying(
    request: pytest.FixtureRequest, uploading: MemoryServices
) -> AsyncIterator[tuple[MemoryServices, Callable[[str], dict[str, bytes]]]]:
    """Services on one store, and an independent reader of a namespace's stored bytes."""
    kind = request.param
    if kind == "local":
        root: Path = uploading.store.root  # type: ignore[attr-defined]
        env = uploading.settings.asset_storage_env_prefix

        def on_disk(namespace: str) -> dict[str, bytes]:
            base = root / env / "tenants" / namespace
            return {
                path.relative_to(root).as_posix(): path.read_bytes()
                for path in (base.rglob("*") if base.exists() else [])
                if path.is_file() and not path.name.endswith((".json", ".tmp"))
            }

        yield uploading, on_disk
        return
    peer: S3Peer = request.getfixturevalue(f"{kind}_peer")
    store, bucket = peer.new_store("up")
    client = peer.client()

    def in_bucket(namespace: str) -> dict[str, bytes]:
        prefix = f"{uploading.settings.asset_storage_env_prefix}/tenants/{namespace}/"
        listed = client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
        return {
            item["Key"]: client.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
            for item in listed
        }

    try:
        yield replace(uploading, store=store), in_bucket
    finally:
        await store.close()


async def _accounts(services: MemoryServices, owner: str) -> dict[str, Any]:
    async with services.database.engine.connect() as conn:
        namespace, used, reserved = (
            await conn.execute(
                text(
                    "SELECT namespace_id, used_bytes, reserved_bytes FROM mem_asset_namespaces "
                    "WHERE owner_identity = :o"
                ),
                {"o": owner},
            )
        ).one()
        vectors = await conn.scalar(
            text(
                "SELECT coalesce(sum((metadata->>'vectorBytes')::bigint), 0) FROM mem_assets "
                "WHERE owner_identity = :o"
            ),
            {"o": owner},
        )
        rows = (
            await conn.execute(
                text(
                    "SELECT storage_key, sha256, preview_storage_key, preview_sha256 "
                    "FROM mem_asset_objects WHERE owner_identity = :o AND status <> 'deleted'"
                ),
                {"o": owner},
            )
        ).all()
    hashes = {row[0]: row[1] for row in rows} | {row[2]: row[3] for row in rows}
    return {
        "namespace": namespace,
        "object_bytes": int(used) - int(vectors),
        "reserved": int(reserved),
        "hashes": hashes,
    }


async def test_a_finished_upload_link_never_changes_a_byte_and_nothing_stays_unaccounted(
    replaying: tuple[MemoryServices, Callable[[str], dict[str, bytes]]],
    serve_http: Callable[..., Any],
    database: Any,
    make_key: Callable[..., Any],
) -> None:
    services, stored = replaying
    await admin.create_identity(database, "small@example.com", 100_000)
    owners = {"big@example.com": await make_key("big@example.com")}
    owners["small@example.com"] = await make_key("small@example.com")
    big, small = owners["big@example.com"], owners["small@example.com"]
    original = _png(7)
    tickets: dict[str, tuple[str, dict[str, Any], int]] = {}
    async with serve_http(build_http_server(services)) as mcp_url, httpx.AsyncClient() as http:
        base = mcp_url.removesuffix("/mcp")
        for outcome, key, data, content_type in (
            ("completed", big, original, "image/png"),
            ("deduplicated", big, original, "image/png"),
            ("refused", small, _jpeg(), "image/png"),  # the bytes are not the declared type
            ("expired", big, _png(8), "image/png"),
        ):
            ticket = await _start(http, base, key, len(data), content_type)
            assert (await _put(http, base, ticket, data)).status_code == 200
            tickets[outcome] = (key, ticket, len(data))
            if outcome != "expired":
                done = await _complete(http, base, key, ticket)
                expected = 422 if outcome == "refused" else 200
                assert done.status_code == expected, done.text
                if outcome == "deduplicated":
                    assert done.json()["deduplicated"] is True
        async with services.database.engine.begin() as conn:
            await conn.execute(
                text(
                    "UPDATE mem_asset_upload_reservations SET expires_at = now() - interval '1 s' "
                    "WHERE id = :i"
                ),
                {"i": tickets["expired"][1]["uploadId"]},
            )
        # Every link again, with other bytes of the signed length.
        replays = {
            outcome: (await _put(http, base, ticket, _other_bytes(length))).status_code
            for outcome, (_key, ticket, length) in tickets.items()
        }
        await job_worker(services).sweep()
        # Completing again still answers with the asset the validated bytes made.
        again = await _complete(http, base, big, tickets["completed"][1])
        assert again.status_code == 200 and again.json()["replayed"] is True
    for owner in owners:
        accounts = await _accounts(services, owner)
        present = stored(accounts["namespace"])
        # Every stored key belongs to an object row and hashes to what the database recorded.
        assert {key: hashlib.sha256(body).hexdigest() for key, body in present.items()} == accounts[
            "hashes"
        ], owner
        # The bytes in the store are exactly the bytes used_bytes counts (vectors aside).
        assert sum(len(body) for body in present.values()) == accounts["object_bytes"], owner
        assert accounts["reserved"] == 0
    originals = [
        body
        for body in stored((await _accounts(services, "big@example.com"))["namespace"]).values()
        if body == original
    ]
    assert len(originals) == 1  # the validated original, unchanged; the dedupe wrote nothing
    if isinstance(services.store, S3AssetObjectStore):
        # The bucket takes a presigned PUT until the link expires; it lands in staging only.
        assert set(replays.values()) == {200}
    else:
        # The local route asks the database: no open upload, no write.
        assert replays == dict.fromkeys(tickets, 403)


async def test_concurrent_completions_of_one_upload_store_it_once_and_agree(
    uploading: MemoryServices, serve_http: Callable[..., Any], make_key: Callable[..., Any]
) -> None:
    key = await make_key("racer@example.com")
    data = _png(5)
    async with serve_http(build_http_server(uploading)) as mcp_url, httpx.AsyncClient() as http:
        base = mcp_url.removesuffix("/mcp")
        ticket = await _start(http, base, key, len(data), title="Raced")
        assert (await _put(http, base, ticket, data)).status_code == 200
        async with anyio.create_task_group() as group:
            answers: list[httpx.Response] = []

            async def complete() -> None:
                answers.append(await _complete(http, base, key, ticket))

            for _ in range(6):
                group.start_soon(complete)
    assert [a.status_code for a in answers] == [200] * 6, [a.text for a in answers]
    assert len({a.json()["assetId"] for a in answers}) == 1
    assert sum(not a.json()["replayed"] for a in answers) == 1
    used, reserved, assets = await _state(uploading, "racer@example.com")
    assert reserved == 0 and assets == 1 and used > len(data)
    assert sorted(_files(uploading)) == ["original.png", "preview.webp"]


async def test_a_refused_upload_does_not_use_up_its_idempotency_key(
    uploading: MemoryServices, serve_http: Callable[..., Any], make_key: Callable[..., Any]
) -> None:
    key = await make_key("retry@example.com")
    good = _png(6)
    bad = good[:40] + bytes(len(good) - 40)  # a PNG header, then zeros
    async with serve_http(build_http_server(uploading)) as mcp_url, httpx.AsyncClient() as http:
        base = mcp_url.removesuffix("/mcp")
        first = await _start(http, base, key, len(good), idempotencyKey="idem-7")
        assert (await _put(http, base, first, bad)).status_code == 200
        refused = await _complete(http, base, key, first)
        assert refused.status_code == 422 and refused.json()["error"]["code"] == "invalid_image"
        # The same key again: a new upload (a new id and link), not "already released".
        second = await _start(http, base, key, len(good), idempotencyKey="idem-7", title="Fixed")
        assert second["uploadId"] != first["uploadId"] and second["url"] != first["url"]
        # The old attempt's link stays dead; the new one takes the corrected bytes.
        assert (await _put(http, base, first, good)).status_code == 403
        assert (await _put(http, base, second, good)).status_code == 200
        done = await _complete(http, base, key, second)
        assert done.status_code == 200, done.text
        # Once it succeeded, the key is used: completing again replays, a new start conflicts.
        replayed = await _complete(http, base, key, second)
        assert replayed.json()["assetId"] == done.json()["assetId"] and replayed.json()["replayed"]
        for length in (len(good), 99):
            other = await http.post(
                f"{base}/uploads",
                json={
                    "contentType": "image/png",
                    "contentLength": length,
                    "idempotencyKey": "idem-7",
                },
                headers={"Authorization": f"Bearer {key}"},
            )
            assert other.status_code == 409 and other.json()["error"]["code"] == "conflict"
    assert (await _state(uploading, "retry@example.com"))[1:] == (0, 1)


async def test_completion_finds_the_vault_the_upload_was_started_in(
    uploading: MemoryServices, serve_http: Callable[..., Any], make_key: Callable[..., Any]
) -> None:
    key = await make_key("worker@example.com")
    other = await make_key("other@example.com")
    await admin.create_vault(uploading.database, "worker@example.com", "Work")
    data = _png(8)
    async with serve_http(build_http_server(uploading)) as mcp_url, httpx.AsyncClient() as http:
        base = mcp_url.removesuffix("/mcp")
        ticket = await _start(http, base, key, len(data), vault="Work")
        assert (await _put(http, base, ticket, data)).status_code == 200
        # Someone else's key cannot find it, with or without naming the vault.
        for body in ({}, {"vault": "worker@example.com/Work"}):
            foreign = await http.post(
                _local(base, ticket["completeUrl"]),
                json=body,
                headers={"Authorization": f"Bearer {other}"},
            )
            assert foreign.status_code == 404, foreign.text
        # Naming another vault is still "not found"; naming none uses the upload's own.
        wrong = await http.post(
            _local(base, ticket["completeUrl"]),
            json={"vault": "Library"},
            headers={"Authorization": f"Bearer {key}"},
        )
        assert wrong.status_code == 404
        done = await _complete(http, base, key, ticket)  # body {}
        assert done.status_code == 200, done.text
        assert done.json()["vault"] == "Work"


async def test_a_completion_keeps_its_claim_while_it_works_and_a_dead_claim_lapses(
    uploading: MemoryServices,
    serve_http: Callable[..., Any],
    make_key: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from memory_db.repositories import QuotaRepository
    from memory_tools.ingest import uploads

    # Waits for events, not for time: every claim attempt is recorded, and the test moves on
    # when the attempts it waits for have happened. The claim lasts 3 s and is renewed every
    # 0.1 s, so only an event loop stalled for most of 3 s could lose it.
    claim_seconds = 3.0
    monkeypatch.setattr(uploads, "_CLAIM_SECONDS", claim_seconds)
    monkeypatch.setattr(uploads, "_RENEW_SECONDS", 0.1)
    attempts: list[tuple[float, str, bool]] = []  # (loop time, token, claimed)
    attempted = anyio.Event()
    claim = QuotaRepository.claim_completion

    async def recorded(
        self: QuotaRepository, owner: str, reservation_id: str, *, token: str, seconds: float
    ) -> bool:
        nonlocal attempted
        claimed = await claim(self, owner, reservation_id, token=token, seconds=seconds)
        attempts.append((anyio.current_time(), token, claimed))
        attempted.set()
        attempted = anyio.Event()
        return claimed

    async def until(condition: Callable[[], bool]) -> None:
        with anyio.fail_after(60):  # generous: a loaded machine only makes this slower
            while not condition():
                await attempted.wait()

    monkeypatch.setattr(QuotaRepository, "claim_completion", recorded)
    key = await make_key("claims@example.com")
    data = _png(9)
    admission = uploading.decode_admission
    async with (
        serve_http(build_http_server(uploading)) as mcp_url,
        httpx.AsyncClient(timeout=120) as http,
    ):
        base = mcp_url.removesuffix("/mcp")
        ticket = await _start(http, base, key, len(data))
        assert (await _put(http, base, ticket, data)).status_code == 200
        # A claim whose holder lost the database before it could give it up: it lapses.
        async with uploading.database.unit_of_work() as uow:
            assert await uow.quota.claim_completion(
                "claims@example.com", ticket["uploadId"], token="gone", seconds=1.0
            )
        answers: list[httpx.Response] = []

        async def complete() -> None:
            answers.append(await _complete(http, base, key, ticket))

        def holder() -> str | None:
            """The token of the completion that took the upload over from the dead claim."""
            taken = [token for _at, token, claimed in attempts if claimed and token != "gone"]
            return taken[0] if taken else None

        def refused_after_a_claim_lifetime() -> bool:
            """The second completion was refused later than the holder's first claim lapses."""
            first = next(at for at, token, claimed in attempts if claimed and token == holder())
            return any(
                not claimed and token not in (holder(), "gone") and at > first + claim_seconds
                for at, token, claimed in attempts
            )

        # The decode budget is held, so the completion that takes over waits inside its
        # claim for longer than a claim lasts: it must keep it, so a second one waits.
        async with anyio.create_task_group() as group, admission.admit(admission.budget):
            group.start_soon(complete)
            await until(lambda: holder() is not None)  # the dead claim lapsed and was taken
            group.start_soon(complete)
            await until(refused_after_a_claim_lifetime)
            # Up to here the holder worked; once it has saved, a renewal racing its end is
            # refused (the upload is no longer open), which is not a lost claim.
            working_until = anyio.current_time()
    assert [a.status_code for a in answers] == [200, 200], [a.text for a in answers]
    assert answers[0].json()["assetId"] == answers[1].json()["assetId"]
    assert sorted(a.json()["replayed"] for a in answers) == [False, True]
    # From taking it over on, the holder renewed its claim, never refused, while it waited.
    mine = [(at, claimed) for at, token, claimed in attempts if token == holder()]
    taken = next(at for at, claimed in mine if claimed)
    renewals = [claimed for at, claimed in mine if taken <= at <= working_until]
    assert len(renewals) > 2 and all(renewals), attempts


async def test_concurrent_starts_of_one_owner_all_get_their_link(
    uploading: MemoryServices, serve_http: Callable[..., Any], make_key: Callable[..., Any]
) -> None:
    """Each start inserts its reservation, then locks the owner's namespace: with a lock that
    conflicted with the other inserts' key-share locks, two concurrent starts deadlocked (500)."""
    key = await make_key("busy@example.com")
    answers: list[httpx.Response] = []
    async with serve_http(build_http_server(uploading)) as mcp_url, httpx.AsyncClient() as http:
        base = mcp_url.removesuffix("/mcp")

        async def start() -> None:
            answers.append(
                await http.post(
                    f"{base}/uploads",
                    json={"contentType": "image/png", "contentLength": 100},
                    headers={"Authorization": f"Bearer {key}"},
                )
            )

        for _round in range(3):
            async with anyio.create_task_group() as group:
                for _ in range(4):
                    group.start_soon(start)
    assert [a.status_code for a in answers] == [201] * 12, [a.text for a in answers]
    _used, reserved, _assets = await _state(uploading, "busy@example.com")
    assert reserved >= 12 * 100
