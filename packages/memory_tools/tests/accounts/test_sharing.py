"""Sharing one's own vaults (``memory_tools.workflows.sharing``): only the owner lists, grants and
revokes; every change is recorded with the caller as actor; a revoked grantee is refused at once."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from fastmcp import Client
from sqlalchemy import text

from memory_tools import MemoryServices
from memory_tools.operations import admin
from memory_tools.workflows import sharing

from ..pictures import b64, picture
from ..tool_calls import call as _call
from ..tool_calls import error as _error
from ..workflow_calls import refused, run

OWNER = "alice@example.com"


async def _ledger(services: MemoryServices) -> list[tuple[str, str, dict[str, Any]]]:
    async with services.database.engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT operation, actor_identity, detail FROM mem_provenance "
                "WHERE operation IN ('vault_grant', 'vault_grant_revoke') ORDER BY created_at"
            )
        )
        return [(op, actor, detail) for op, actor, detail in rows.all()]


async def test_the_owner_grants_changes_and_revokes_and_the_grantee_feels_it(
    saving: MemoryServices,
    client_as: Callable[[str], Client[Any]],
    alice: Any,
    bob: Any,
) -> None:
    await admin.create_vault(saving.database, OWNER, "Work")
    async with client_as(alice.key) as client:
        saved = await _call(
            client, "image_asset_save", {"imageBase64": b64(picture(1)), "vault": "Work"}
        )
    granted = await run(
        saving,
        alice.key,
        sharing.grant_access,
        vault="work",
        grantee=" Bob@Example.com ",
        permission="read",
    )
    assert (granted.vault, granted.grantee, granted.permission, granted.changed) == (
        "Work",
        "bob@example.com",
        "read",
        True,
    )
    overview = await run(saving, alice.key, sharing.list_sharing)
    assert [(v.vault, [(g.grantee, g.permission) for g in v.grants]) for v in overview.vaults] == [
        ("Library", []),
        ("Work", [("bob@example.com", "read")]),
    ]
    async with client_as(bob.key) as client:
        got = await _call(client, "image_asset_get", {"assetId": saved["assetId"]})
        assert got["vault"] == f"{OWNER}/Work"
        # The grantee lists nothing of it: sharing lists the caller's own vaults only.
        mine = await run(saving, bob.key, sharing.list_sharing)
        assert [(v.vault, v.grants) for v in mine.vaults] == [("Library", [])]

    same = await run(
        saving, alice.key, sharing.grant_access, vault="Work", grantee=bob.email, permission="read"
    )
    assert same.changed is False
    upgraded = await run(
        saving, alice.key, sharing.grant_access, vault="Work", grantee=bob.email, permission="write"
    )
    assert upgraded.changed is True
    revoked = await run(saving, alice.key, sharing.revoke_access, vault="Work", grantee=bob.email)
    assert revoked.revoked is True
    again = await run(saving, alice.key, sharing.revoke_access, vault="Work", grantee=bob.email)
    assert again.revoked is False
    async with client_as(bob.key) as client:
        refusal = await _error(client, "image_asset_get", {"assetId": saved["assetId"]})
        assert refusal.startswith("not_found")
    # Recorded like the operator's, with the owner as actor; repeats record nothing.
    assert [(op, actor, detail["permission"]) for op, actor, detail in await _ledger(saving)] == [
        ("vault_grant", OWNER, "read"),
        ("vault_grant", OWNER, "write"),
        ("vault_grant_revoke", OWNER, "write"),
    ]


async def test_only_the_owner_manages_grants_and_bad_input_is_refused_clearly(
    saving: MemoryServices, alice: Any, bob: Any, make_person: Callable[..., Any]
) -> None:
    carol = await make_person("carol@example.com")
    reader = await make_person("reader@example.com", ("read",))
    await admin.grant(saving.database, OWNER, "Library", carol.email, "admin")
    await admin.create_vault(saving.database, bob.email, "Secret")

    async def grant(key: str, vault: str, grantee: str, permission: str = "read") -> str:
        call = run(
            saving, key, sharing.grant_access, vault=vault, grantee=grantee, permission=permission
        )
        return await refused(call)

    # Another owner's vault is not found, exactly like one that does not exist.
    hidden = await grant(alice.key, f"{bob.email}/Secret", carol.email)
    missing = await grant(alice.key, f"{bob.email}/Nothing", carol.email)
    assert hidden.startswith("not_found") and missing.startswith("not_found")
    assert hidden.replace("Secret", "X") == missing.replace("Nothing", "X")
    revoke_hidden = await refused(
        run(saving, alice.key, sharing.revoke_access, vault=f"{bob.email}/Secret", grantee=OWNER)
    )
    assert revoke_hidden.startswith("not_found")
    # An admin grantee works inside the vault but does not decide who else may.
    assert (await grant(carol.key, f"{OWNER}/Library", bob.email)).startswith("forbidden")
    revoke_by_admin = run(
        saving, carol.key, sharing.revoke_access, vault=f"{OWNER}/Library", grantee=carol.email
    )
    assert (await refused(revoke_by_admin)).startswith("forbidden")
    # A read-only key lists but does not change.
    assert (await grant(reader.key, "Library", bob.email)).startswith("forbidden")
    listed = await run(saving, reader.key, sharing.list_sharing)
    assert listed.vaults and not listed.can_change
    assert (await run(saving, alice.key, sharing.list_sharing)).can_change
    # Yourself, an unknown identity, a malformed address, an unknown permission.
    assert (await grant(alice.key, "Library", "ALICE@example.com")).startswith("invalid_input")
    unknown = await grant(alice.key, "Library", "nobody@example.com")
    assert unknown == "not_found: no identity nobody@example.com on this server"
    assert (await grant(alice.key, "Library", "not an address")).startswith("invalid_input")
    assert (await grant(alice.key, "Library", bob.email, "owner")).startswith("invalid_input")
    # Revoking for an address with no grant (existing or not) says only that nothing changed.
    for who in ("nobody@example.com", bob.email):
        nothing = await run(saving, alice.key, sharing.revoke_access, vault="Library", grantee=who)
        assert nothing.revoked is False
    assert await _ledger(saving) == [
        ("vault_grant", "operator", {"permission": "admin"}),
    ]


async def test_a_read_only_server_changes_no_grant(
    saving: MemoryServices, alice: Any, bob: Any
) -> None:
    frozen = replace(saving, read_only=True)
    assert (await run(frozen, alice.key, sharing.list_sharing)).vaults
    for call in (
        run(
            frozen,
            alice.key,
            sharing.grant_access,
            vault="Library",
            grantee=bob.email,
            permission="read",
        ),
        run(frozen, alice.key, sharing.revoke_access, vault="Library", grantee=bob.email),
    ):
        assert (await refused(call)).startswith("forbidden: this server is read-only")
    assert await _ledger(saving) == []
