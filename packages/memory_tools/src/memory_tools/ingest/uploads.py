"""Direct uploads (docs/design.md#uploads): initiate with a signed PUT, then finalise.

Initiation authorises the caller, validates the metadata exactly as a save does, reserves the
declared bytes against the quota and answers with a short-lived upload authorisation bound to
one staging key, content type and length (an S3 presigned PUT, or the local store's signed
upload route). The staging key (``build_staging_key``) names the reservation; an upload never
writes where a validated original lives.

Finalisation reads the staged bytes once, refuses anything that is not the declared image, and
then runs the same steps as any save: preview, dedupe, quota, then a create-only write of the
validated bytes (the ones read, not whatever the staging key holds later) into the immutable
object key, asset and jobs. The staging bytes are deleted afterwards, whatever the outcome that
closed the reservation. From then on the link is dead: the local upload route refuses it because
the reservation is no longer open, and on S3, where the link still reaches the bucket until it
expires, a replay can only land in staging, whose bytes the worker's reconciliation deletes
because no open reservation wants them.
"""

from __future__ import annotations

import secrets
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio

from memory_db import (
    MemoryDbError,
    ObjectExists,
    ReservationRecord,
    get_logger,
    new_id,
)
from memory_db.storage import build_staging_key, parse_storage_key
from memory_tools import metrics, policy
from memory_tools.access import Caller, resolve_vault
from memory_tools.errors import (
    ConflictFailure,
    Forbidden,
    InvalidInputFailure,
    NotFoundFailure,
)
from memory_tools.ingest import reservations
from memory_tools.ingest.images import FORMATS
from memory_tools.ingest.plan import SaveIntent, SaveOrder, SaveTarget
from memory_tools.ingest.reservations import ReservationAsk, open_reservation
from memory_tools.ingest.save import (
    AssetSaver,
    SaveRequest,
    SaveResult,
    describe,
    require_folder_project,
    vector_bytes,
)
from memory_tools.ingest.sources import StagedUpload

log = get_logger(__name__)

OPERATION = "asset_upload"
# A completion reads, decodes and stores the image; a claim outlives any sane attempt, and a
# claim whose holder died lapses after this. Waiters poll at the saver's pace.
_CLAIM_SECONDS = 30.0
_RENEW_SECONDS = 10.0  # the holder renews its claim this often while it works
_WAIT_SECONDS = 120.0
_POLL_SECONDS = 0.1

# An attempt's claim on an upload: owner, reservation, the save's intent and where it goes.
_Claimed = tuple[str, ReservationRecord, SaveIntent, SaveTarget]
_EXTENSIONS = {image_format.mime_type: image_format.extension for image_format in FORMATS.values()}


@dataclass(frozen=True)
class UploadTicket:
    """Where and how to PUT the bytes, and the id to finalise with."""

    upload_id: str
    url: str
    method: str
    headers: dict[str, str]
    expires_at: datetime


