"""What each MCP client reads to reach this server: its file, its format and its command line.

``memory-server connect CLIENT`` (:mod:`memory_tools.serving.connect_command`) hands a
:class:`Connection` (where the server is, the key, how to start it over stdio) to
:func:`client_setup`, which says, for that client, where its configuration file is, the entry to
merge there (:class:`ClientSetup`), the command line that adds the same entry where the client
has one, and the environment variable the user must set when the entry refers to one.

Each client's facts come from its own documentation (checked December 2026):

- ``claude-code``: ``claude mcp add --transport http NAME URL --header ...``; the user's servers in
  ``~/.claude.json``, a project's in ``.mcp.json`` (``{"mcpServers": {NAME: {"type": "http",
  "url", "headers"}}}``), which expands ``${VAR}``.
- ``claude-desktop``: ``claude_desktop_config.json`` in the platform's application-data folder,
  stdio servers only (``command``, ``args``, ``env``).
- ``cursor``: ``~/.cursor/mcp.json`` or a project's ``.cursor/mcp.json`` (``url``, ``headers``),
  which expands ``${env:VAR}``.
- ``vscode``: the user profile's ``mcp.json`` or a workspace's ``.vscode/mcp.json``
  (``{"servers": {...}, "inputs": [...]}``); ``${input:ID}`` asks for a secret once and keeps it
  in VS Code's secret storage. ``code --add-mcp JSON`` adds a server to the user profile.
- ``codex``: ``~/.codex/config.toml`` (``$CODEX_HOME``) or a project's ``.codex/config.toml``,
  ``[mcp_servers.NAME]`` with ``url`` and ``bearer_token_env_var`` (it refuses an inline bearer
  token); ``codex mcp add NAME --url URL --bearer-token-env-var VAR``.
- ``windsurf``: ``~/.codeium/windsurf/mcp_config.json`` (``serverUrl``, ``headers``), which
  expands ``${env:VAR}``.
- ``generic``: no file; the plain facts (URL, header, stdio command line).

A file that is meant to be shared (a project's) or whose client can read the environment refers
to the key by an environment variable instead of holding it; ``claude-desktop``'s and the
Claude Code user file's entries hold the key itself (those clients read no variable there).
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PureWindowsPath
from typing import Any, Literal

CLIENTS = ("claude-code", "claude-desktop", "cursor", "vscode", "codex", "windsurf", "generic")
"""The clients ``connect`` knows, in the order of its help."""

Transport = Literal["http", "stdio"]
Scope = Literal["user", "project"]
FileFormat = Literal["json", "toml"]

DEFAULT_SERVER_NAME = "image-memory"
# What a server name may be: a bare TOML key and a JSON key every client accepts (Codex allows
# letters, digits, '-' and '_' only).
SERVER_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
# The variable the stdio server reads its key from (memory_tools.serving.bootstrap).
STDIO_KEY_VARIABLE = "MEMORY_API_KEY"


@dataclass(frozen=True)
class _ClientFacts:
    """What one client supports and where its entry goes.

    ``transports`` and ``scopes``: the first of each is its default; ``file_format`` and
    ``section``: its file's format and the top-level key that holds its servers there.
    """

    transports: tuple[Transport, ...]
    scopes: tuple[Scope, ...]
    file_format: FileFormat | None
    section: str


_FACTS: Mapping[str, _ClientFacts] = {
    "claude-code": _ClientFacts(("http", "stdio"), ("user", "project"), "json", "mcpServers"),
    "claude-desktop": _ClientFacts(("stdio",), ("user",), "json", "mcpServers"),
    "cursor": _ClientFacts(("http", "stdio"), ("user", "project"), "json", "mcpServers"),
    "vscode": _ClientFacts(("http", "stdio"), ("user", "project"), "json", "servers"),
    "codex": _ClientFacts(("http", "stdio"), ("user", "project"), "toml", "mcp_servers"),
    "windsurf": _ClientFacts(("http", "stdio"), ("user",), "json", "mcpServers"),
    "generic": _ClientFacts(("http", "stdio"), (), None, "mcpServers"),
}
TRANSPORTS: Mapping[str, tuple[Transport, ...]] = {c: f.transports for c, f in _FACTS.items()}
"""Which transports each client supports (the first is its default)."""
SCOPES: Mapping[str, tuple[Scope, ...]] = {c: f.scopes for c, f in _FACTS.items()}
"""Which configuration files (scopes) each client has (the first is its default)."""


@dataclass(frozen=True)
class Connection:
    """How a client reaches this server.

    ``url``: the MCP endpoint; ``key``: the API key's secret; ``stdio_command``: the command line
    that serves MCP over stdio; ``stdio_env``: what that server needs in its environment besides
    the key (its data directory, its database).
    """

    name: str
    url: str
    key: str
    stdio_command: tuple[str, ...]
    stdio_env: Mapping[str, str] = field(default_factory=dict[str, str])
    transport: Transport = "http"
    scope: Scope = "user"

    @property
    def key_variable(self) -> str:
        """The environment variable a configuration refers to for the key.

        Named after the server (``image-memory`` → ``IMAGE_MEMORY_API_KEY``), so two servers
        configured side by side do not share one.
        """
        stem = re.sub(r"[^A-Z0-9]", "_", self.name.upper())
        if stem[0].isdigit():
            stem = f"MCP_{stem}"
        return f"{stem}_API_KEY"


@dataclass(frozen=True)
class Places:
    """Where a client's files are: the user's home, the project directory, the platform.

    ``platform`` is ``sys.platform``'s value (``linux``, ``darwin``, ``win32``); ``environ``
    supplies ``APPDATA`` (Windows) and ``CODEX_HOME``.
    """

    home: Path
    project: Path
    platform: str
    environ: Mapping[str, str]


@dataclass(frozen=True)
class ClientSetup:
    """What one client needs: the entry for its file, its command line, the variable to set.

    ``section``: the top-level key that holds the servers (``mcpServers``, ``servers``,
    ``mcp_servers``); ``entry``: this server's entry there. ``inputs``: entries of VS Code's
    top-level ``inputs`` list (replacing any with the same ``id``). ``command``: the command line
    that adds the same server, where the client has one. ``variables``: environment variables
    the user must set, with their values. ``holds_secret``: the entry holds the key itself, so
    the file must be readable by its owner only. ``notes``: what the user should know.
    """

    client: str
    name: str
    path: Path | None
    file_format: FileFormat | None
    section: str
    entry: dict[str, Any]
    inputs: tuple[dict[str, Any], ...] = ()
    command: tuple[str, ...] | None = None
    variables: Mapping[str, str] = field(default_factory=dict[str, str])
    holds_secret: bool = False
    notes: tuple[str, ...] = ()

    def snippet(self) -> str:
        """The smallest whole file holding this entry, as the user would paste it."""
        if self.file_format == "toml":
            return toml_snippet(self.section, self.name, self.entry)
        document: dict[str, Any] = {self.section: {self.name: self.entry}}
        if self.inputs:
            document["inputs"] = list(self.inputs)
        return json.dumps(document, indent=2, ensure_ascii=False) + "\n"

    def command_line(self) -> str | None:
        """The command line as a POSIX shell reads it (quoted), or None."""
        return None if self.command is None else shlex.join(self.command)


def client_setup(client: str, connection: Connection, places: Places) -> ClientSetup:
    """What ``client`` needs to reach the server as ``connection`` says.

    Raises ``ValueError`` for a client, transport or scope the client does not have
    (:func:`unsupported` says so first, for the command line).
    """
    problem = unsupported(client, connection.transport, connection.scope)
    if problem is not None:
        raise ValueError(problem)
    return _BUILDERS[client](connection, places)


def unsupported(client: str, transport: Transport, scope: Scope) -> str | None:
    """Why ``client`` cannot be set up with ``transport`` and ``scope``; None when it can."""
    if client not in TRANSPORTS:
        return f"unknown client {client!r}; one of: {', '.join(CLIENTS)}"
    if transport not in TRANSPORTS[client]:
        if client == "claude-desktop":
            return (
                "claude-desktop starts its servers over stdio only (its file has no HTTP "
                "entries): use --transport stdio"
            )
        return f"{client} has no {transport} transport"
    if SCOPES[client] and scope not in SCOPES[client]:
        return f"{client} has no {scope} configuration file; use --scope user"
    return None


# --- the clients -------------------------------------------------------------------------------


def _bearer(value: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {value}"}


def _stdio(connection: Connection, key: str) -> dict[str, Any]:
    command, *args = connection.stdio_command
    return {
        "command": command,
        "args": args,
        "env": {STDIO_KEY_VARIABLE: key, **connection.stdio_env},
    }


def _set_variable(connection: Connection) -> dict[str, str]:
    return {connection.key_variable: connection.key}


def _setup(
    client: str, connection: Connection, path: Path | None, entry: dict[str, Any], **details: Any
) -> ClientSetup:
    """``client``'s :class:`ClientSetup`, its file format and section from :data:`_FACTS`.

    ``details``: the setup's other fields (``command``, ``variables``, ``notes`` ...).
    """
    facts = _FACTS[client]
    return ClientSetup(
        client, connection.name, path, facts.file_format, facts.section, entry, **details
    )


def _stdio_add_command(
    prefix: tuple[str, ...], connection: Connection, entry: Mapping[str, Any]
) -> tuple[str, ...]:
    """``prefix``, the entry's environment as ``--env=NAME=VALUE``, ``--``, the stdio command.

    The form ``claude mcp add`` and ``codex mcp add`` share for a stdio server.
    """
    environment = [f"--env={name}={value}" for name, value in entry["env"].items()]
    return (*prefix, *environment, "--", *connection.stdio_command)


def _claude_code(connection: Connection, places: Places) -> ClientSetup:
    project = connection.scope == "project"
    # A project's .mcp.json is meant to be committed: it names the variable, never the key.
    key = f"${{{connection.key_variable}}}" if project else connection.key
    path = places.project / ".mcp.json" if project else places.home / ".claude.json"
    if connection.transport == "http":
        entry: dict[str, Any] = {"type": "http", "url": connection.url, "headers": _bearer(key)}
        command = (
            "claude",
            "mcp",
            "add",
            "--transport",
            "http",
            "--scope",
            connection.scope,
            connection.name,
            connection.url,
            "--header",
            f"Authorization: Bearer {key}",
        )
    else:
        entry = {"type": "stdio", **_stdio(connection, key)}
        command = _stdio_add_command(
            ("claude", "mcp", "add", "--scope", connection.scope, connection.name),
            connection,
            entry,
        )
    return _setup(
        "claude-code",
        connection,
        path,
        entry,
        command=command,
        variables=_set_variable(connection) if project else {},
        holds_secret=not project,
        notes=("Claude Code reads it at its next start; `claude mcp list` shows the server.",),
    )


def claude_desktop_path(places: Places) -> Path:
    """``claude_desktop_config.json`` in the platform's application-data folder."""
    if places.platform == "darwin":
        return places.home / "Library" / "Application Support" / "Claude" / _DESKTOP_FILE
    if places.platform == "win32":
        appdata = places.environ.get("APPDATA")
        base = Path(appdata) if appdata else places.home / "AppData" / "Roaming"
        return base / "Claude" / _DESKTOP_FILE
    return places.home / ".config" / "Claude" / _DESKTOP_FILE


