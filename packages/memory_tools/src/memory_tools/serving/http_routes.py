"""Plain HTTP routes next to ``/mcp``: signed object reads/writes, liveness and readiness.

The MCP auth provider does not protect custom routes, so each one checks its own credential:
object routes accept only an unexpired HMAC signature for exactly that key and the way it is
served (a preview inline, an original as a download under the signed name; for PUT, that
content type and length). A GET serves only bytes that hash to the SHA-256 the database
recorded; a PUT writes only to an upload's staging key, only while its reservation is open, and
only once. Responses never let a browser sniff or run what they serve.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from memory_db import (
    ChecksumMismatch,
    InvalidStorageKey,
    ObjectNotFound,
    SignatureError,
    get_logger,
)
from memory_db.health import check_readiness
from memory_db.storage import OBJECTS_ROUTE, HmacLinks, ServedAs, read_verified
from memory_tools import MemoryServices, ToolFailure, metrics, policy
from memory_tools.errors import RETRY_AFTER_SECONDS, Busy, Unavailable, map_failures
from memory_tools.ingest.save import AssetSaver
from memory_tools.ingest.uploads import UploadFlow

log = get_logger(__name__)

SAFE_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'; sandbox",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "private, no-store",
}


# What a refused signed PUT answers, by failure code.
_PUT_STATUS = {"forbidden": 403, "conflict": 409, "feature_disabled": 503, "unavailable": 503}


def _refuse(status: int, message: str) -> Response:
    return PlainTextResponse(message, status_code=status, headers=SAFE_HEADERS)


Handler = Callable[[Request], Awaitable[Response]]


def plain_errors(handler: Handler) -> Handler:
    """Answer a database outage or a saturated server on an object route with a plain 503.

    ``map_failures`` is the boundary the MCP tools and the upload routes use too; the handlers
    admit their database and store work through ``services.call_admission`` (after reading a
    request body, so a slow sender holds no turn). Never a bare 500, never a wait longer than
    the admission wait.
    """

    async def guarded(request: Request) -> Response:
        try:
            with map_failures():
                return await handler(request)
        except (Unavailable, Busy) as failure:
            if isinstance(failure, Unavailable):
                log.warning("object_route_unavailable", exc_info=True)
                message = "the service is briefly unavailable; retry in a few seconds"
            else:
                message = failure.message
            retry = str(RETRY_AFTER_SECONDS[failure.code])
            return PlainTextResponse(
                message, status_code=503, headers={**SAFE_HEADERS, "Retry-After": retry}
            )

    return guarded


def object_routes(services: MemoryServices) -> list[Route]:
    """Routes serving signed links of a store that signs with our own HMAC (local, in-memory)."""
    store = services.store
    if not isinstance(store, HmacLinks):
        return []  # S3 links go to the bucket's own endpoint
    uploads = UploadFlow(AssetSaver(services))

    @plain_errors
    async def get_object(request: Request) -> Response:
        key = request.path_params["key"]
        try:
            policy.require(services.settings)
        except ToolFailure as failure:
            return _refuse(503, failure.message)
        try:
            served = store.verify_signed_get(
                key,
                request.query_params.get("expires", ""),
                request.query_params.get("signature", ""),
                request.query_params.get("filename"),
            )
        except (SignatureError, InvalidStorageKey):
            log.info("signed_read_denied")
            metrics.SIGNED_READS_DENIED.inc()
            return _refuse(403, "the link is invalid or has expired")
        async with services.call_admission.admit():
            return await _serve_verified(key, served)

    async def _serve_verified(key: str, served: ServedAs) -> Response:
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
        # What the signature bound: a preview inline, an original only as a download.
        return Response(
            body,
            media_type=served.content_type,
            headers={**SAFE_HEADERS, "Content-Disposition": served.disposition},
        )

    @plain_errors
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
        try:
            async with services.call_admission.admit():
                await uploads.stage(key, bytes(body), content_type=content_type)
        except Busy:
            raise  # a plain 503 with Retry-After, from plain_errors
        except ToolFailure as failure:
            return _refuse(_PUT_STATUS.get(failure.code, 400), failure.message)
        return Response(status_code=200, headers=SAFE_HEADERS)

    path = OBJECTS_ROUTE + "/{key:path}"
    return [
        Route(path, get_object, methods=["GET"]),
        Route(path, put_object, methods=["PUT"]),
    ]


def _variant(key: str) -> str:
    return "preview" if key.endswith("/preview.webp") else "original"


def health_routes(services: MemoryServices) -> list[Route]:
    """``GET /healthz`` (liveness) and ``GET /healthz/ready`` (readiness).

    Liveness says only that the process is up and serving HTTP: restart the process when it
    fails. Readiness also asks the database (``SELECT 1``) and the object store, each with a
    short timeout, and answers 503 naming the parts that failed: send no traffic while it fails;
    the server recovers by itself when the part comes back.
    """

    async def health(_request: Request) -> Response:
        return JSONResponse({"status": "ok"}, headers={"Cache-Control": "no-store"})

    async def ready(_request: Request) -> Response:
        readiness = await check_readiness(
            services.database, services.store, services.settings.asset_storage_env_prefix
        )
        body: dict[str, object] = {
            "status": "ok" if readiness.ready else "unavailable",
            "checks": readiness.parts,
        }
        if not readiness.ready:
            body["failing"] = readiness.failing
        return JSONResponse(
            body,
            status_code=200 if readiness.ready else 503,
            headers={"Cache-Control": "no-store"},
        )

    return [
        Route("/healthz", health, methods=["GET"]),
        Route("/healthz/ready", ready, methods=["GET"]),
    ]
