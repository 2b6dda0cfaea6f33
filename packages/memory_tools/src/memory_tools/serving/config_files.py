"""Merge one server's entry into a client's configuration file, safely.

``memory-server connect --write`` (:mod:`memory_tools.serving.connect_command`) reads the
client's file first (:func:`read_config`), so a file that is not valid JSON or TOML is refused in
one line before anything is created or changed. :func:`merged_text` then replaces this server's
entry only: every other server and every other top-level key stays as it was (a TOML file keeps
its comments and layout: tomlkit). :func:`write_config` copies the previous file to a backup
beside it, then writes the new text to a temporary file in the same directory and renames it
over the old one, so a reader sees the old file or the new one, never half of one.

A file holding a key is made readable by its owner only (0600); no file is ever made more
readable than it was. A symbolic link (a dotfiles checkout) is followed: its target is written,
the link stays.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
import tomllib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import tomlkit
from tomlkit.exceptions import TOMLKitError

from memory_tools.errors import InvalidInputFailure
from memory_tools.serving.client_configs import ClientSetup, toml_snippet

# A new file that holds no key: readable by others, as the clients themselves create theirs.
NEW_FILE_MODE = 0o644
SECRET_FILE_MODE = 0o600


class ConfigFileRefused(InvalidInputFailure):
    """The client's file cannot be merged into (not valid JSON/TOML, or not the expected shape).

    Nothing was changed.
    """


@dataclass(frozen=True)
class ExistingConfig:
    """A client's file as it is now: its text (None when there is none) and what it holds."""

    path: Path
    text: str | None
    document: Any


@dataclass(frozen=True)
class Written:
    """What :func:`write_config` did: the file, its backup (None: there was no file before)."""

    path: Path
    backup: Path | None
    changed: bool


def read_config(setup: ClientSetup, path: Path) -> ExistingConfig:
    """The file at ``path`` as ``setup``'s client format; refused when it cannot be merged into."""
    target = path.resolve()
    try:
        text = target.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ExistingConfig(target, None, _empty(setup))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigFileRefused(f"{path}: cannot be read ({exc}); nothing was changed") from exc
    if not text.strip():
        return ExistingConfig(target, text, _empty(setup))
    document = _parse(setup, path, text)
    servers = document.get(setup.section)
    if servers is not None and not isinstance(servers, dict):
        raise ConfigFileRefused(
            f"{path}: {setup.section!r} is not a table of servers; fix it by hand, "
            "nothing was changed"
        )
    if setup.inputs and not isinstance(document.get("inputs", []), list):
        raise ConfigFileRefused(f"{path}: 'inputs' is not a list; nothing was changed")
    return ExistingConfig(target, text, document)


def _empty(setup: ClientSetup) -> Any:
    return tomlkit.document() if setup.file_format == "toml" else {}


def _parse(setup: ClientSetup, path: Path, text: str) -> Any:
    if setup.file_format == "toml":
        try:
            return tomlkit.parse(text)
        except TOMLKitError as exc:
            raise ConfigFileRefused(
                f"{path}: not valid TOML ({exc}); fix it or use --path, nothing was changed"
            ) from exc
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        # VS Code's and Cursor's editors accept comments and trailing commas; writing the file
        # back as JSON would drop them, so such a file is left for its owner to edit.
        raise ConfigFileRefused(
            f"{path}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}; "
            "comments and trailing commas are not JSON); add the entry by hand or fix the "
            "file, nothing was changed"
        ) from exc
    if not isinstance(document, dict):
        raise ConfigFileRefused(f"{path}: not a JSON object; nothing was changed")
    return document


def merged_text(setup: ClientSetup, existing: ExistingConfig) -> str:
    """``existing`` with ``setup``'s entry in place of any entry of the same name."""
    document = existing.document
    if setup.file_format == "toml":
        return _merged_toml(setup, existing)
    servers = document.setdefault(setup.section, {})
    servers[setup.name] = setup.entry
    if setup.inputs:
        ours = {entry["id"] for entry in setup.inputs}
        kept = [
            entry
            for entry in document.get("inputs", [])
            if not (isinstance(entry, dict) and entry.get("id") in ours)  # pyright: ignore[reportUnknownMemberType]
        ]
        document["inputs"] = [*kept, *setup.inputs]
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def _merged_toml(setup: ClientSetup, existing: ExistingConfig) -> str:
    """The TOML text with this server's table last, everything else as the user wrote it.

    TOML can spread a table over dotted keys, inline tables and headers; editing it in place
    can move a key into the wrong table (a top-level key written after a new header belongs to
    that header). So the old entry is removed, the new one appended as its own
    ``[section.name]`` table, and the result parsed back: it must hold exactly what the file held,
    with this server's entry replaced, or nothing is written.
    """
    document = existing.document
    servers = document.get(setup.section)
    if servers is not None and setup.name in servers:
        del servers[setup.name]
    kept = tomlkit.dumps(document).rstrip("\n")  # pyright: ignore[reportUnknownMemberType]
    added = toml_snippet(setup.section, setup.name, setup.entry)
    text = f"{kept}\n\n{added}" if kept else added
    expected: dict[str, Any] = tomllib.loads(existing.text or "")
    expected.setdefault(setup.section, {})[setup.name] = setup.entry
    try:
        merged = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        merged = None
    if merged != expected:
        raise ConfigFileRefused(
            f"{existing.path}: its {setup.section!r} cannot take a [{setup.section}.{setup.name}] "
            "table (an inline table?); add the entry by hand, nothing was changed"
        )
    return text


def write_config(existing: ExistingConfig, text: str, *, holds_secret: bool) -> Written:
    """Write ``text`` over ``existing``'s file: backup first, then atomically.

    Unchanged text is not written again (a second run with the same entry changes nothing).
    """
    path = existing.path
    if existing.text == text:
        if holds_secret:
            _restrict(path)
        return Written(path, None, changed=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = NEW_FILE_MODE
    backup = None
    if existing.text is not None:
        mode = stat.S_IMODE(path.stat().st_mode)
        backup = _backup(path)
    if holds_secret:
        mode &= SECRET_FILE_MODE
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.chmod(temporary, mode)
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return Written(path, backup, changed=True)


def _restrict(path: Path) -> None:
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & ~SECRET_FILE_MODE:
        path.chmod(mode & SECRET_FILE_MODE)


def _backup(path: Path) -> Path:
    """A copy of ``path`` beside it, named for this moment; readable by its owner only.

    Each run keeps its own backup: a second run does not overwrite the first one's copy of the
    file as the user left it.
    """
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    data = path.read_bytes()
    for attempt in range(100):
        suffix = f".bak-{stamp}" if attempt == 0 else f".bak-{stamp}-{attempt}"
        backup = path.with_name(path.name + suffix)
        try:
            descriptor = os.open(backup, os.O_WRONLY | os.O_CREAT | os.O_EXCL, SECRET_FILE_MODE)
        except FileExistsError:
            continue
        with os.fdopen(descriptor, "wb") as stream:
            stream.write(data)
        return backup
    raise ConfigFileRefused(f"{path}: too many backups named {path.name}.bak-{stamp}-*")