_DESKTOP_FILE = "claude_desktop_config.json"


def _claude_desktop(connection: Connection, places: Places) -> ClientSetup:
    # Claude Desktop expands no variables in its file: the stdio server's env holds the key.
    return _setup(
        "claude-desktop",
        connection,
        claude_desktop_path(places),
        _stdio(connection, connection.key),
        holds_secret=True,
        notes=("Quit and reopen Claude Desktop to load it.",),
    )


def _cursor(connection: Connection, places: Places) -> ClientSetup:
    folder = places.project if connection.scope == "project" else places.home
    return _editor_reading_environment(
        "cursor", "Cursor", "url", connection, folder / ".cursor" / "mcp.json"
    )


def _editor_reading_environment(
    client: str, app: str, url_field: str, connection: Connection, path: Path
) -> ClientSetup:
    """Cursor's and Windsurf's entry: the key as ``${env:VAR}``, the URL under ``url_field``."""
    key = f"${{env:{connection.key_variable}}}"
    if connection.transport == "http":
        entry: dict[str, Any] = {url_field: connection.url, "headers": _bearer(key)}
    else:
        entry = _stdio(connection, key)
    return _setup(
        client,
        connection,
        path,
        entry,
        variables=_set_variable(connection),
        notes=(_GUI_ENVIRONMENT.format(app=app),),
    )


