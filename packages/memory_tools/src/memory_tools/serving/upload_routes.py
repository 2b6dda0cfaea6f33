"""Direct uploads over plain HTTP: ``POST /uploads`` then ``POST /uploads/{id}/complete``.

Both need ``Authorization: Bearer <API key>`` (the MCP auth provider does not cover custom
routes); a 401 carries ``WWW-Authenticate: Bearer`` as on ``/mcp``. Bodies are strict camelCase
JSON: numbers are JSON numbers (no ``true`` or ``"100"``), snake_case names are refused with the
camelCase spelling to use, and no string may hold NUL. Errors are
``{"error": {"code", "message"}}`` with a status that matches the code.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from memory_db import get_logger
from memory_tools import MemoryServices, ToolFailure, authenticate
from memory_tools.access import Caller
from memory_tools.errors import (
    RETRY_AFTER_SECONDS,
    Unauthenticated,
    http_status,
    map_failures,
)
from memory_tools.ingest.save import AssetSaver
from memory_tools.ingest.uploads import UploadFlow
from memory_tools.web.bodies import parse_body, read_body
from memory_tools.workflows.uploads import (
    UploadComplete,
    UploadStart,
    complete_upload,
    start_upload,
    ticket_out,
)

log = get_logger(__name__)


def _bearer_token(request: Request) -> str | None:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return (token.strip() or None) if scheme.lower() == "bearer" else None


def _error(failure: ToolFailure, request: Request) -> Response:
    headers = {"Cache-Control": "no-store"}
    if failure.code in RETRY_AFTER_SECONDS:
        headers["Retry-After"] = str(RETRY_AFTER_SECONDS[failure.code])
    if failure.code == "unauthenticated":
        # RFC 6750, section 3.1: no error attribute unless bearer credentials were sent and refused.
        headers["WWW-Authenticate"] = (
            f'Bearer error="invalid_token", error_description="{failure.message}"'
            if _bearer_token(request)
            else "Bearer"
        )
    return JSONResponse(
        {"error": {"code": failure.code, "message": failure.message}},
        status_code=http_status(failure),
        headers=headers,
    )


Handler = Callable[[Request], Awaitable[Response]]


def json_errors(handler: Handler) -> Handler:
    """Answer whatever escapes ``handler`` with the documented JSON error, never a bare 500.

    ``map_failures`` is the boundary the MCP tools use too: a lost database is ``unavailable``
    and a saturated server ``busy`` (503 with ``Retry-After``, both retryable); anything else
    unexpected is logged and answered as ``internal``. The handlers admit their database work
    through ``call_admission`` once the request body is read, so a slow sender holds no turn.
    """

    async def guarded(request: Request) -> Response:
        try:
            with map_failures():
                return await handler(request)
        except ToolFailure as failure:
            log.warning("upload_route_refused", code=failure.code, exc_info=True)
            return _error(failure, request)
        except Exception:
            log.exception("upload_route_failed")
            return _error(ToolFailure("the request could not be completed"), request)

    return guarded


def _presented_token(request: Request) -> str:
    token = _bearer_token(request)
    if token is None:
        raise Unauthenticated("send Authorization: Bearer <API key>")
    return token


async def _caller(services: MemoryServices, token: str) -> Caller:
    async with services.database.single_statements() as uow:  # one statement, as the tools
        return await authenticate(uow, token)


def _base(services: MemoryServices, request: Request) -> str:
    """The public base of this server (as in ``url`` for the local store), without a slash."""
    if services.public_base_url:
        return services.public_base_url.rstrip("/")
    return str(request.base_url).rstrip("/")  # built without a bootstrap (tests, embedding)


def upload_routes(services: MemoryServices) -> list[Route]:
    """The two upload routes bound to ``services``."""
    flow = UploadFlow(AssetSaver(services))

    @json_errors
    async def start(request: Request) -> Response:
        try:
            token = _presented_token(request)
            raw = await read_body(request)
            async with services.call_admission.admit():
                caller = await _caller(services, token)
                body: UploadStart = parse_body(raw, UploadStart)
                ticket = await start_upload(caller, flow, body)
        except ToolFailure as failure:
            return _error(failure, request)
        out = ticket_out(ticket, f"{_base(services, request)}/uploads/{ticket.upload_id}/complete")
        return JSONResponse(
            out.model_dump(mode="json"), status_code=201, headers={"Cache-Control": "no-store"}
        )

    @json_errors
    async def complete(request: Request) -> Response:
        try:
            token = _presented_token(request)
            raw = await read_body(request)
            async with services.call_admission.admit():
                caller = await _caller(services, token)
                body: UploadComplete = parse_body(raw, UploadComplete)
                result = await complete_upload(caller, flow, request.path_params["upload_id"], body)
        except ToolFailure as failure:
            return _error(failure, request)
        return JSONResponse(result.model_dump(mode="json"))

    return [
        Route("/uploads", start, methods=["POST"]),
        Route("/uploads/{upload_id}/complete", complete, methods=["POST"]),
    ]
