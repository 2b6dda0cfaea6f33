"""The Upload page (docs/web.md#upload): drop, pick or paste images, or save one by its URL.

- ``GET /upload?vault=&projectId=&folderId=``: the page, its target (vault, project, folder)
  prefilled from the query (the library's "Upload here"); by default ``Library``, no project.
- ``POST /app/uploads``: start one upload, with the body and checks of ``POST /uploads``.
- ``POST /app/uploads/{upload_id}/complete``: validate the PUT bytes and save the asset.
- ``POST /app/uploads/url``: save an image by its URL, as ``image_asset_save`` with
  ``sourceUrl`` (the SSRF-safe fetcher, outside any transaction).
- ``GET /app/assets/{asset_id}/state?waitSeconds=``: the embedding state, answered as soon as
  it settles (``assets.get_asset_waiting``, woken by LISTEN/NOTIFY), so a row waits without
  polling.

The page never holds an API key: these are session endpoints (the ``X-CSRF-Token`` header on
the POSTs) that call the same functions as the bearer routes of
:mod:`memory_tools.workflows.uploads` (``start_upload``, ``complete_upload``). Between
start and complete, ``upload.js`` PUTs each file to its signed link with its own progress bar.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import ConfigDict, Field
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from memory_tools.errors import InvalidInputFailure, NotFoundFailure
from memory_tools.ingest.images import FORMATS
from memory_tools.ingest.save import AssetSaver, SaveRequest
from memory_tools.ingest.uploads import UploadFlow
from memory_tools.services import MemoryServices
from memory_tools.text import refuse_nul
from memory_tools.web import security
from memory_tools.web.bodies import parse_body, read_body
from memory_tools.web.handlers import WebRequest, endpoint, page
from memory_tools.web.rendering import human_bytes
from memory_tools.web.security import same_origin_link
from memory_tools.wire import WireModel
from memory_tools.workflows.assets import MIME_TYPES, get_asset_waiting
from memory_tools.workflows.projects import list_folders, list_projects
from memory_tools.workflows.uploads import (
    UploadComplete,
    UploadStart,
    complete_upload,
    start_upload,
    ticket_out,
)
from memory_tools.workflows.vaults import list_vaults

UPLOAD_PATH = "/upload"
START_PATH = "/app/uploads"
URL_PATH = "/app/uploads/url"
STATE_PATH = "/app/assets/"  # + {asset_id}/state
ASSET_PATH = "/assets/"  # + {asset_id}: the asset page
# Vault permissions that may save images.
WRITERS = ("owner", "admin", "write")
# How long one state request waits at most (the workflow's bound is 30 s).
WAIT_SECONDS = 25


class UrlSave(WireModel):
    """``POST /app/uploads/url``: an image's address and where to file it."""

    model_config = ConfigDict(strict=True)

    source_url: str = Field(min_length=1, max_length=4096)
    vault: str = Field(default="Library", min_length=1, max_length=400)
    project_id: str | None = Field(default=None, max_length=64)
    folder_id: str | None = Field(default=None, max_length=64)
    tags: Annotated[list[str], Field(max_length=32)] = Field(default_factory=list[str])


class EmbeddingState(WireModel):
    """What an upload row shows of its asset while it waits to be embedded."""

    asset_id: str
    status: str
    embedding_status: str
    failure_code: str | None
    failure_message: str | None


def _target(web: WebRequest) -> tuple[str, str | None, str | None]:
    query = web.request.query_params
    vault = query.get("vault", "").strip() or "Library"
    project_id = query.get("projectId", "").strip() or None
    folder_id = query.get("folderId", "").strip() or None
    for name, value in (("vault", vault), ("projectId", project_id), ("folderId", folder_id)):
        if value is not None:
            refuse_nul(value, name)
    if folder_id is not None and project_id is None:
        raise InvalidInputFailure("folderId: give the folder's projectId as well")
    return vault, project_id, folder_id


def _wait_seconds(raw: str) -> float:
    try:
        return float(raw) if raw else 0.0
    except ValueError:
        raise InvalidInputFailure("waitSeconds: a number of seconds") from None


