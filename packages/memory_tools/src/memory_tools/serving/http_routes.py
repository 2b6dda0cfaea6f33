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
    routes = _ObjectRoutes(services, store)
    path = OBJECTS_ROUTE + "/{key:path}"
    return [
        Route(path, plain_errors(routes.get), methods=["GET"]),
        Route(path, plain_errors(routes.put), methods=["PUT"]),
    ]


class _Refused(Exception):
    """A step of an object route refuses the request: answered as plain ``status``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _refusing(handler: Handler) -> Handler:
    """Answer a step's :class:`_Refused` with its plain status and message."""

    async def answered(request: Request) -> Response:
        try:
            return await handler(request)
        except _Refused as refused:
            return _refuse(refused.status, refused.message)

    return answered


class _ObjectRoutes:
    """The signed GET and PUT of one HMAC-signing store, each a short list of named steps."""

    def __init__(self, services: MemoryServices, links: HmacLinks) -> None:
        self._services = services
        self._store = services.store  # the same store: ``links`` is its signing side
        self._links = links
        self._uploads = UploadFlow(AssetSaver(services))
        self.get = _refusing(self._get)
        self.put = _refusing(self._put)

    # --- GET: switched on, signed, then the bytes the database vouches for ------------------

    async def _get(self, request: Request) -> Response:
        key = request.path_params["key"]
        try:
            policy.require(self._services.settings)
        except ToolFailure as failure:
            raise _Refused(503, failure.message) from None
        served = self._verify_signed_get(key, request)
        async with self._services.call_admission.admit():
            body = await self._read_verified(key)
        # What the signature bound: a preview inline, an original only as a download.
        return Response(
            body,
            media_type=served.content_type,
            headers={**SAFE_HEADERS, "Content-Disposition": served.disposition},
        )

    def _verify_signed_get(self, key: str, request: Request) -> ServedAs:
        """How the link serves ``key``, when its signature holds."""
        try:
            return self._links.verify_signed_get(
                key,
                request.query_params.get("expires", ""),
                request.query_params.get("signature", ""),
                request.query_params.get("filename"),
            )
        except (SignatureError, InvalidStorageKey):
            log.info("signed_read_denied")
            metrics.SIGNED_READS_DENIED.inc()
            raise _Refused(403, "the link is invalid or has expired") from None

    async def _read_verified(self, key: str) -> bytes:
        """The bytes of ``key``, only if they hash to the SHA-256 the database recorded.

        Integrity is the database's: the SHA-256 recorded when the bytes were validated, not
        whatever the store (or its sidecar) says about itself.
        """
        async with self._services.database.unit_of_work() as uow:
            found = await uow.objects.for_storage_key(key)
        if found is None:
            raise _Refused(404, "not found")
        record, expected = found
        try:
            if expected is None:  # a preview stored before previews were hashed (rev. 0007)
                expected = await self._stored_checksum(key)
            return await read_verified(
                self._store, key, expected, max_bytes=self._services.settings.asset_max_bytes * 2
            )
        except ObjectNotFound:
            raise _Refused(404, "not found") from None
        except ChecksumMismatch:
            log.error(
                "object_integrity_failed",
                object_id=record.id,
                variant=_variant(key),
                exc_info=True,
            )
            raise _Refused(500, "the object failed its integrity check") from None

    async def _stored_checksum(self, key: str) -> str:
        head = await self._store.head(key)
        if not head.exists or head.checksum_sha256 is None:
            raise _Refused(404, "not found")
        return head.checksum_sha256

    # --- PUT: a signed length and type, the whole body, then staged --------------------------

    async def _put(self, request: Request) -> Response:
        key = request.path_params["key"]
        content_type = request.headers.get("content-type", "")
        length = self._declared_length(request)
        self._verify_signed_put(key, content_type, length, request)
        body = await _read_exactly(request, length)
        try:
            async with self._services.call_admission.admit():
                await self._uploads.stage(key, body, content_type=content_type)
        except Busy:
            raise  # a plain 503 with Retry-After, from plain_errors
        except ToolFailure as failure:
            raise _Refused(_PUT_STATUS.get(failure.code, 400), failure.message) from None
        return Response(status_code=200, headers=SAFE_HEADERS)

    def _declared_length(self, request: Request) -> int:
        """The request's Content-Length: required, and within the largest image accepted."""
        header = request.headers.get("content-length", "")
        if not (header.isascii() and header.isdigit()):
            raise _Refused(411, "Content-Length is required")
        length = int(header)
        if length > self._services.settings.asset_max_bytes:
            raise _Refused(413, "too large")
        return length

    def _verify_signed_put(
        self, key: str, content_type: str, length: int, request: Request
    ) -> None:
        """Refuse unless the link signed exactly this key, content type and length."""
        try:
            self._links.verify_signed_put(
                key,
                content_type,
                length,
                request.query_params.get("expires", ""),
                request.query_params.get("signature", ""),
            )
        except (SignatureError, InvalidStorageKey):
            log.info("signed_write_denied")
            raise _Refused(403, "the link is invalid or has expired") from None


async def _read_exactly(request: Request, length: int) -> bytes:
    """The body, refused as soon as it passes the signed ``length`` or when it falls short."""
    body = bytearray()
    async for chunk in request.stream():
        body.extend(chunk)
        if len(body) > length:
            raise _Refused(400, "body is longer than the signed Content-Length")
    if len(body) != length:
        raise _Refused(400, "body is shorter than the signed Content-Length")
    return bytes(body)


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