_GUI_ENVIRONMENT = (
    "{app} reads the variable from the environment it was started in: start it from a shell "
    "where the variable is set (an app opened from the desktop may not see your shell's "
    "variables)."
)


def vscode_user_path(places: Places) -> Path:
    """The default profile's ``mcp.json`` (``MCP: Open User Configuration`` opens it)."""
    if places.platform == "darwin":
        base = places.home / "Library" / "Application Support"
    elif places.platform == "win32":
        appdata = places.environ.get("APPDATA")
        base = Path(appdata) if appdata else places.home / "AppData" / "Roaming"
    else:
        base = places.home / ".config"
    return base / "Code" / "User" / "mcp.json"


def _vscode(connection: Connection, places: Places) -> ClientSetup:
    project = connection.scope == "project"
    path = places.project / ".vscode" / "mcp.json" if project else vscode_user_path(places)
    input_id = f"{connection.name}-api-key"
    key = f"${{input:{input_id}}}"
    prompt = {
        "type": "promptString",
        "id": input_id,
        "description": f"API key of {connection.name} (mk_...)",
        "password": True,
    }
    if connection.transport == "http":
        entry: dict[str, Any] = {"type": "http", "url": connection.url, "headers": _bearer(key)}
        added: dict[str, Any] = {
            "name": connection.name,
            "type": "http",
            "url": connection.url,
            "headers": _bearer(connection.key),
        }
    else:
        entry = {"type": "stdio", **_stdio(connection, key)}
        added = {"name": connection.name, "type": "stdio", **_stdio(connection, connection.key)}
    return _setup(
        "vscode",
        connection,
        path,
        entry,
        inputs=(prompt,),
        # `code --add-mcp` takes one server and no inputs: its entry holds the key, in the
        # user profile's file.
        command=("code", "--add-mcp", json.dumps(added, separators=(",", ":"))),
        notes=(
            "VS Code asks for the key the first time it starts the server (it keeps it in "
            f"its secret storage); the key, shown once: {connection.key}",
        ),
    )


