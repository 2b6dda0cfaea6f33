"""Restoring a dump without trusting it: only our schema, restored without superuser rights.

A ``pg_dump`` archive is a list of SQL statements. Restored as PostgreSQL's superuser, a forged
one runs anything: a materialized view calling a function that runs ``COPY ... TO PROGRAM``
executes a program as the database's OS user. The backup's signature
(``memory_tools.operations.backup``)
keeps out dumps written by anyone without the key; this module is the second wall, for a
signed dump that still holds more than our schema (a stolen key, a tampered source database):

1. Before anything runs, the archive's table of contents (``pg_restore --list``) may hold only
   the kinds and names our migrations create: the ``vector`` extension, our tables (the models'
   tables, ``alembic_version`` and versioned vector tables) with their data, constraints and
   indexes, the function and trigger of the folder tree, and the function and triggers that
   notify changes of access. Anything else (another function or procedure, a view or
   materialized view, another trigger, an event trigger, another extension, a large object,
   ...) is refused by kind and name.
2. The dump is restored by ``memory_restore``, a login role made for the restore: not a
   superuser, not the database's owner, with only ``USAGE`` and ``CREATE`` on schema ``public``
   (``--no-owner --no-privileges``). The extension is created beforehand by the superuser and
   left out of the restore. So a statement that slips through can do what an ordinary user can
   (create tables, read them), never read or write files or run programs.
3. After it, the restored schema (``pg_dump --schema-only``) must equal, object by object, the
   schema this build's migrations create at the backup's revision (with the same vector
   tables), built beside it in a scratch database. Definitions are compared, not only names:
   a CHECK or DEFAULT expression of ours rewritten to call something else is refused too.
4. Then the objects are handed to the superuser the server connects as, and the role is
   dropped. Only then does anything run as superuser (the migrations to this build's head).
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import anyio
import asyncpg  # type: ignore[import-untyped]
from sqlalchemy.ext.asyncio import AsyncSession

from memory_db.database import (
    DEFAULT_DATABASE,
    EmbeddedPostgres,
    create_engine,
    drop_database,
    ensure_database,
    to_plain_url,
)
from memory_db.errors import InvalidInput, MemoryDbError
from memory_db.migrate import upgrade
from memory_db.schema import Base
from memory_db.vectors.ddl import ElementType, check_identifier, create_index

RESTORE_ROLE = "memory_restore"
REFERENCE_DATABASE = "memory_restore_reference"
FOLDER_TREE_FUNCTION = "mem_asset_folders_check_tree()"
FOLDER_TREE_TRIGGER = "mem_asset_folders trg_mem_asset_folders_check_tree"
# Revision 0021: the function and triggers that count and notify changes of access.
ACCESS_FUNCTION = "mem_access_changed()"
ACCESS_TRIGGERS = frozenset(
    f"{table} {table}_access_changed{suffix}"
    for table in ("mem_api_keys", "mem_vault_grants", "mem_vaults")
    for suffix in ("", "_truncate")
)
# Revision 0022: ending a live web session, or changing one, is a change of access too.
SESSIONS_ENDED_FUNCTION = "mem_web_sessions_ended()"
SESSION_TRIGGERS = frozenset(
    f"mem_web_sessions mem_web_sessions_{name}"
    for name in ("ended", "access_changed", "access_changed_truncate")
)
# Longest first: "TABLE DATA" must not be read as "TABLE" with schema "DATA".
_KINDS = ("FK CONSTRAINT", "TABLE DATA", "CONSTRAINT", "EXTENSION", "FUNCTION", "TRIGGER",
          "COMMENT", "INDEX", "TABLE")  # fmt: skip
_ENTRY = re.compile(r"^(\d+); (\d+) (\d+) (.*)$")
_EMBEDDING_TYPE = re.compile(r"^(halfvec|vector)\((\d+)\)$")


class DumpRefused(MemoryDbError):
    """The dump holds something our schema never creates; nothing of it is kept."""


@dataclass(frozen=True)
class TocEntry:
    """One line of ``pg_restore --list``: its kind, schema and name (``-`` when none)."""

    line: str
    kind: str
    schema: str
    name: str


def parse_toc_line(line: str) -> TocEntry | None:
    """The entry on one line of ``pg_restore --list`` (None for comments and blank lines).

    An entry of a kind our schema never has comes back with kind ``""``: it is refused.
    """
    stripped = line.rstrip("\n")
    if not stripped.strip() or stripped.lstrip().startswith(";"):
        return None
    match = _ENTRY.match(stripped)
    if match is None:
        return TocEntry(stripped, "", "", stripped)
    rest = match.group(4)
    for kind in _KINDS:
        if rest.startswith(kind + " "):
            schema, _, tail = rest[len(kind) + 1 :].partition(" ")
            # The owner is the last word (empty for an extension's comment).
            name = tail.rsplit(" ", 1)[0] if " " in tail else tail
            return TocEntry(stripped, kind, schema, name)
    return TocEntry(stripped, "", "", rest)


def _our_table(name: str) -> bool:
    if name in Base.metadata.tables or name == "alembic_version":
        return True
    try:
        check_identifier(name)  # a versioned vector table (its definition is compared later)
    except InvalidInput:
        return False
    return True


def refusal(entry: TocEntry) -> str | None:
    """Why our schema never holds ``entry``, or None when it may."""
    kind, schema, name = entry.kind, entry.schema, entry.name
    allowed = False
    if kind == "EXTENSION":
        allowed = schema == "-" and name == "vector"
    elif kind == "COMMENT":
        allowed = schema == "-" and name == "EXTENSION vector"
    elif schema != "public":
        allowed = False
    elif kind == "FUNCTION":
        allowed = name in (FOLDER_TREE_FUNCTION, ACCESS_FUNCTION, SESSIONS_ENDED_FUNCTION)
    elif kind == "TRIGGER":
        allowed = name == FOLDER_TREE_TRIGGER or name in ACCESS_TRIGGERS or name in SESSION_TRIGGERS
    elif kind in ("TABLE", "TABLE DATA"):
        allowed = _our_table(name)
    elif kind in ("CONSTRAINT", "FK CONSTRAINT"):
        table, _, constraint = name.partition(" ")
        allowed = _our_table(table) and bool(constraint)
    elif kind == "INDEX":
        allowed = bool(re.fullmatch(r"[a-z_][a-z0-9_]*", name))
    if allowed:
        return None
    what = f"{kind} {schema}.{name}" if kind else name.strip()
    return f"the dump holds {what}, which this server's schema never creates"


async def tool_output(argv: list[str], env: Mapping[str, str]) -> str:
    """Run a PostgreSQL client tool (``pg_dump``, ``pg_restore``) and return what it printed.

    A failure is ``DumpFailed`` naming the tool and the last line it wrote to stderr.
    """
    from memory_db.dumps import DumpFailed  # dumps imports this module

    result = await anyio.run_process(argv, env=dict(env), check=False)
    if result.returncode != 0:
        lines = [line for line in result.stderr.decode(errors="replace").splitlines() if line]
        last = lines[-1] if lines else f"exit status {result.returncode}"
        raise DumpFailed(f"{Path(argv[0]).name} failed: {last}")
    return result.stdout.decode("utf-8", errors="replace")


async def check_table_of_contents(dump: Path) -> list[TocEntry]:
    """The dump's entries, or ``DumpRefused`` naming the first our schema never creates."""
    from memory_db.dumps import pg_tool

    listing = await tool_output([str(pg_tool("pg_restore")), "--list", str(dump)], {})
    entries = [entry for line in listing.splitlines() if (entry := parse_toc_line(line))]
    for entry in entries:
        reason = refusal(entry)
        if reason is not None:
            raise DumpRefused(reason)
    return entries


