"""Direct uploads as every route starts and finishes them: the bodies, the two steps, the answer.

The bearer routes (``POST /uploads``, :mod:`memory_tools.serving.upload_routes`) and the web
app's upload page (:mod:`memory_tools.web.uploads`) take the same bodies and run the same steps
for their caller; the flow itself (reservation, staging, validation) is
:class:`memory_tools.ingest.uploads.UploadFlow`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import ConfigDict, Field

from memory_tools.access import Caller
from memory_tools.ingest.inputs import MAX_FILE_NAME_INPUT
from memory_tools.ingest.save import SaveRequest, SaveResult
from memory_tools.ingest.uploads import UploadFlow, UploadTicket
from memory_tools.text import refuse_nul
from memory_tools.wire import WireModel


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


__all__ = [
    "UploadComplete",
    "UploadStart",
    "UploadTicketOut",
    "complete_upload",
    "start_upload",
    "ticket_out",
]