def codex_path(places: Places) -> Path:
    """``config.toml`` in ``$CODEX_HOME`` (default ``~/.codex``)."""
    codex_home = places.environ.get("CODEX_HOME")
    return (Path(codex_home) if codex_home else places.home / ".codex") / "config.toml"


def _codex(connection: Connection, places: Places) -> ClientSetup:
    project = connection.scope == "project"
    path = places.project / ".codex" / "config.toml" if project else codex_path(places)
    if connection.transport == "http":
        # Codex refuses an inline bearer token: it reads the key from this variable.
        entry: dict[str, Any] = {
            "url": connection.url,
            "bearer_token_env_var": connection.key_variable,
        }
        command: tuple[str, ...] = (
            "codex",
            "mcp",
            "add",
            connection.name,
            "--url",
            connection.url,
            "--bearer-token-env-var",
            connection.key_variable,
        )
        return _setup(
            "codex",
            connection,
            path,
            entry,
            command=command,
            variables=_set_variable(connection),
            notes=("Codex reads the variable when it starts: set it, then start Codex.",),
        )
    entry = _stdio(connection, connection.key)
    return _setup(
        "codex",
        connection,
        path,
        entry,
        command=_stdio_add_command(("codex", "mcp", "add", connection.name), connection, entry),
        holds_secret=True,
    )


def _windsurf(connection: Connection, places: Places) -> ClientSetup:
    path = places.home / ".codeium" / "windsurf" / "mcp_config.json"
    return _editor_reading_environment("windsurf", "Windsurf", "serverUrl", connection, path)


def _generic(connection: Connection, places: Places) -> ClientSetup:
    stdio = _stdio(connection, connection.key)
    line = shlex.join(
        [f"{name}={value}" for name, value in stdio["env"].items()] + list(connection.stdio_command)
    )
    return _setup(
        "generic",
        connection,
        None,
        {"url": connection.url, "headers": _bearer(connection.key), **stdio},
        notes=(
            f"HTTP (streamable): {connection.url}",
            f"header: Authorization: Bearer {connection.key}",
            f"stdio: {line}",
        ),
    )


_BUILDERS = {
    "claude-code": _claude_code,
    "claude-desktop": _claude_desktop,
    "cursor": _cursor,
    "vscode": _vscode,
    "codex": _codex,
    "windsurf": _windsurf,
    "generic": _generic,
}


# --- TOML ---------------------------------------------------------------------------------------


def toml_snippet(section: str, name: str, entry: Mapping[str, Any]) -> str:
    """``entry`` as the TOML tables ``[section.name]`` (and ``[section.name.env]``).

    For printing only: a file is merged with tomlkit (``memory_tools.serving.config_files``),
    which keeps the user's comments and layout.
    """
    import tomlkit

    document = tomlkit.document()
    servers = tomlkit.table(is_super_table=True)
    servers.add(name, toml_table(entry))
    document.add(section, servers)
    return tomlkit.dumps(document)  # pyright: ignore[reportUnknownMemberType]


def toml_table(values: Mapping[str, Any]) -> Any:
    """``values`` as a tomlkit table, a nested mapping as a sub-table (``[...env]``)."""
    import tomlkit

    table = tomlkit.table()
    for name, value in values.items():
        table.add(name, toml_table(value) if isinstance(value, Mapping) else value)
    return table


def display_path(path: Path, places: Places) -> str:
    """``path`` with the home directory shown as ``~`` (POSIX) for what people read."""
    try:
        relative = path.relative_to(places.home)
    except ValueError:
        return str(path)
    if places.platform == "win32":
        return str(PureWindowsPath("~") / relative)
    return f"~{os.sep}{relative}"


def stdio_command_for(executable: Path, module: str, prog: str) -> tuple[str, ...]:
    """The command that serves MCP over stdio from this installation.

    The app's console script beside ``executable`` (the environment's Python) when it is there,
    else ``python -m module``: both are absolute, so a client that starts it from any directory
    and with its own PATH runs this installation.
    """
    script = executable.parent / (f"{prog}.exe" if os.name == "nt" else prog)
    base: Sequence[str] = (str(script),) if script.exists() else (str(executable), "-m", module)
    return (*base, "serve", "--transport", "stdio")
