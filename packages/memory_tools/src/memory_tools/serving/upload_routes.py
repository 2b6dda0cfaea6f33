"""Direct uploads over plain HTTP: ``POST /uploads`` then ``POST /uploads/{id}/complete``.

Both need ``Authorization: Bearer <API key>`` (the MCP auth provider does not cover custom
routes); a 401 carries ``WWW-Authenticate: Bearer`` as on ``/mcp``. Bodies are strict camelCase
JSON: numbers are JSON numbers (no ``true`` or ``"100"``), snake_case names are refused with the
camelCase spelling to use, and no string may hold NUL. Errors are
``{"error": {"code", "message"}}`` with a status that matches the code.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Annotated, Any, TypeVar

from pydantic import ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from memory_db import get_logger
from memory_tools import MemoryServices, ToolFailure
from memory_tools.access import Caller
from memory_tools.errors import (
    RETRY_AFTER_SECONDS,
    InvalidInputFailure,
    Unauthenticated,
    http_status,
    map_failures,
)
from memory_tools.ingest.inputs import MAX_FILE_NAME_INPUT, refuse_nul, refuse_nul_anywhere
from memory_tools.ingest.save import AssetSaver, SaveRequest, SaveResult
from memory_tools.ingest.uploads import UploadFlow, UploadTicket
from memory_tools.mcp.validation import describe
from memory_tools.wire import WireModel
from memory_tools.workflows.calls import ApiKey, invoke_as_caller

log = get_logger(__name__)

T = TypeVar("T")

MAX_BODY = 64 * 1024


class UploadStart(WireModel):
    """``POST /uploads``: what will be uploaded and how to file it."""

    model_config = ConfigDict(strict=True)

    content_type: str = Field(description="image/jpeg, image/png, image/webp or image/gif.")
    content_length: int = Field(ge=1, description="Exact size of the body you will PUT.")
    vault: str = Field(default="Library", min_length=1, max_length=400)
    project_id: str | None = Field(default=None, max_length=64)
    folder_id: str | None = Field(default=None, max_length=64)
    title: str | None = Field(default=None, max_length=240)
    description: str | None = Field(default=None, max_length=4000)
    alt_text: str | None = Field(default=None, max_length=2000)
    tags: Annotated[list[str], Field(max_length=32)] = Field(default_factory=list[str])
    source_ref: dict[str, str | int | float | bool | None] = Field(default_factory=dict[str, Any])
    idempotency_key: str | None = Field(default=None, max_length=200)
    file_name: str | None = Field(
        default=None,
        max_length=MAX_FILE_NAME_INPUT,
        description="The file's name: kept with the image; its stem is the default title.",
    )

    def save_request(self) -> SaveRequest:
        """The save this upload will be, as ``UploadFlow.initiate`` takes it."""
        return SaveRequest(
            vault=self.vault,
            title=self.title,
            description=self.description,
            alt_text=self.alt_text,
            tags=list(self.tags),
            source_ref=dict(self.source_ref),
            project_id=self.project_id,
            folder_id=self.folder_id,
            idempotency_key=self.idempotency_key,
            file_name=self.file_name,
        )


class UploadComplete(WireModel):
    """``POST /uploads/{id}/complete``."""

    model_config = ConfigDict(strict=True)

    vault: str | None = Field(
        default=None,
        min_length=1,
        max_length=400,
        description="The vault the upload was started in; by default the one named then.",
    )


class UploadTicketOut(WireModel):
    """Where to PUT the bytes, then where to finalise."""

    upload_id: str
    url: str
    method: str
    headers: dict[str, str]
    expires_at: datetime
    complete_url: str


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


async def read_body(request: Request) -> bytes:
    """The request body, read before the call takes its turn (a slow sender holds none).

    Read in chunks and refused as soon as it passes ``MAX_BODY``: a huge body is never held.
    """
    too_large = InvalidInputFailure(f"the request body is larger than {MAX_BODY} bytes")
    declared = request.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit() and int(declared) > MAX_BODY:
        raise too_large
    raw = bytearray()
    async for chunk in request.stream():
        raw.extend(chunk)
        if len(raw) > MAX_BODY:
            raise too_large
    return bytes(raw)


def parse_body(raw: bytes, model: type[WireModel]) -> Any:
    """The body as ``model``: camelCase names only, no coercion, no NUL in any string."""
    try:
        body = model.model_validate_json(raw or b"{}", by_alias=True, by_name=False)
    except ValidationError as exc:
        known = {field.alias or name for name, field in model.model_fields.items()}
        raise InvalidInputFailure(describe(exc, known)) from None
    refuse_nul_anywhere(body.model_dump(by_alias=True))
    return body


def _base(services: MemoryServices, request: Request) -> str:
    """The public base of this server (as in ``url`` for the local store), without a slash."""
    if services.public_base_url:
        return services.public_base_url.rstrip("/")
    return str(request.base_url).rstrip("/")  # built without a bootstrap (tests, embedding)


async def start_upload(caller: Caller, flow: UploadFlow, body: UploadStart) -> UploadTicket:
    """Start one upload for ``caller``: every route that starts uploads (bearer, web) calls this."""
    return await flow.initiate(
        caller,
        body.save_request(),
        content_type=body.content_type,
        content_length=body.content_length,
    )


async def complete_upload(
    caller: Caller, flow: UploadFlow, upload_id: str, body: UploadComplete
) -> SaveResult:
    """Finish ``caller``'s upload ``upload_id``: validate the bytes and save the asset."""
    refuse_nul(upload_id, "uploadId")
    return await flow.complete(caller, upload_id, vault=body.vault)


def ticket_out(ticket: UploadTicket, complete_url: str) -> UploadTicketOut:
    """The answer to a started upload: where to PUT the bytes, and ``complete_url`` after."""
    return UploadTicketOut(
        upload_id=ticket.upload_id,
        url=ticket.url,
        method=ticket.method,
        headers=ticket.headers,
        expires_at=ticket.expires_at,
        complete_url=complete_url,
    )


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
