"""Where a save's bytes come from (docs/design.md#saving): one class per source.

A source reads the bytes, may refuse an image its caller did not announce, and says whether its
bytes outlive a failed attempt. The saver drives every source the same way
(``AssetSaver.save_from``), so a new source of bytes (a scraper artifact, say) is a new class
here, not a new way to drive the saver.

None of them reads a location the caller names but a public URL through the safe fetcher: a
scraper artifact is read from the key its row records, after the saver has checked that the row
is the caller's (:class:`StoredArtifact`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from memory_db import MemoryDbError, get_logger
from memory_db.repositories import ArtifactRecord
from memory_db.storage import AssetObjectStore, read_verified
from memory_tools.capacity import CallAdmission
from memory_tools.errors import InvalidImage, InvalidInputFailure
from memory_tools.ingest.fetch import SafeFetcher
from memory_tools.ingest.images import InspectedImage

log = get_logger(__name__)


class ImageSource(Protocol):
    """Where a save's bytes come from: a new source is a new implementation of this.

    ``durable``: the bytes stay where they are after a failed attempt (a staged upload), so a
    failure that is not about the bytes leaves the reservation open for a retry; bytes that
    come with the request (inline, downloaded) are gone with it, so every failure releases it.
    ``size``: the length of the bytes when known before reading them.
    """

    @property
    def durable(self) -> bool:
        """Whether the bytes outlive a failed attempt (see the class docstring)."""
        ...

    @property
    def size(self) -> int | None:
        """The length of the bytes when known before reading them."""
        ...

    @property
    def reading(self) -> str:
        """What reading the bytes is, for progress reports ("fetching the image")."""
        ...

    async def read(self) -> bytes:
        """The bytes (``fetch_failed``, ``invalid_input``, ``invalid_image``...)."""
        ...

    def accept(self, image: InspectedImage) -> None:
        """Refuse an image this source's caller did not announce (``invalid_image``)."""
        ...

    async def done(self) -> None:
        """The reservation is closed (saved or released): drop what the source kept."""
        ...


@dataclass(frozen=True)
class InlineBytes:
    """Bytes that came with the request (``imageBase64``, decoded)."""

    data: bytes
    durable: bool = False
    reading: str = "reading the image"

    @property
    def size(self) -> int:
        """The length of the bytes."""
        return len(self.data)

    async def read(self) -> bytes:
        """The bytes."""
        return self.data

    def accept(self, image: InspectedImage) -> None:
        """Any accepted image will do."""

    async def done(self) -> None:
        """Nothing was kept."""


@dataclass(frozen=True)
class Download:
    """Bytes fetched from a checked URL (``sourceUrl``)."""

    fetcher: SafeFetcher
    admission: CallAdmission
    url: str  # as given: a signed CDN URL needs its query to be fetched
    durable: bool = False
    size: None = None
    reading: str = "fetching the image"

    async def read(self) -> bytes:
        """Fetch the bytes, giving the call's admission turn away meanwhile."""
        # A download can take ASSET_FETCH_TIMEOUT_SECONDS: other calls go meanwhile.
        async with self.admission.stepped_aside():
            return (await self.fetcher.fetch(self.url)).data

    def accept(self, image: InspectedImage) -> None:
        """Any accepted image will do."""

    async def done(self) -> None:
        """Nothing was kept."""


@dataclass(frozen=True)
class StagedUpload:
    """The bytes a signed upload link wrote to an upload's staging key.

    Durable: after a failure that is not about the bytes (an outage, a lost race), they and the
    reservation stay for a retried completion. They are read once; what the save stores are the
    bytes read and validated, never whatever the staging key holds later.
    """

    store: AssetObjectStore
    key: str
    size: int  # the declared length
    content_type: str  # the declared type
    durable: bool = True
    reading: str = "reading the upload"

    async def read(self) -> bytes:
        """The staged bytes, exactly the declared length (``invalid_image`` otherwise)."""
        head = await self.store.head(self.key)
        if not head.exists:
            raise InvalidInputFailure("nothing was uploaded for this upload id yet")
        chunks: list[bytes] = []
        size = 0
        async for chunk in self.store.get_stream(self.key):
            size += len(chunk)
            if size > self.size:
                raise InvalidImage("the upload is longer than its declared length")
            chunks.append(chunk)
        if size != self.size:
            raise InvalidImage("the upload is shorter than its declared length")
        return b"".join(chunks)

    def accept(self, image: InspectedImage) -> None:
        """The bytes are the declared type (``invalid_image``)."""
        if image.format.mime_type != self.content_type:
            shown = image.format.mime_type
            raise InvalidImage(
                f"the uploaded bytes are {shown}, not the declared {self.content_type}"
            )

    async def done(self) -> None:
        """Delete the staged bytes; if the store refuses, reconciliation deletes them later."""
        try:
            await self.store.delete(self.key)
        except MemoryDbError:
            log.warning("asset_upload_staging_delete_failed", exc_info=True)


@dataclass(frozen=True)
class StoredArtifact:
    """The bytes of a scraper artifact the caller owns (``artifactId``).

    The saver checks that the artifact is the caller's and unexpired before it makes this
    source (``AssetSaver.owned_artifact``); the bytes are read from the key the artifact's row
    records, never from anything the caller supplies, and must be exactly the recorded length
    and SHA-256. Not durable: the artifact stays until it expires whatever happens to one
    attempt, so a failed save releases its reservation and a retry opens a new one.
    """

    store: AssetObjectStore
    artifact: ArtifactRecord
    durable: bool = False
    reading: str = "reading the artifact"

    @property
    def size(self) -> int:
        """The artifact's recorded length."""
        return self.artifact.bytes

    async def read(self) -> bytes:
        """The stored bytes, verified (``invalid_input`` when they are gone or changed)."""
        try:
            return await read_verified(
                self.store,
                self.artifact.storage_key,
                self.artifact.sha256,
                max_bytes=self.artifact.bytes,
            )
        except MemoryDbError:
            log.warning("artifact_read_failed", artifact_id=self.artifact.id, exc_info=True)
            raise InvalidInputFailure(
                "the artifact's bytes are unavailable; download the image again"
            ) from None

    def accept(self, image: InspectedImage) -> None:
        """The bytes are what was validated when the artifact was stored (``invalid_image``)."""
        if image.sha256 != self.artifact.sha256:
            raise InvalidImage("the artifact's bytes changed since they were stored")

    async def done(self) -> None:
        """Nothing to drop: the artifact stays until it expires (docs/design.md#artifacts)."""
