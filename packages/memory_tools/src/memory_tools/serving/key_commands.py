"""``memory-server admin pause-key KEY_ID`` and ``resume-key KEY_ID``: an agent's switch.

A paused key is refused (``unauthenticated``, saying it is paused) on its very next call in
every server process, and its web sessions stop, until it is resumed; ``revoke-key`` ends it
for good. Repeating either changes nothing and says so; a revoked key cannot be paused or
resumed (exit status 1 with the reason). The rules are the Keys page's
(``memory_tools.workflows.keys``); the operator may switch any owner's key.
"""

from __future__ import annotations

import argparse

from memory_tools.operations import admin
from memory_tools.serving.admin_output import print_json, when
from memory_tools.serving.subcommands import OpenedDatabase


def key_id_arguments(parser: argparse.ArgumentParser) -> None:
    """The one argument of the key commands: the key's id (``akey_...``)."""
    parser.add_argument("key_id", help="the key's id (akey_...), as list-keys shows it")


async def _switch(opened: OpenedDatabase, args: argparse.Namespace, *, paused: bool) -> None:
    record, changed = await admin.set_key_paused(opened.database, args.key_id, paused)
    if args.json:
        print_json(
            {
                "keyId": record.id,
                "owner": record.owner_identity,
                "state": record.state,
                "changed": changed,
                "pausedAt": when(record.paused_at),
            }
        )
        return
    verb = "paused" if paused else "resumed"
    print(f"key {record.id} {verb}" if changed else f"key {record.id} was already {record.state}")


async def pause_key(opened: OpenedDatabase, args: argparse.Namespace) -> None:
    """Pause a key: refused until resumed."""
    await _switch(opened, args, paused=True)


async def resume_key(opened: OpenedDatabase, args: argparse.Namespace) -> None:
    """Resume a paused key."""
    await _switch(opened, args, paused=False)