def _as_role(url: str, role: str) -> str:
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{role}@{host}"))


async def _execute(url: str, *statements: str) -> None:
    conn = await asyncpg.connect(to_plain_url(url))  # pyright: ignore[reportUnknownMemberType]
    try:
        for statement in statements:
            await conn.execute(statement)  # pyright: ignore[reportUnknownMemberType]
    finally:
        await conn.close()  # pyright: ignore[reportUnknownMemberType]


async def _vector_tables(url: str) -> dict[str, tuple[int, ElementType]]:
    """The restored tables that are not the models': each must be a vector table."""
    conn = await asyncpg.connect(to_plain_url(url))  # pyright: ignore[reportUnknownMemberType]
    try:
        rows = await conn.fetch(  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
            "SELECT c.relname, format_type(a.atttypid, a.atttypmod) AS embedding "
            "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'embedding' "
            "AND NOT a.attisdropped WHERE n.nspname = 'public' AND c.relkind = 'r'"
        )
    finally:
        await conn.close()  # pyright: ignore[reportUnknownMemberType]
    found: dict[str, tuple[int, ElementType]] = {}
    for row in rows:  # pyright: ignore[reportUnknownVariableType]
        name = str(row["relname"])  # pyright: ignore[reportUnknownArgumentType]
        if name in Base.metadata.tables or name == "alembic_version":
            continue
        match = _EMBEDDING_TYPE.match(str(row["embedding"] or ""))  # pyright: ignore[reportUnknownArgumentType]
        if match is None:
            raise DumpRefused(f"the dump holds table public.{name}, which is not a vector table")
        element: ElementType = "vector" if match.group(1) == "vector" else "halfvec"
        found[name] = (int(match.group(2)), element)
    return found


def schema_objects(text: str) -> dict[str, str]:
    """``pg_dump --schema-only`` text as {object header: its statements}, whitespace-normalised.

    The restrict lines carry a random key per run and are left out.
    """
    objects: dict[str, str] = {}
    header = ""
    body: list[str] = []
    lines = [
        line for line in text.splitlines() if not line.startswith(("\\restrict", "\\unrestrict"))
    ]
    for index, line in enumerate(lines):
        if line.startswith("-- Name: ") and index > 0 and lines[index - 1] == "--":
            if header:
                objects[header] = " ".join(" ".join(body).split())
            header, body = line.removeprefix("-- Name: "), []
        elif header and line != "--":
            body.append(line)
    if header:
        objects[header] = " ".join(" ".join(body).split())
    return objects


