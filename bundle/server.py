"""The MCPB bundle's entry point: the aggregate MCP server over stdio, as the host starts it.

A desktop host installs the bundle (``manifest.json``, ``server.type`` ``"uv"``) by running this
file with uv in the unpacked bundle: uv installs the locked runtime dependencies of the workspace
(``pyproject.toml``, ``uv.lock``) and a Python 3.11 if the machine has none, then runs this file
in that environment. The host passes the user's settings as environment variables
(``MEMORY_API_KEY``, ``MEMORY_DATA_DIR``, ``MEMORY_DATABASE_URL``), which the server reads as it
always does. A host may run ``entry_point`` with no arguments (the ``uv`` type leaves the command
line to the host), so the command is fixed here: ``scraper-mcp-server serve --transport stdio``.
"""

import sys

from aggregate_server.cli import main

if __name__ == "__main__":
    sys.exit(main(["serve", "--transport", "stdio"]))
