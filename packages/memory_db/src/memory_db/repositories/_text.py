"""Characters a name may not contain, shared by project, folder and vault names."""

from __future__ import annotations

import re

# C0 controls, DEL, C1 controls (U+0080-U+009F), and the Unicode bidirectional formatting
# characters (marks, embeddings, overrides, isolates), which make a name display differently
# from what it is ("Trips\u202egpj.exe" shows as "Tripsexe.jpg").
_FORBIDDEN_IN_NAMES = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def has_forbidden_characters(name: str) -> bool:
    """True when ``name`` holds a control character or a bidirectional formatting character."""
    return _FORBIDDEN_IN_NAMES.search(name) is not None
