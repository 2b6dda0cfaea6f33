"""Direct uploads over plain HTTP: ``POST /uploads`` then ``POST /uploads/{id}/complete``.

Both need ``Authorization: Bearer <API key>`` (the MCP auth provider does not cover custom
routes); a 401 carries ``WWW-Authenticate: Bearer`` as on ``/mcp``. Bodies are strict camelCase
JSON: numbers are JSON numbers (no ``true`` or ``"100"``), snake_case names are refused with the
camelCase spelling to use, and no string may hold NUL. Errors are
``{"error": {"code", "message"}}`` with a status that matches the code.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from memory_db import get_logger
from memory_tools import MemoryServices, ToolFailure
from memory_tools.access import Caller
from memory_tools.errors import (
    RETRY_AFTER_SECONDS,
    Unauthenticated,
    http_status,
    map_failures,
)
from memory_tools.ingest.save import AssetSaver, SaveResult
from memory_tools.ingest.uploads import UploadFlow, UploadTicket
from memory_tools.web.bodies import parse_body, read_body
from memory_tools.workflows.calls import ApiKey, invoke_as_caller
from memory_tools.workflows.uploads import (
    UploadComplete,
    UploadStart,
    complete_upload,
    start_upload,
    ticket_out,
)

log = get_logger(__name__)

T = TypeVar("T")


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


def _refused(failure: ToolFailure, request: Request) -> Response:
    """The JSON error of a refused call; logged when the fault is ours (database away, a bug).

    Called while the failure is handled, so the log carries its cause (``map_failures`` in the
    call runner chains what it translated).
    """
    if failure.code in ("unavailable", "internal"):
        log.warning("upload_route_refused", code=failure.code, exc_info=True)
    return _error(failure, request)


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


def _presented_key(request: Request) -> ApiKey:
    """The bearer key; refused before the body is read when there is none."""
    token = _bearer_token(request)
    if token is None:
        raise Unauthenticated("send Authorization: Bearer <API key>")
    return ApiKey(token)


def _base(services: MemoryServices, request: Request) -> str:
    """The public base of this server (as in ``url`` for the local store), without a slash."""
    if services.public_base_url:
        return services.public_base_url.rstrip("/")
    return str(request.base_url).rstrip("/")  # built without a bootstrap (tests, embedding)


def upload_routes(services: MemoryServices) -> list[Route]:
    """The two upload routes bound to ``services``."""
    flow = UploadFlow(AssetSaver(services))

    async def answer(request: Request, action: Callable[[Caller, bytes], Awaitable[T]]) -> T:
        """``action(caller, body)`` through the call runner, as the bearer key's caller.

        The body is read before the call takes its turn (a slow sender holds none); it is
        parsed after the key was checked, so a request without a valid key is 401 whatever
        its body.
        """
        key = _presented_key(request)
        raw = await read_body(request)
        return await invoke_as_caller(services, key, action, raw)

    async def started(caller: Caller, raw: bytes) -> UploadTicket:
        return await start_upload(caller, flow, parse_body(raw, UploadStart))

    @json_errors
    async def start(request: Request) -> Response:
        try:
            ticket = await answer(request, started)
        except ToolFailure as failure:
            return _refused(failure, request)
        out = ticket_out(ticket, f"{_base(services, request)}/uploads/{ticket.upload_id}/complete")
        return JSONResponse(
            out.model_dump(mode="json"), status_code=201, headers={"Cache-Control": "no-store"}
        )

    @json_errors
    async def complete(request: Request) -> Response:
        async def completed(caller: Caller, raw: bytes) -> SaveResult:
            body = parse_body(raw, UploadComplete)
            return await complete_upload(caller, flow, request.path_params["upload_id"], body)

        try:
            result = await answer(request, completed)
        except ToolFailure as failure:
            return _refused(failure, request)
        return JSONResponse(result.model_dump(mode="json"))

    return [
        Route("/uploads", start, methods=["POST"]),
        Route("/uploads/{upload_id}/complete", complete, methods=["POST"]),
    ]
