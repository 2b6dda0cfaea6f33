"""Private object stores: the contract, local/S3/in-memory implementations, keys, signing."""

from memory_db.storage.integrity import read_verified
from memory_db.storage.keys import (
    ParsedKey,
    ServedAs,
    build_artifact_key,
    build_object_key,
    build_staging_key,
    content_type_for_key,
    namespace_prefix,
    parse_storage_key,
    served_as,
    validate_object_key,
    validate_staging_key,
    validate_storage_key,
)
from memory_db.storage.local import OBJECTS_ROUTE, LocalAssetObjectStore
from memory_db.storage.memory import InMemoryAssetObjectStore
from memory_db.storage.protocol import (
    AssetObjectStore,
    HeadResult,
    ListedObject,
    PutResult,
    SignedPut,
)
from memory_db.storage.s3 import S3AssetObjectStore
from memory_db.storage.signing import HmacLinks, UrlSigner

__all__ = [
    "OBJECTS_ROUTE",
    "AssetObjectStore",
    "HeadResult",
    "HmacLinks",
    "InMemoryAssetObjectStore",
    "ListedObject",
    "LocalAssetObjectStore",
    "ParsedKey",
    "PutResult",
    "S3AssetObjectStore",
    "ServedAs",
    "SignedPut",
    "UrlSigner",
    "build_artifact_key",
    "build_object_key",
    "build_staging_key",
    "content_type_for_key",
    "namespace_prefix",
    "parse_storage_key",
    "read_verified",
    "served_as",
    "validate_object_key",
    "validate_staging_key",
    "validate_storage_key",
]
