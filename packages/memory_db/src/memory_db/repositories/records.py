"""Plain, immutable records returned by repositories (no ORM objects leak out of a session)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class VaultScope:
    """The resolved access every scoped repository method requires: whose data, which vault."""

    owner_identity: str
    physical_vault: str


@dataclass(frozen=True, slots=True)
class IdentityRecord:
    """An owner identity and its plan."""

    owner_identity: str
    quota_bytes: int
    namespace_id: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class ApiKeyRecord:
    """An API key without its secret."""

    id: str
    owner_identity: str
    label: str | None
    scopes: tuple[str, ...]
    created_at: datetime
    revoked_at: datetime | None
    last_used_at: datetime | None


@dataclass(frozen=True, slots=True)
class VaultRecord:
    """A vault as seen by one identity: owned, or shared through a grant."""

    id: str
    owner_identity: str
    handle: str
    physical_vault: str
    permission: str  # "owner" for the owner; the grant's permission otherwise
    created_at: datetime

    @property
    def scope(self) -> VaultScope:
        """The scope repositories take for this vault."""
        return VaultScope(self.owner_identity, self.physical_vault)

    @property
    def is_owner(self) -> bool:
        """Whether the viewing identity owns this vault."""
        return self.permission == "owner"


@dataclass(frozen=True, slots=True)
class GrantRecord:
    """A grant of a vault to another identity."""

    id: str
    owner_identity: str
    physical_vault: str
    grantee_identity: str
    permission: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class ProjectRecord:
    """A project in one vault."""

    id: str
    owner_identity: str
    vault: str
    name: str
    description: str | None
    status: str
    created_by: str
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class FolderRecord:
    """A folder in a project."""

    id: str
    owner_identity: str
    vault: str
    project_id: str
    parent_id: str | None
    name: str
    created_at: datetime
    updated_at: datetime
