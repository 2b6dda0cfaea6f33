"""``python -m memory_server``."""

import sys

from memory_server.cli import main

sys.exit(main())