def routes(services: MemoryServices) -> list[Route]:
    """The upload page and its session endpoints."""
    saver = AssetSaver(services)
    flow = UploadFlow(saver)
    settings = services.settings

    async def show(web: WebRequest) -> Response:
        vault, project_id, folder_id = _target(web)
        vaults = (await web.call(list_vaults)).vaults
        # Unknown or another owner's vault, project or folder: not found, as everywhere.
        projects = (await web.call(list_projects, vault=vault, include_archived=False)).projects
        folders = []
        if project_id is not None:
            if project_id not in {p.project_id for p in projects}:
                raise NotFoundFailure("project not found")
            folders = (await web.call(list_folders, vault=vault, project_id=project_id)).folders
            if folder_id is not None and folder_id not in {f.folder_id for f in folders}:
                raise NotFoundFailure("folder not found")
        writable = [v.vault for v in vaults if v.permission in WRITERS]
        if vault not in writable:
            writable.append(vault)  # shown as chosen; starting an upload says why it may not
        return web.render(
            "upload.html",
            title="Upload",
            may_upload=web.may_change,
            vaults=writable,
            projects=projects,
            folders=folders,
            target={"vault": vault, "project_id": project_id, "folder_id": folder_id},
            upload_path=UPLOAD_PATH,
            start_path=START_PATH,
            url_path=URL_PATH,
            state_path=STATE_PATH,
            asset_path=ASSET_PATH,
            csrf_header=security.CSRF_HEADER,
            max_bytes=settings.asset_max_bytes,
            max_size=human_bytes(settings.asset_max_bytes),
            mime_types=MIME_TYPES,
            formats=", ".join(f.name.upper() for f in FORMATS.values()),
            wait_seconds=WAIT_SECONDS,
        )

    async def start(web: WebRequest) -> Response:
        body: UploadStart = parse_body(await read_body(web.request), UploadStart)
        ticket = await web.call_as_caller(start_upload, flow, body)
        out = ticket_out(ticket, f"{START_PATH}/{ticket.upload_id}/complete")
        out = out.model_copy(update={"url": same_origin_link(services, out.url)})
        return JSONResponse(out.model_dump(mode="json"), status_code=201)

    async def complete(web: WebRequest) -> Response:
        body: UploadComplete = parse_body(await read_body(web.request), UploadComplete)
        upload_id: str = web.request.path_params["upload_id"]
        saved = await web.call_as_caller(complete_upload, flow, upload_id, body)
        return JSONResponse(saved.model_dump(mode="json"))

    async def save_url(web: WebRequest) -> Response:
        body: UrlSave = parse_body(await read_body(web.request), UrlSave)
        request = SaveRequest(
            vault=body.vault,
            source_url=body.source_url,
            tags=list(body.tags),
            project_id=body.project_id,
            folder_id=body.folder_id,
        )
        saved = await web.call_as_caller(saver.save, request)
        return JSONResponse(saved.model_dump(mode="json"), status_code=201)

    async def state(web: WebRequest) -> Response:
        asset_id: str = web.request.path_params["asset_id"]
        refuse_nul(asset_id, "assetId")
        view = await web.call_as_caller(
            get_asset_waiting,
            services,
            asset_id=asset_id,
            include_preview=False,
            wait_seconds=_wait_seconds(web.request.query_params.get("waitSeconds", "")),
        )
        out: dict[str, Any] = EmbeddingState(
            asset_id=view.asset_id,
            status=view.status,
            embedding_status=view.embedding_status,
            failure_code=view.failure_code,
            failure_message=view.failure_message,
        ).model_dump(mode="json")
        return JSONResponse(out)

    return [
        page(UPLOAD_PATH, show, services),
        endpoint(START_PATH, start, services, methods=("POST",)),
        endpoint(URL_PATH, save_url, services, methods=("POST",)),
        endpoint(f"{START_PATH}/{{upload_id:str}}/complete", complete, services, methods=("POST",)),
        endpoint(f"{STATE_PATH}{{asset_id:str}}/state", state, services),
    ]
