"""Plain HTTP routes next to ``/mcp``: signed object reads/writes and a health check.

The MCP auth provider does not protect custom routes, so each one checks its own credential:
object routes accept only an unexpired HMAC signature for exactly that key (and, for PUT, that
content type and length). A GET serves only bytes that hash to the SHA-256 the database
recorded; a PUT writes only to an upload's staging key, only while its reservation is open, and
only once. Responses never let a browser sniff or run what they serve.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from memory_db import (
    ChecksumMismatch,
    InvalidStorageKey,
    MemoryDbError,
    ObjectExists,
    ObjectNotFound,
    SignatureError,
    get_logger,
)
from memory_db.storage import (
    OBJECTS_ROUTE,
    HmacLinks,
    content_type_for_key,
    parse_storage_key,
    read_verified,
)
from memory_tools import MemoryServices
from memory_tools.ingest.uploads import OPERATION as UPLOAD_OPERATION

log = get_logger(__name__)

SAFE_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'; sandbox",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "private, no-store",
}


def _refuse(status: int, message: str) -> Response:
    return PlainTextResponse(message, status_code=status, headers=SAFE_HEADERS)


def object_routes(services: MemoryServices) -> list[Route]:
    """Routes serving signed links of a store that signs with our own HMAC (local, in-memory)."""
    store = services.store
    if not isinstance(store, HmacLinks):
        return []  # S3 links go to the bucket's own endpoint

    async def get_object(request: Request) -> Response:
        key = request.path_params["key"]
        try:
            store.verify_signed_get(
                key,
                request.query_params.get("expires", ""),
                request.query_params.get("signature", ""),
            )
        except (SignatureError, InvalidStorageKey):
            log.info("signed_read_denied")
            return _refuse(403, "the link is invalid or has expired")
        # Integrity is the database's: the SHA-256 recorded when the bytes were validated, not
        # whatever the store (or its sidecar) says about itself.
        async with services.database.unit_of_work() as uow:
            found = await uow.objects.for_storage_key(key)
        if found is None:
            return _refuse(404, "not found")
        record, expected = found
        try:
            if expected is None:  # a preview stored before previews were hashed (rev. 0007)
                head = await store.head(key)
                expected = head.checksum_sha256
                if not head.exists or expected is None:
                    return _refuse(404, "not found")
            body = await read_verified(
                store, key, expected, max_bytes=services.settings.asset_max_bytes * 2
            )
        except ObjectNotFound:
            return _refuse(404, "not found")
        except ChecksumMismatch:
            log.error(
                "object_integrity_failed",
                object_id=record.id,
                variant=_variant(key),
                exc_info=True,
            )
            return _refuse(500, "the object failed its integrity check")
        filename = key.rsplit("/", 1)[1]
        return Response(
            body,
            media_type=content_type_for_key(key),
            headers={**SAFE_HEADERS, "Content-Disposition": f'inline; filename="{filename}"'},
        )

    async def put_object(request: Request) -> Response:
        key = request.path_params["key"]
        content_type = request.headers.get("content-type", "")
        length_header = request.headers.get("content-length", "")
        if not (length_header.isascii() and length_header.isdigit()):
            return _refuse(411, "Content-Length is required")
        length = int(length_header)
        if length > services.settings.asset_max_bytes:
            return _refuse(413, "too large")
        try:
            store.verify_signed_put(
                key,
                content_type,
                length,
                request.query_params.get("expires", ""),
                request.query_params.get("signature", ""),
            )
        except (SignatureError, InvalidStorageKey):
            log.info("signed_write_denied")
            return _refuse(403, "the link is invalid or has expired")
        body = bytearray()
        async for chunk in request.stream():
            body.extend(chunk)
            if len(body) > length:
                return _refuse(400, "body is longer than the signed Content-Length")
        if len(body) != length:
            return _refuse(400, "body is shorter than the signed Content-Length")
        staged = parse_storage_key(key)  # a staging key: verify_signed_put accepts no other
        assert staged.reservation_id is not None
        # The HMAC says who issued the link; the database says whether it is still good. A link
        # works while its upload is open and never after: once completed, refused,
        # deduplicated or expired, the reservation is closed and nothing is written.
        async with services.database.unit_of_work() as uow:
            reservation = await uow.quota.hold_open_upload(
                staged.reservation_id, staged.namespace_id, operation=UPLOAD_OPERATION
            )
            if reservation is None:
                log.info("signed_write_closed", reservation_id=staged.reservation_id)
                return _refuse(403, "this upload link has been used or has expired")
            try:
                await store.put(key, bytes(body), content_type=content_type)
            except ObjectExists:
                return _refuse(409, "bytes were already uploaded with this link")
            except MemoryDbError:
                return _refuse(400, "the object was refused")
        return Response(status_code=200, headers=SAFE_HEADERS)

    path = OBJECTS_ROUTE + "/{key:path}"
    return [
        Route(path, get_object, methods=["GET"]),
        Route(path, put_object, methods=["PUT"]),
    ]


def _variant(key: str) -> str:
    return "preview" if key.endswith("/preview.webp") else "original"


def health_route() -> Route:
    """``GET /healthz``: the process is up."""

    async def health(_request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    return Route("/healthz", health, methods=["GET"])
