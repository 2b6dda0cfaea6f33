"""``S3AssetObjectStore``: private objects in an S3-compatible bucket (aioboto3).

No ACLs are ever sent and no public URL is ever built: reads by others go through presigned
GETs (short-lived) that also pin the response content type and disposition (previews inline,
originals only as downloads). Every put sends the
SHA-256 (``ChecksumSHA256``) for the provider to verify, and records it as object metadata,
because some providers do not verify it; the database's SHA-256 stays the final guarantee.

Writes are create-only. A put first asks ``HeadObject`` (the same bytes already there: done;
other bytes: ``ObjectExists``), then sends ``PutObject`` with ``If-None-Match: *``, which AWS
S3, MinIO, R2 and moto enforce atomically (``412 PreconditionFailed`` when the key appeared
meanwhile). Peers that ignore the header (s3rver 3.7.1 honours it only on GET) keep the HEAD
check, which is racy only against a concurrent writer of the same key; object keys carry fresh
server-generated ids and only the server writes them, so there is none.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from datetime import UTC
from typing import Any

import anyio
from botocore.exceptions import BotoCoreError, ClientError

from memory_db.errors import ObjectNotFound, StorageError, StorageUnavailable
from memory_db.storage._common import check_put, refuse_overwrite
from memory_db.storage.keys import (
    content_type_for_key,
    served_as,
    validate_namespace_prefix,
    validate_staging_key,
    validate_storage_key,
)
from memory_db.storage.protocol import HeadResult, ListedObject, PutResult, SignedPut

_MISSING = ("404", "NoSuchKey", "NotFound")
# The key exists already (412), or a concurrent conditional write is in progress (409).
_PRECONDITION = ("412", "PreconditionFailed", "409", "ConditionalRequestConflict")


def _error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


class S3AssetObjectStore:
    """Objects in one private bucket."""

    def __init__(
        self,
        *,
        bucket: str,
        region: str,
        endpoint_url: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        force_path_style: bool = False,
    ) -> None:
        # Imported here: aioboto3 costs ~0.5 s at import and only S3 deployments need it.
        import aioboto3  # type: ignore[import-untyped]
        from botocore.config import Config

        self.bucket = bucket
        self._session = aioboto3.Session(
            aws_access_key_id=access_key_id,
            aws_secret_access_key=secret_access_key,
            region_name=region,
        )
        self._client_kwargs: dict[str, Any] = {
            "endpoint_url": endpoint_url,
            "config": Config(
                signature_version="s3v4",
                s3={"addressing_style": "path" if force_path_style else "auto"},
                retries={"max_attempts": 3, "mode": "standard"},
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
            ),
        }
        self._stack: AsyncExitStack | None = None
        self._client: Any = None
        self._lock = anyio.Lock()

    async def _s3(self) -> Any:
        async with self._lock:
            if self._client is None:
                stack = AsyncExitStack()
                client_cm: Any = self._session.client("s3", **self._client_kwargs)
                self._client = await stack.enter_async_context(client_cm)
                self._stack = stack
            return self._client

    async def put(
        self, key: str, body: bytes, *, content_type: str, checksum_sha256: str | None = None
    ) -> PutResult:
        """Upload privately, create-only, with a provider-verified SHA-256."""
        digest = await anyio.to_thread.run_sync(check_put, key, body, content_type, checksum_sha256)
        existing = await self._existing(key, body, digest)
        if existing is not None:
            return existing
        client = await self._s3()
        try:
            response = await client.put_object(
                Bucket=self.bucket,
                Key=key,
                Body=body,
                ContentType=content_type,
                ContentLength=len(body),
                ChecksumSHA256=base64.b64encode(bytes.fromhex(digest)).decode("ascii"),
                Metadata={"sha256": digest},
                IfNoneMatch="*",
            )
        except ClientError as exc:
            if _error_code(exc) in _PRECONDITION:
                # Someone wrote the key between our HEAD and our PUT: same bytes, or refuse.
                existing = await self._existing(key, body, digest)
                if existing is not None:
                    return existing
                raise refuse_overwrite(key) from exc
            raise StorageError(f"object store refused the upload: {_error_code(exc)}") from exc
        except BotoCoreError as exc:
            raise StorageUnavailable(
                f"object store refused the upload: {type(exc).__name__}"
            ) from exc
        return PutResult(
            key=key,
            bytes=len(body),
            etag=str(response.get("ETag", "")).strip('"') or None,
            version_id=response.get("VersionId"),
        )

    async def _existing(self, key: str, body: bytes, digest: str) -> PutResult | None:
        """``None`` if ``key`` is free; its receipt if it holds these bytes; else refuse."""
        head = await self.head(key)
        if not head.exists:
            return None
        if head.checksum_sha256 != digest or head.bytes != len(body):
            raise refuse_overwrite(key)
        return PutResult(key=key, bytes=len(body), etag=head.etag)

    async def head(self, key: str) -> HeadResult:
        """``HeadObject``; a missing key is ``exists=False``."""
        validate_storage_key(key)
        client = await self._s3()
        try:
            response = await client.head_object(Bucket=self.bucket, Key=key, ChecksumMode="ENABLED")
        except ClientError as exc:
            if _error_code(exc) in _MISSING:
                return HeadResult(exists=False)
            raise StorageError(f"object store head failed: {_error_code(exc)}") from exc
        except BotoCoreError as exc:
            raise StorageUnavailable(f"object store head failed: {type(exc).__name__}") from exc
        checksum = response.get("Metadata", {}).get("sha256")
        if checksum is None and response.get("ChecksumSHA256"):
            checksum = base64.b64decode(response["ChecksumSHA256"]).hex()
        return HeadResult(
            exists=True,
            bytes=int(response.get("ContentLength", 0)),
            content_type=response.get("ContentType"),
            checksum_sha256=checksum,
            etag=str(response.get("ETag", "")).strip('"') or None,
        )

    async def get_stream(self, key: str, *, chunk_size: int = 65536) -> AsyncIterator[bytes]:
        """Stream ``GetObject``'s body."""
        validate_storage_key(key)
        client = await self._s3()
        try:
            response = await client.get_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if _error_code(exc) in _MISSING:
                raise ObjectNotFound("no object is stored under this key") from exc
            raise StorageError(f"object store read failed: {_error_code(exc)}") from exc
        except BotoCoreError as exc:
            raise StorageUnavailable(f"object store read failed: {type(exc).__name__}") from exc
        body = response["Body"]
        try:
            while chunk := await body.read(chunk_size):
                yield chunk
        finally:
            body.close()

    async def list_namespace(self, prefix: str) -> AsyncIterator[ListedObject]:
        """``ListObjectsV2`` under ``prefix``, page by page."""
        validate_namespace_prefix(prefix)
        client = await self._s3()
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix, "MaxKeys": 1000}
            if token is not None:
                kwargs["ContinuationToken"] = token
            try:
                page = await client.list_objects_v2(**kwargs)
            except ClientError as exc:
                raise StorageError(f"object store listing failed: {_error_code(exc)}") from exc
            except BotoCoreError as exc:
                raise StorageUnavailable(
                    f"object store listing failed: {type(exc).__name__}"
                ) from exc
            for item in page.get("Contents", []):
                modified = item["LastModified"]
                if modified.tzinfo is None:
                    modified = modified.replace(tzinfo=UTC)
                yield ListedObject(
                    key=str(item["Key"]), bytes=int(item.get("Size", 0)), modified=modified
                )
            if not page.get("IsTruncated"):
                return
            token = page.get("NextContinuationToken")

    async def create_signed_get_url(
        self, key: str, expires_in: int, *, filename: str | None = None
    ) -> str:
        """A presigned GET that also pins the content type and disposition (``served_as``).

        A preview is inline, an original a download named ``filename``. Both are query
        parameters inside the SigV4 signature, so a changed one fails on AWS S3.
        """
        served = served_as(key, filename)
        if expires_in <= 0:
            raise ValueError("expires_in must be positive")
        client = await self._s3()
        return await client.generate_presigned_url(
            "get_object",
            Params={
                "Bucket": self.bucket,
                "Key": key,
                "ResponseContentType": served.content_type,
                "ResponseContentDisposition": served.disposition,
            },
            ExpiresIn=expires_in,
        )

    async def create_signed_put_url(
        self, key: str, *, content_type: str, content_length: int, expires_in: int
    ) -> SignedPut:
        """A presigned PUT of a staging key whose signature covers key, content type and length."""
        validate_staging_key(key)
        if content_type != content_type_for_key(key):
            raise StorageError(f"this key only accepts {content_type_for_key(key)}")
        if content_length <= 0 or expires_in <= 0:
            raise ValueError("content_length and expires_in must be positive")
        client = await self._s3()
        url = await client.generate_presigned_url(
            "put_object",
            Params={
                "Bucket": self.bucket,
                "Key": key,
                "ContentType": content_type,
                "ContentLength": content_length,
            },
            ExpiresIn=expires_in,
        )
        return SignedPut(
            url=url,
            method="PUT",
            headers={"Content-Type": content_type, "Content-Length": str(content_length)},
            expires_in=expires_in,
        )

    async def delete(self, key: str) -> None:
        """``DeleteObject`` (S3 deletes are idempotent)."""
        validate_storage_key(key)
        client = await self._s3()
        try:
            await client.delete_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if _error_code(exc) in _MISSING:
                return
            raise StorageError(f"object store delete failed: {_error_code(exc)}") from exc
        except BotoCoreError as exc:
            raise StorageUnavailable(f"object store delete failed: {type(exc).__name__}") from exc

    async def close(self) -> None:
        """Close the S3 client."""
        async with self._lock:
            if self._stack is not None:
                await self._stack.aclose()
            self._stack = None
            self._client = None