class UploadFlow:
    """Initiation and finalisation of direct uploads for one server's services."""

    def __init__(self, saver: AssetSaver) -> None:
        self._saver = saver
        self._services = saver.services

    async def initiate(
        self, caller: Caller, request: SaveRequest, *, content_type: str, content_length: int
    ) -> UploadTicket:
        """Reserve quota and authorise one PUT of ``content_length`` bytes of ``content_type``."""
        with metrics.refusals():
            return await self._initiate(
                caller, request, content_type=content_type, content_length=content_length
            )

    async def _initiate(
        self, caller: Caller, request: SaveRequest, *, content_type: str, content_length: int
    ) -> UploadTicket:
        policy.require(self._services.settings)
        policy.require_writable(self._services.read_only)
        settings = self._services.settings
        extension = _EXTENSIONS.get(content_type)
        if extension is None:
            raise InvalidInputFailure(
                "contentType: must be image/jpeg, image/png, image/webp or image/gif"
            )
        if not 1 <= content_length <= settings.asset_max_bytes:
            raise InvalidInputFailure(
                f"contentLength: must be between 1 and {settings.asset_max_bytes} bytes"
            )
        intent = _describe(request)
        ttl = settings.asset_signed_put_ttl_seconds
        expires = datetime.now(UTC) + timedelta(
            seconds=ttl + settings.asset_upload_reservation_seconds
        )
        async with self._services.database.unit_of_work() as uow:
            target = await self._saver.target(uow, caller, intent)
            owner = target.scope.owner_identity
            ask = ReservationAsk(
                operation=OPERATION,
                noun="upload",
                idempotency_key=intent.idempotency_key,
                expected_bytes=content_length,
                expires_at=expires,
                vault=target.scope.physical_vault,
                identity={
                    "fingerprint": intent.fingerprint,
                    "contentType": content_type,
                    "contentLength": content_length,
                },
                details={
                    "caller": caller.identity,
                    "vaultHandle": request.vault,
                    "fields": _fields(request),
                },
                object_id=new_id("aob"),  # where the validated bytes will be stored
                requester=caller.identity,
            )
            reservation, created = await open_reservation(uow, owner, ask)
            if not created and reservation.status != "active":
                raise ConflictFailure(f"this upload is already {reservation.status}")
            if created:
                # The declared bytes and both vectors, held until completion knows the image.
                need = content_length + vector_bytes(self._services, 2)
                await reservations.hold(uow, owner, reservation.id, need, caller=caller.identity)
        key = build_staging_key(
            settings.asset_storage_env_prefix, target.namespace_id, reservation.id, extension
        )
        signed = await self._services.store.create_signed_put_url(
            key, content_type=content_type, content_length=content_length, expires_in=ttl
        )
        return UploadTicket(
            upload_id=reservation.id,
            url=signed.url,
            method=signed.method,
            headers=dict(signed.headers),
            expires_at=datetime.now(UTC) + timedelta(seconds=signed.expires_in),
        )

    async def stage(self, key: str, body: bytes, *, content_type: str) -> None:
        """Write the bytes of a signed upload link to its staging key, once, while it is open.

        The caller (the signed-upload route) has checked the link's HMAC, which says who issued
        it; the database says whether it is still good. A link works while its upload is open
        and never after: once completed, refused, deduplicated or expired, the reservation is
        closed and nothing is written. The reservation stays share-locked while the bytes are
        written, so completion (which closes it under ``FOR UPDATE``) cannot begin half-way.
        """
        policy.require(self._services.settings)
        policy.require_writable(self._services.read_only)
        staged = parse_storage_key(key)
        if staged.kind != "staging" or staged.reservation_id is None:
            raise Forbidden("upload links write only to an upload's staging key")
        async with self._services.database.unit_of_work() as uow:
            reservation = await uow.quota.hold_open_upload(
                staged.reservation_id, staged.namespace_id, operation=OPERATION
            )
            if reservation is None:
                log.info("upload_link_closed", reservation_id=staged.reservation_id)
                raise Forbidden("this upload link has been used or has expired")
            try:
                await self._services.store.put(key, body, content_type=content_type)
            except ObjectExists:
                raise ConflictFailure("bytes were already uploaded with this link") from None
            except MemoryDbError as exc:
                raise InvalidInputFailure(f"the upload was refused: {exc}") from None

    async def complete(
        self, caller: Caller, upload_id: str, *, vault: str | None = None
    ) -> SaveResult:
        """Validate the uploaded bytes and create the asset (or return it if already done).

        ``vault``: where the upload was started; by default the vault its caller named then.

        Concurrent completions of one upload do the work once: the others wait for it and then
        answer like a repeated completion (the same asset, or why the upload is closed).
        """
        policy.require(self._services.settings)
        policy.require_writable(self._services.read_only)
        if vault is None:
            async with self._services.database.unit_of_work() as uow:
                vault = await uow.quota.caller_upload_vault(
                    upload_id, caller=caller.identity, operation=OPERATION
                )
            if vault is None:
                raise NotFoundFailure("upload not found")
        token = secrets.token_hex(8)
        give_up = anyio.current_time() + _WAIT_SECONDS
        while True:
            claim = await self._claim(caller, upload_id, vault=vault, token=token)
            if isinstance(claim, SaveResult):
                return claim
            if claim is not None:
                break
            if anyio.current_time() > give_up:
                raise ConflictFailure(
                    "another request is still completing this upload; retry in a moment"
                )
            await anyio.sleep(_POLL_SECONDS)
        owner, reservation, intent, target = claim
        outcome: SaveResult | Exception = RuntimeError("the completion did not run")
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self._keep_claim, owner, reservation.id, token)
                try:
                    outcome = await self._complete_claimed(caller, reservation, intent, target)
                except Exception as exc:  # re-raised below, not wrapped in a group
                    outcome = exc
                finally:
                    group.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await self._drop_claim(owner, reservation.id, token)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    async def _keep_claim(self, owner: str, reservation_id: str, token: str) -> None:
        """Renew this attempt's claim while it works (a decode may wait its turn a while)."""
        while True:
            await anyio.sleep(_RENEW_SECONDS)
            try:
                async with self._services.database.unit_of_work() as uow:
                    await uow.quota.claim_completion(
                        owner, reservation_id, token=token, seconds=_CLAIM_SECONDS
                    )
            except MemoryDbError:
                log.warning("upload_claim_renewal_failed", exc_info=True)

    async def _drop_claim(self, owner: str, reservation_id: str, token: str) -> None:
        """Give the claim up; if the database is unreachable, it lapses by itself."""
        try:
            async with self._services.database.unit_of_work() as uow:
                await uow.quota.drop_completion_claim(owner, reservation_id, token=token)
        except MemoryDbError:
            log.warning("upload_claim_release_failed", exc_info=True)

    async def _claim(
        self, caller: Caller, upload_id: str, *, vault: str, token: str
    ) -> SaveResult | _Claimed | None:
        """The finished upload's result, this attempt's claim on it, or ``None`` (held)."""
        async with self._services.database.unit_of_work() as uow:
            resolved = await resolve_vault(uow, caller, vault, "write")
            owner = resolved.record.scope.owner_identity
            try:
                reservation = await uow.quota.get_reservation(owner, upload_id)
            except MemoryDbError:
                raise NotFoundFailure("upload not found") from None
            if (
                reservation.operation != OPERATION
                or reservation.request.get("caller") != caller.identity
                or reservation.vault != resolved.record.physical_vault
            ):
                raise NotFoundFailure("upload not found")
            intent = _describe(SaveRequest(**reservation.request.get("fields", {})))
            if reservation.status == "finalized" and reservation.asset_id is not None:
                target = await self._saver.target(uow, caller, intent)
                return await self._saver.replay(uow, target, reservation.asset_id)
            if reservation.status != "active":
                raise ConflictFailure(f"this upload is {reservation.status}; start a new one")
            target = await self._saver.target(uow, caller, intent)
            if not await uow.quota.claim_completion(
                owner, reservation.id, token=token, seconds=_CLAIM_SECONDS
            ):
                return None
        return owner, reservation, intent, target

    async def _complete_claimed(
        self,
        caller: Caller,
        reservation: ReservationRecord,
        intent: SaveIntent,
        target: SaveTarget,
    ) -> SaveResult:
        """Read, validate and store the staged bytes of an upload this attempt has claimed."""
        if reservation.object_id is None:
            raise ConflictFailure("the upload has no staged object: start it again")
        content_type = str(reservation.request["contentType"])
        staged = StagedUpload(
            store=self._services.store,
            key=build_staging_key(
                self._services.settings.asset_storage_env_prefix,
                target.namespace_id,
                reservation.id,
                _EXTENSIONS[content_type],
            ),
            size=int(reservation.request["contentLength"]),
            content_type=content_type,
        )
        order = SaveOrder(
            actor=caller.identity,
            intent=intent,
            target=target,
            reservation_id=reservation.id,
            object_id=reservation.object_id,
            key_id=caller.key_id,
        )
        return await self._saver.save_from(order, staged)


def _describe(request: SaveRequest) -> SaveIntent:
    """The intent of an upload's metadata: validated as a save's, with no source of its own."""
    if any(
        value is not None
        for value in (request.source_url, request.artifact_id, request.image_base64)
    ):
        raise InvalidInputFailure("an upload carries its bytes itself; give no other source")
    require_folder_project(request)
    return describe(request, source_kind="upload")


def _fields(request: SaveRequest) -> dict[str, Any]:
    data = asdict(request)
    for source in ("source_url", "artifact_id", "image_base64"):
        data.pop(source, None)
    return data
