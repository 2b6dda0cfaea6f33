"""Characters a name may not contain, shared by project, folder and vault names."""

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
    return any(unicodedata.category(ch) in _FORBIDDEN_CATEGORIES or ord(ch) in _TAGS for ch in name)