async def _schema_text(url: str) -> str:
    from memory_db.dumps import pg_tool, tool_target

    target = tool_target(url)
    argv = [str(pg_tool("pg_dump")), "--schema-only", "--no-owner", "--no-privileges",
            "--dbname", target.url]  # fmt: skip
    return await tool_output(argv, target.env)


async def _reference_schema(
    embedded: EmbeddedPostgres, revision: str, vector_tables: Mapping[str, tuple[int, ElementType]]
) -> dict[str, str]:
    """What this build's migrations create at ``revision``, with the same vector tables.

    Passed through a dump and a restore as the backup's schema was: PostgreSQL prints a CHECK
    expression re-read from a dump with fewer parentheses than the one a migration wrote.
    """
    from memory_db.dumps import pg_dump, pg_tool, tool_target

    admin = embedded.admin_url()
    url = embedded.url(REFERENCE_DATABASE)
    await drop_database(admin, REFERENCE_DATABASE)
    await ensure_database(admin, REFERENCE_DATABASE)
    try:
        engine = create_engine(url, pool_size=1, max_overflow=0)
        try:
            await upgrade(engine, revision)
            async with AsyncSession(engine) as session, session.begin():
                for name, (dimensions, element) in sorted(vector_tables.items()):
                    await create_index(session, name, dimensions=dimensions, element=element)
        finally:
            await engine.dispose()
        with tempfile.TemporaryDirectory(prefix="memory-reference-") as scratch:
            dump = Path(scratch) / "reference.dump"
            await pg_dump(tool_target(url), dump, snapshot=None)
            await drop_database(admin, REFERENCE_DATABASE)
            await ensure_database(admin, REFERENCE_DATABASE)
            target = tool_target(url)
            # Our own schema, just made: restored as the superuser.
            await tool_output(
                [str(pg_tool("pg_restore")), "--no-owner", "--no-privileges", "--exit-on-error",
                 "--single-transaction", "--schema-only", "--dbname", target.url, str(dump)],
                target.env,
            )  # fmt: skip
        return schema_objects(await _schema_text(url))
    finally:
        await drop_database(admin, REFERENCE_DATABASE)


def _first_difference(restored: Mapping[str, str], reference: Mapping[str, str]) -> str | None:
    for header in sorted(restored.keys() | reference.keys()):
        if header not in reference:
            return f"{header} is not in this server's schema"
        if header not in restored:
            return f"{header} is missing"
        if restored[header] != reference[header]:
            return f"{header} is defined differently from this server's schema"
    return None


async def restore_guarded(
    embedded: EmbeddedPostgres, dump: Path, entries: list[TocEntry], revision: str
) -> None:
    """Restore ``dump`` (already checked: :func:`check_table_of_contents`) into the new database.

    Raises ``DumpRefused`` when the restored schema is not ours; the caller discards the data
    directory then.
    """
    from memory_db.dumps import pg_tool, tool_target

    admin = embedded.url(DEFAULT_DATABASE)
    await _execute(
        admin,
        "CREATE EXTENSION IF NOT EXISTS vector",
        f"CREATE ROLE {RESTORE_ROLE} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION "
        "NOBYPASSRLS",
        f"GRANT USAGE, CREATE ON SCHEMA public TO {RESTORE_ROLE}",
        f"REVOKE TEMPORARY ON DATABASE {DEFAULT_DATABASE} FROM PUBLIC",
    )
    # The superuser made the extension: its entry (and its comment, which only its owner may
    # set) are left out of what the role restores.
    kept = [e.line for e in entries if e.kind not in ("EXTENSION", "COMMENT")]
    with tempfile.TemporaryDirectory(prefix="memory-restore-") as scratch:
        listing = Path(scratch) / "restore.list"
        listing.write_text("\n".join(kept) + "\n", encoding="utf-8")
        target = tool_target(_as_role(admin, RESTORE_ROLE))
        await tool_output(
            [str(pg_tool("pg_restore")), "--no-owner", "--no-privileges", "--exit-on-error",
             "--single-transaction", f"--use-list={listing}", "--dbname", target.url, str(dump)],
            target.env,
        )  # fmt: skip
    restored = schema_objects(await _schema_text(admin))
    reference = await _reference_schema(embedded, revision, await _vector_tables(admin))
    difference = _first_difference(restored, reference)
    if difference is not None:
        raise DumpRefused(f"the restored schema is not this server's: {difference}")
    await _execute(
        admin,
        f"REASSIGN OWNED BY {RESTORE_ROLE} TO postgres",
        f"DROP OWNED BY {RESTORE_ROLE}",
        f"GRANT TEMPORARY ON DATABASE {DEFAULT_DATABASE} TO PUBLIC",
    )
    await _execute(embedded.admin_url(), f"DROP ROLE {RESTORE_ROLE}")
