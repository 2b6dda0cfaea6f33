"""The operator commands (``memory-server admin ...``) against a real PostgreSQL.

Each command is parsed by the same declarations the app composes (``ADMIN``) and run as the
app runs it (``run_in_loop``: opened, run, closed) on settings that point at the test's
database; what it prints is read back.
Exit statuses and the whole process are covered by ``apps/memory_server/tests/test_admin_cli.py``.
"""

from __future__ import annotations

import argparse
import base64
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr
from sqlalchemy import text

from memory_db import Database, MemorySettings, open_runtime
from memory_db.ids import new_id
from memory_db.storage import build_staging_key, content_type_for_key
from memory_tools import MemoryServices, NotFoundFailure
from memory_tools.access import Caller
from memory_tools.errors import ConflictFailure, InvalidInputFailure
from memory_tools.ingest.save import AssetSaver, SaveRequest
from memory_tools.jobs.worker import WorkerConfig
from memory_tools.operations import admin
from memory_tools.serving import admin_output
from memory_tools.serving.admin_commands import ADMIN
from memory_tools.serving.admin_output import Progress
from memory_tools.serving.job_worker import job_worker
from memory_tools.serving.subcommands import CommandLine, run_in_loop

from ..pictures import picture

ALICE = "alice@example.com"
BOB = "bob@example.com"
CREATE_HINT = "`memory-server admin create-identity --owner carol@example.com`"


@pytest.fixture
def cli_settings(tmp_path: Path, database_url: str) -> MemorySettings:
    return MemorySettings(
        memory_data_dir=tmp_path / "data", memory_database_url=SecretStr(database_url)
    )


def parse(*argv: str) -> argparse.Namespace:
    return CommandLine("memory-server", "", (ADMIN,)).parser().parse_args(["admin", *argv])


