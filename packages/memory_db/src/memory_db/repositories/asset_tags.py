"""Adding and removing an asset's tags in one statement (``image_asset_update``'s addTags).

Two callers adding a tag each to the same image must both see their tag land. A read of the
tags, a change in Python and a write of the whole list would lose one of them when both read
before either wrote; so the change is made by the database, on the row as it is when the
statement gets its lock: the first step locks the row (``FOR UPDATE`` waits for a concurrent
change to commit, then reads the row as that change left it), the next computes the new list
from it, the last writes it. Existing tags keep their place, added ones follow in the order
given, removed ones go; a tag already there is not added twice.

The list is written only when it changes and stays within ``max_tags``; the answer says which
(``TagChange``), so the workflow refuses an over-long result without having written it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, text
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.types import Integer, Text

from memory_db.repositories.records import VaultScope

# Visible statuses only: a deleted image's tags are not changed (it must be restored first).
_CHANGE_TAGS = text(
    """
    WITH locked AS (
        SELECT id, tags FROM mem_assets
        WHERE owner_identity = :owner AND vault = :vault AND id = :asset_id
          AND status IN ('processing', 'ready', 'failed')
        FOR UPDATE
    ),
    merged AS (
        SELECT locked.id, locked.tags AS before,
               coalesce((
                   SELECT jsonb_agg(kept.tag ORDER BY kept.first)
                   FROM (
                       SELECT every_tag.tag, min(every_tag.pos) AS first
                       FROM (
                           SELECT old.tag, old.pos
                           FROM jsonb_array_elements_text(locked.tags)
                                WITH ORDINALITY AS old(tag, pos)
                           UNION ALL
                           -- after every existing tag, in the order given
                           SELECT new.tag, 1000000 + new.pos
                           FROM unnest(:add) WITH ORDINALITY AS new(tag, pos)
                       ) AS every_tag
                       WHERE NOT (every_tag.tag = ANY(:remove))
                       GROUP BY every_tag.tag
                   ) AS kept
               ), '[]'::jsonb) AS after
        FROM locked
    ),
    written AS (
        UPDATE mem_assets
        SET tags = merged.after, updated_at = now(), updated_by = :actor
        FROM merged
        WHERE mem_assets.owner_identity = :owner AND mem_assets.vault = :vault
          AND mem_assets.id = merged.id
          AND merged.after IS DISTINCT FROM merged.before
          AND jsonb_array_length(merged.after) <= :max_tags
        RETURNING mem_assets.id
    )
    SELECT merged.before, merged.after, EXISTS (SELECT 1 FROM written) AS written
    FROM merged
    """
).bindparams(
    bindparam("add", type_=ARRAY(Text)),
    bindparam("remove", type_=ARRAY(Text)),
    bindparam("max_tags", type_=Integer),
)


@dataclass(frozen=True, slots=True)
class TagChange:
    """An asset's tags before and after a change, and whether the change was written.

    ``written`` is false when nothing changed, or when ``after`` would hold more than the
    tags allowed (then the stored tags are still ``before``).
    """

    before: list[str]
    after: list[str]
    written: bool


def change_tags_statement(
    scope: VaultScope,
    asset_id: str,
    *,
    add: list[str],
    remove: list[str],
    max_tags: int,
    actor: str,
) -> tuple[Any, dict[str, Any]]:
    """The statement and its parameters; its one row (or none: no such visible asset)."""
    return _CHANGE_TAGS, {
        "owner": scope.owner_identity,
        "vault": scope.physical_vault,
        "asset_id": asset_id,
        "add": add,
        "remove": remove,
        "max_tags": max_tags,
        "actor": actor,
    }


def tag_change(row: Any) -> TagChange:
    """The ``TagChange`` of the statement's row."""
    return TagChange(before=list(row[0]), after=list(row[1]), written=bool(row[2]))
