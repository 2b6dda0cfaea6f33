"""``S3AssetObjectStore``: private objects in an S3-compatible bucket (aioboto3).

No ACLs are ever sent and no public URL is ever built: reads by others go through presigned
GETs (§22 TTL) that also pin the response content type and disposition. Every put sends the
SHA-256 (``ChecksumSHA256``) for the provider to verify, and records it as object metadata,
because some providers do not verify it; the database's SHA-256 stays the final guarantee.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import anyio
from botocore.exceptions import BotoCoreError, ClientError

from memory_db.errors import ObjectNotFound, StorageError
from memory_db.storage._common import check_put
from memory_db.storage.keys import content_type_for_key, validate_object_key
from memory_db.storage.protocol import HeadResult, PutResult, SignedPut

_MISSING = ("404", "NoSuchKey", "NotFound")


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
        """Upload privately with a provider-verified SHA-256."""
        digest = await anyio.to_thread.run_sync(check_put, key, body, content_type, checksum_sha256)
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
            )
        except (ClientError, BotoCoreError) as exc:
            raise StorageError(f"object store refused the upload: {type(exc).__name__}") from exc
        return PutResult(
            key=key,
            bytes=len(body),
            etag=str(response.get("ETag", "")).strip('"') or None,
            version_id=response.get("VersionId"),
        )

    async def head(self, key: str) -> HeadResult:
        """``HeadObject``; a missing key is ``exists=False``."""
        validate_object_key(key)
        client = await self._s3()
        try:
            response = await client.head_object(Bucket=self.bucket, Key=key, ChecksumMode="ENABLED")
        except ClientError as exc:
            if _error_code(exc) in _MISSING:
                return HeadResult(exists=False)
            raise StorageError(f"object store head failed: {_error_code(exc)}") from exc
        except BotoCoreError as exc:
            raise StorageError(f"object store head failed: {type(exc).__name__}") from exc
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
        validate_object_key(key)
        client = await self._s3()
        try:
            response = await client.get_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if _error_code(exc) in _MISSING:
                raise ObjectNotFound("no object is stored under this key") from exc
            raise StorageError(f"object store read failed: {_error_code(exc)}") from exc
        except BotoCoreError as exc:
            raise StorageError(f"object store read failed: {type(exc).__name__}") from exc
        body = response["Body"]
        try:
            while chunk := await body.read(chunk_size):
                yield chunk
        finally:
            body.close()

    async def create_signed_get_url(self, key: str, expires_in: int) -> str:
        """A presigned GET that also pins a safe content type and inline disposition."""
        validate_object_key(key)
        if expires_in <= 0:
            raise ValueError("expires_in must be positive")
        client = await self._s3()
        filename = key.rsplit("/", 1)[1]
        return await client.generate_presigned_url(
            "get_object",
            Params={
                "Bucket": self.bucket,
                "Key": key,
                "ResponseContentType": content_type_for_key(key),
                "ResponseContentDisposition": f'inline; filename="{filename}"',
            },
            ExpiresIn=expires_in,
        )

    async def create_signed_put_url(
        self, key: str, *, content_type: str, content_length: int, expires_in: int
    ) -> SignedPut:
        """A presigned PUT whose signature covers key, content type and length."""
        validate_object_key(key)
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
        validate_object_key(key)
        client = await self._s3()
        try:
            await client.delete_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if _error_code(exc) in _MISSING:
                return
            raise StorageError(f"object store delete failed: {_error_code(exc)}") from exc
        except BotoCoreError as exc:
            raise StorageError(f"object store delete failed: {type(exc).__name__}") from exc

    async def close(self) -> None:
        """Close the S3 client."""
        async with self._lock:
            if self._stack is not None:
                await self._stack.aclose()
            self._stack = None
            self._client = None
