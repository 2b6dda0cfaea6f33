"""Invisible characters: what a name may not contain, and what caller text loses.

Project, folder and vault names (and key labels) refuse them; every other text a caller gives
(an image's title, description, alt text and tags, a project's description, a search query,
source reference values) has them dropped by :func:`drop_forbidden_characters`, through
``memory_tools.ingest.inputs`` which every entry point's workflow calls (MCP, HTTP, web, CLI
import). One rule, so text that looks the same is the same text everywhere.
"""

from __future__ import annotations

import unicodedata

# Unicode categories a name may not hold anywhere:
# - Cc: C0 controls, DEL and C1 controls (U+0080-U+009F);
# - Cf: format characters, which are invisible or change how text around them shows: the
#   bidirectional marks, embeddings, overrides and isolates ("Trips\u202egpj.exe" shows as
#   "Tripsexe.jpg"), zero-width space/joiners, word joiner U+2060, soft hyphen U+00AD, the
#   byte order mark U+FEFF and the tag characters U+E0001-U+E007F;
# - Zl, Zp: the line and paragraph separators U+2028/U+2029, which break a name into lines.
# Two names that look the same must be the same name.
_FORBIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})
# How a refusal says it, after "<what> name ".
FORBIDDEN_CHARACTERS_RULE = (
    "must not contain control characters, bidirectional overrides or other invisible "
    "characters (zero-width, soft hyphen, BOM, tags, line separators)"
)
# The whole Tags block, including its unassigned code points (category Cn, not Cf).
_TAGS = range(0xE0000, 0xE0080)


def has_forbidden_characters(name: str) -> bool:
    """True when ``name`` holds a control, format (invisible) or line-separator character."""
    return any(_forbidden(ch) for ch in name)


# Line breaks and tabs are Cc too, but multi-line text (a description) needs them.
TEXT_WHITESPACE = frozenset("\t\n\r")


def _forbidden(ch: str) -> bool:
    return unicodedata.category(ch) in _FORBIDDEN_CATEGORIES or ord(ch) in _TAGS


def drop_forbidden_characters(text: str, keep: frozenset[str] = TEXT_WHITESPACE) -> str:
    """``text`` without the characters a name refuses, except those in ``keep``.

    Control characters (C0, DEL, C1), format characters (bidirectional overrides, zero-width
    space and joiners, soft hyphen, BOM, tag characters) and line/paragraph separators go; tab,
    line feed and carriage return stay by default. A NUL is dropped here too: callers that must
    refuse it (PostgreSQL text cannot hold one) check before.
    """
    return "".join(ch for ch in text if ch in keep or not _forbidden(ch))