async def run(settings: MemorySettings, capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    capsys.readouterr()
    await run_in_loop(settings, parse(*argv))
    return capsys.readouterr().out


async def run_json(settings: MemorySettings, capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    return json.loads(await run(settings, capsys, *argv, "--json"))


async def counts(database: Database) -> dict[str, int]:
    """Rows of every table an operator command may change: a refusal changes none."""
    tables = ("mem_identities", "mem_api_keys", "mem_vaults", "mem_vault_grants", "mem_provenance")
    async with database.engine.connect() as conn:
        return {
            table: int((await conn.execute(text(f"SELECT count(*) FROM {table}"))).scalar_one())
            for table in tables
        }


@pytest.fixture
async def shared(database: Database) -> Database:
    """Alice shares her vault Work with Bob (read); Bob has a key labelled laptop."""
    await admin.create_identity(database, ALICE, 10**9)
    await admin.create_identity(database, BOB, 5 * 10**8)
    await admin.create_vault(database, ALICE, "Work")
    await admin.grant(database, ALICE, "Work", BOB, "read")
    await admin.create_key(database, BOB, ["read"], "laptop")
    await admin.create_key(database, BOB, ["read", "write"], "ci")
    return database


async def test_the_changing_commands_answer_in_json(
    database: Database, cli_settings: MemorySettings, capsys: pytest.CaptureFixture[str]
) -> None:
    made = await run_json(
        cli_settings,
        capsys,
        "create-identity",
        "--owner",
        " Dana@Example.com",
        "--quota-bytes",
        "5",
    )
    assert made == {"owner": "dana@example.com", "created": True, "quotaBytes": 5}
    again = await run_json(
        cli_settings, capsys, "create-identity", "--owner", "dana@example.com", "--exist-ok"
    )
    assert again == {"owner": "dana@example.com", "created": False}
    await run(cli_settings, capsys, "create-identity", "--owner", BOB)
    vault = await run_json(
        cli_settings, capsys, "create-vault", "--owner", "dana@example.com", "--name", "Team"
    )
    assert set(vault) == {"vaultId", "owner", "vault"} and vault["vault"] == "Team"
    granted = await run_json(
        cli_settings, capsys, "grant", "--vault-owner", "dana@example.com", "--vault", "team",
        "--to", BOB, "--permission", "write",
    )  # fmt: skip
    assert {k: granted[k] for k in ("owner", "vault", "grantee", "permission")} == {
        "owner": "dana@example.com",
        "vault": "Team",
        "grantee": BOB,
        "permission": "write",
    }
    key = await run_json(cli_settings, capsys, "create-key", "--owner", BOB, "--scopes", "read")
    assert set(key) == {"keyId", "owner", "scopes", "label", "note", "key"}
    assert key["scopes"] == ["read"] and key["label"] is None
    revoked = await run_json(cli_settings, capsys, "revoke-key", key["keyId"])
    assert revoked["keyId"] == key["keyId"] and revoked["revokedAt"] is not None
    assert key["key"] not in json.dumps(revoked)
    async with database.engine.connect() as conn:
        operations = (
            (
                await conn.execute(
                    text("SELECT operation FROM mem_provenance WHERE actor_identity = 'operator'")
                )
            )
            .scalars()
            .all()
        )
    assert sorted(operations) == sorted(
        ["identity_create", "identity_create", "vault_create", "vault_grant", "api_key_create",
         "api_key_revoke"]
    )  # fmt: skip


async def test_list_identities_shows_quota_counters_keys_and_vaults(
    shared: Database, cli_settings: MemorySettings, capsys: pytest.CaptureFixture[str]
) -> None:
    key = (await admin.list_keys(shared, BOB, "ci"))[0]
    await admin.revoke_key(shared, key.id)
    # A paused key is counted apart: it is not revoked, and not active either.
    paused = await admin.create_key(shared, BOB, ["read"], "tablet")
    await admin.set_key_paused(shared, paused.record.id, True)
    listed = await run_json(cli_settings, capsys, "list-identities")
    assert [i["owner"] for i in listed["identities"]] == [ALICE, BOB]
    bob = listed["identities"][1]
    assert set(bob) == {
        "owner",
        "quotaBytes",
        "usedBytes",
        "reservedBytes",
        "createdAt",
        "activeKeys",
        "pausedKeys",
        "revokedKeys",
        "vaults",
    }
    keys = (bob["activeKeys"], bob["pausedKeys"], bob["revokedKeys"])
    assert (bob["quotaBytes"], keys, bob["vaults"]) == (5 * 10**8, (1, 1, 1), 1)
    assert listed["identities"][0]["vaults"] == 2
    table = await run(cli_settings, capsys, "list-identities")
    assert ALICE in table and BOB in table and "1/1/1" in table and "active/paused/revoked" in table


async def test_a_long_listing_is_printed_as_plain_columns(
    shared: Database,
    cli_settings: MemorySettings,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # rich lays out every cell first (6 s for 10,000 rows): past the bound, plain columns.
    monkeypatch.setattr(admin_output, "RICH_TABLE_ROWS", 1)
    lines = (await run(cli_settings, capsys, "list-identities")).splitlines()
    assert lines[0] == "identities (2 rows)"
    assert lines[1].split()[:3] == ["owner", "quota", "used"]
    assert [line.split()[0] for line in lines[2:]] == [ALICE, BOB]
    assert not any(line.endswith(" ") for line in lines)


async def test_create_key_stores_its_label_and_list_keys_filters_by_it(
    shared: Database, cli_settings: MemorySettings, capsys: pytest.CaptureFixture[str]
) -> None:
    made = await run_json(cli_settings, capsys, "create-key", "--owner", ALICE, "--label", "phone")
    assert made["label"] == "phone" and made["key"].startswith("mk_")
    await run(cli_settings, capsys, "create-key", "--owner", ALICE, "--label", "desk")
    phone = await run_json(cli_settings, capsys, "list-keys", "--owner", ALICE, "--label", "phone")
    assert [k["keyId"] for k in phone["keys"]] == [made["keyId"]]
    assert set(phone["keys"][0]) == {
        "keyId",
        "label",
        "scopes",
        "state",
        "note",
        "createdAt",
        "lastUsedAt",
        "pausedAt",
        "revokedAt",
        "calls",
        "searches",
        "saves",
    }
    every = await run_json(cli_settings, capsys, "list-keys", "--owner", ALICE)
    assert sorted(k["label"] for k in every["keys"]) == ["desk", "phone"]
    # The secret is printed by create-key only, never by a listing.
    assert made["key"] not in json.dumps(every)
    assert made["key"] not in await run(cli_settings, capsys, "list-keys", "--owner", ALICE)
    none = await run(cli_settings, capsys, "list-keys", "--owner", ALICE, "--label", "nope")
    assert "has no keys labelled 'nope'" in none


async def test_pause_key_and_resume_key_switch_a_key_and_say_when_nothing_changed(
    shared: Database, cli_settings: MemorySettings, capsys: pytest.CaptureFixture[str]
) -> None:
    made = await run_json(
        cli_settings, capsys, "create-key", "--owner", ALICE, "--label", "agent",
        "--note", "the nightly scraper",
    )  # fmt: skip
    assert made["note"] == "the nightly scraper"
    key_id = made["keyId"]
    paused = await run_json(cli_settings, capsys, "pause-key", key_id)
    assert (paused["state"], paused["changed"]) == ("paused", True)
    assert paused["pausedAt"] is not None and made["key"] not in json.dumps(paused)
    assert "was already paused" in await run(cli_settings, capsys, "pause-key", key_id)
    (listed,) = (await run_json(cli_settings, capsys, "list-keys", "--owner", ALICE))["keys"]
    assert (listed["state"], listed["note"]) == ("paused", "the nightly scraper")
    assert f"key {key_id} resumed" in await run(cli_settings, capsys, "resume-key", key_id)
    resumed = await run_json(cli_settings, capsys, "resume-key", key_id)
    assert (resumed["state"], resumed["changed"]) == ("active", False)
    await run(cli_settings, capsys, "revoke-key", key_id)
    for command in ("pause-key", "resume-key"):
        with pytest.raises(ConflictFailure, match="revoked for good"):
            await run(cli_settings, capsys, command, key_id)
        with pytest.raises(NotFoundFailure, match="no key 'akey_unknown'"):
            await run(cli_settings, capsys, command, "akey_unknown")
    async with shared.engine.connect() as conn:
        operations = (
            await conn.execute(
                text(
                    "SELECT operation, actor_identity FROM mem_provenance "
                    "WHERE target_id = :key ORDER BY created_at, id"
                ),
                {"key": key_id},
            )
        ).all()
    assert [tuple(row) for row in operations] == [
        ("api_key_create", "operator"),
        ("api_key_pause", "operator"),
        ("api_key_resume", "operator"),
        ("api_key_revoke", "operator"),
    ]


async def test_labels_are_printed_as_text_and_checked_when_keys_are_made(
    shared: Database, cli_settings: MemorySettings, capsys: pytest.CaptureFixture[str]
) -> None:
    # "[/]" is rich markup that fails to parse: a label is text, never markup.
    await run(cli_settings, capsys, "create-key", "--owner", ALICE, "--label", "[/]ops [bold]")
    assert "[/]ops [bold]" in await run(cli_settings, capsys, "list-keys", "--owner", ALICE)
    before = await counts(shared)
    for label in ("evil\x1b[2J", "   ", "x" * 121, "rtl\u202egpj"):
        with pytest.raises(InvalidInputFailure, match="key label must be"):
            await run(cli_settings, capsys, "create-key", "--owner", ALICE, "--label", label)
    assert await counts(shared) == before
    # A label stored before labels were checked is shown escaped, never sent to the terminal.
    async with shared.engine.begin() as conn:
        await conn.execute(
            text("UPDATE mem_api_keys SET label = :l WHERE owner_identity = :o"),
            {"l": "old\x1b[2Jlabel", "o": ALICE},
        )
    for table_rows in (1000, 0):
        admin_output.RICH_TABLE_ROWS = table_rows
        try:
            shown = await run(cli_settings, capsys, "list-keys", "--owner", ALICE)
        finally:
            admin_output.RICH_TABLE_ROWS = 1000
        assert "\x1b" not in shown and "old\\x1b[2Jlabel" in shown


async def test_list_vaults_and_list_grants(
    shared: Database, cli_settings: MemorySettings, capsys: pytest.CaptureFixture[str]
) -> None:
    vaults = await run_json(cli_settings, capsys, "list-vaults", "--owner", "Alice@Example.com")
    assert vaults["owner"] == ALICE
    assert [(v["vault"], v["grants"], v["assets"]) for v in vaults["vaults"]] == [
        ("Library", 0, 0),
        ("Work", 1, 0),
    ]
    grants = await run_json(
        cli_settings, capsys, "list-grants", "--vault-owner", ALICE, "--vault", "work"
    )
    assert [(g["grantee"], g["permission"]) for g in grants["grants"]] == [(BOB, "read")]
    assert set(grants["grants"][0]) == {"grantId", "grantee", "permission", "createdAt"}
    table = await run(
        cli_settings, capsys, "list-grants", "--vault-owner", ALICE, "--vault", "Work"
    )
    assert BOB in table and "read" in table
    empty = await run(
        cli_settings, capsys, "list-grants", "--vault-owner", ALICE, "--vault", "Library"
    )
    assert "is not shared with anyone" in empty


async def test_revoke_grant_removes_it_once_and_records_provenance(
    shared: Database, cli_settings: MemorySettings, capsys: pytest.CaptureFixture[str]
) -> None:
    revoked = await run_json(
        cli_settings,
        capsys,
        "revoke-grant",
        "--vault-owner",
        ALICE,
        "--vault",
        "Work",
        "--grantee",
        BOB,
    )
    assert revoked == {
        "owner": ALICE,
        "vault": "Work",
        "grantee": BOB,
        "revoked": True,
        "permission": "read",
    }
    assert await admin.list_grants(shared, ALICE, "Work") == []
    async with shared.unit_of_work() as uow:
        assert [v.handle for v in await uow.vaults.accessible(BOB)] == ["Library"]
    before = await counts(shared)
    again = await run(
        cli_settings,
        capsys,
        "revoke-grant",
        "--vault-owner",
        ALICE,
        "--vault",
        "Work",
        "--grantee",
        BOB,
    )
    assert "nothing was granted" in again
    assert await counts(shared) == before  # a repeat records nothing
    async with shared.engine.connect() as conn:
        events = (
            await conn.execute(
                text(
                    "SELECT actor_identity, owner_identity, vault, target_kind, detail "
                    "FROM mem_provenance WHERE operation = 'vault_grant_revoke'"
                )
            )
        ).all()
    assert [tuple(e) for e in events] == [
        ("operator", ALICE, f"{ALICE}/Work", "vault_grant", {"permission": "read"})
    ]
    # Granted again with revoke-grant's own spelling of the grantee.
    regranted = await run_json(
        cli_settings, capsys, "grant", "--vault-owner", ALICE, "--vault", "Work",
        "--grantee", BOB, "--permission", "write",
    )  # fmt: skip
    assert (regranted["grantee"], regranted["permission"]) == (BOB, "write")


@pytest.mark.parametrize(
    "argv",
    [
        ("list-keys", "--owner", "carol@example.com"),
        ("list-vaults", "--owner", "carol@example.com"),
        ("usage", "--owner", "carol@example.com"),
        ("create-key", "--owner", "carol@example.com"),
        ("create-vault", "--owner", "carol@example.com", "--name", "Team"),
        ("list-grants", "--vault-owner", "carol@example.com", "--vault", "Library"),
        ("grant", "--vault-owner", "carol@example.com", "--vault", "Library", "--to", BOB,
         "--permission", "read"),
        ("grant", "--vault-owner", ALICE, "--vault", "Work", "--to", "carol@example.com",
         "--permission", "read"),
        ("revoke-grant", "--vault-owner", "carol@example.com", "--vault", "Work",
         "--grantee", BOB),
        ("revoke-grant", "--vault-owner", ALICE, "--vault", "Work",
         "--grantee", "carol@example.com"),
    ],
)  # fmt: skip
async def test_an_unknown_identity_is_refused_with_the_command_that_creates_it(
    shared: Database,
    cli_settings: MemorySettings,
    capsys: pytest.CaptureFixture[str],
    argv: tuple[str, ...],
) -> None:
    before = await counts(shared)
    with pytest.raises(NotFoundFailure) as refused:
        await run(cli_settings, capsys, *argv)
    assert CREATE_HINT in refused.value.message
    assert await counts(shared) == before


@pytest.mark.parametrize(
    "argv",
    [
        ("list-grants", "--vault-owner", ALICE, "--vault", "Nope"),
        ("grant", "--vault-owner", ALICE, "--vault", "Nope", "--to", BOB, "--permission", "read"),
        ("revoke-grant", "--vault-owner", ALICE, "--vault", "Nope", "--grantee", BOB),
        # Bob's own vault is not Alice's: naming it under Alice finds nothing.
        ("revoke-grant", "--vault-owner", BOB, "--vault", "Work", "--grantee", ALICE),
    ],
)
async def test_an_unknown_vault_is_refused_and_changes_nothing(
    shared: Database,
    cli_settings: MemorySettings,
    capsys: pytest.CaptureFixture[str],
    argv: tuple[str, ...],
) -> None:
    before = await counts(shared)
    with pytest.raises(NotFoundFailure) as refused:
        await run(cli_settings, capsys, *argv)
    assert "no vault" in refused.value.message
    assert "`memory-server admin list-vaults --owner" in refused.value.message
    assert await counts(shared) == before
    assert [g.grantee_identity for g in await admin.list_grants(shared, ALICE, "Work")] == [BOB]


def test_a_bad_permission_is_refused_by_the_parser(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as refused:
        parse(
            "grant", "--vault-owner", ALICE, "--vault", "Work", "--to", BOB, "--permission", "all"
        )
    assert refused.value.code == 2
    assert "invalid choice: 'all'" in capsys.readouterr().err


async def test_a_bad_permission_or_owner_is_refused_below_the_parser(shared: Database) -> None:
    # The library refuses what the parser would: a script calling admin.grant gets the same rule.
    before = await counts(shared)
    with pytest.raises(InvalidInputFailure, match="permission must be one of"):
        await admin.grant(shared, ALICE, "Work", BOB, "owner")
    with pytest.raises(InvalidInputFailure, match="e-mail address"):
        await admin.list_vaults(shared, "not an address")
    with pytest.raises(InvalidInputFailure, match="quota must be between 0 and"):
        await admin.create_identity(shared, "huge@example.com", 10**23)  # over a bigint
    assert await counts(shared) == before


FAST = WorkerConfig(batch_size=8, lease_seconds=30, heartbeat_seconds=10, poll_seconds=0.2)


async def test_usage_reports_quota_bytes_by_project_and_tokens_by_month(
    saving: MemoryServices,
    cli_settings: MemorySettings,
    capsys: pytest.CaptureFixture[str],
) -> None:
    await admin.create_identity(saving.database, ALICE, 10**9)
    caller = Caller(ALICE, "akey_a", frozenset({"read", "write"}))
    async with saving.database.unit_of_work() as uow:
        library = await uow.vaults.resolve(ALICE, "Library")
        trips = await uow.projects.create(
            library.scope, name="Trips", description=None, created_by=ALICE
        )
    saver = AssetSaver(saving)
    for seed, project in ((1, trips.id), (2, trips.id), (3, None)):
        request = SaveRequest(
            image_base64=base64.b64encode(picture(seed)).decode(),
            title=f"Picture {seed}",
            project_id=project,
        )
        await saver.save(caller, request)
    assert await job_worker(saving, FAST).drain() == 6  # visual + fused per image

    report = await run_json(cli_settings, capsys, "usage", "--owner", ALICE)
    async with saving.database.engine.connect() as conn:
        used, reserved = (
            await conn.execute(
                text(
                    "SELECT used_bytes, reserved_bytes FROM mem_asset_namespaces "
                    "WHERE owner_identity = :o"
                ),
                {"o": ALICE},
            )
        ).one()
        by_project = dict(
            (
                await conn.execute(
                    text(
                        "SELECT coalesce(a.project_id, 'unfiled'), "
                        "sum(o.bytes + coalesce(o.preview_bytes, 0)) FROM mem_assets a "
                        "JOIN mem_asset_objects o ON o.id = a.object_id WHERE a.owner_identity = :o "
                        "GROUP BY 1"
                    ),
                    {"o": ALICE},
                )
            ).all()
        )
        tokens = (
            await conn.execute(
                text(
                    "SELECT to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM'), count(*), "
                    "sum(total_tokens) FROM mem_usage_ledger WHERE owner_identity = :o "
                    "GROUP BY 1"
                ),
                {"o": ALICE},
            )
        ).one()
    assert (report["quotaBytes"], report["usedBytes"], report["reservedBytes"]) == (
        10**9,
        used,
        reserved,
    )
    assert report["availableBytes"] == 10**9 - used - reserved
    assert [(p["vault"], p["project"], p["assets"], p["bytes"]) for p in report["projects"]] == [
        ("Library", "Trips", 2, by_project[trips.id]),
        ("Library", "Unfiled", 1, by_project["unfiled"]),
    ]
    assert report["projects"][1]["projectId"] is None
    [month] = report["tokensByMonth"]
    assert (month["month"], month["calls"], month["totalTokens"]) == tuple(tokens)
    assert (month["source"], month["model"]) == ("embed_image_document", "local-hash-v1")
    assert month["totalTokens"] > 0
    table = await run(cli_settings, capsys, "usage", "--owner", ALICE)
    for words in ("Trips", "Unfiled", "embed_image_document", month["month"], str(used)):
        assert words in table


async def test_reconcile_runs_a_pass_as_the_operator_with_plain_progress_lines(
    shared: Database, cli_settings: MemorySettings, capsys: pytest.CaptureFixture[str]
) -> None:
    # Bytes a replayed upload link left in the store after its upload closed: removed at once.
    runtime = await open_runtime(cli_settings, public_base_url="http://127.0.0.1")
    try:
        async with runtime.database.unit_of_work() as uow:
            namespace = (await uow.identities.get(ALICE)).namespace_id
        stray = build_staging_key(
            cli_settings.asset_storage_env_prefix, namespace, new_id("aur"), "png"
        )
        await runtime.store.put(stray, b"replayed", content_type=content_type_for_key(stray))
    finally:
        await runtime.close()
    capsys.readouterr()
    await run_in_loop(cli_settings, parse("reconcile", "--json"))
    captured = capsys.readouterr()
    # Unconfigured structlog (no run_command here) logs store_reconciled to stdout; the real
    # command logs to stderr. The JSON document is what follows.
    report = json.loads(captured.out[captured.out.index("{") :])
    assert (report["namespaces"], report["removed"], report["removedBytes"]) == (2, 1, 8)
    assert captured.err.splitlines() == [
        "reconciling namespaces: 1/2",
        "reconciling namespaces: 2/2",
    ]
    async with shared.engine.connect() as conn:
        actors = (
            (
                await conn.execute(
                    text(
                        "SELECT actor_identity FROM mem_provenance WHERE operation = 'asset_reconcile'"
                    )
                )
            )
            .scalars()
            .all()
        )
    assert actors == ["operator"]


def test_progress_draws_a_bar_on_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    with Progress("counting", terminal=True) as progress:
        for done in range(1, 4):
            progress.advance(done, 3)
    err = capsys.readouterr().err
    assert "counting" in err and "100%" in err
    assert "counting: 3/3" not in err  # not the plain lines


def test_progress_writes_plain_lines_otherwise(capsys: pytest.CaptureFixture[str]) -> None:
    with Progress("counting", terminal=False) as progress:
        progress.advance(1, 2, "alice")
        progress.advance(2, 2)
    assert capsys.readouterr().err.splitlines() == ["counting: 1/2 alice", "counting: 2/2"]


def test_a_long_table_title_is_printed_whole_on_its_own_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A backup's title names its directory; wrapped to the table's width it came out in pieces
    # (seen with pytest-xdist's longer temporary paths).
    title = "backup in /" + "/".join(["a-rather-long-directory-name"] * 6) + "/backup"
    admin_output.print_table(title, ("schema", "assets"), [("0021", 3)], empty="none")
    assert capsys.readouterr().out.splitlines()[0] == title
