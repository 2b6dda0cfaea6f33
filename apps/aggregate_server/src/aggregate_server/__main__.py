"""``python -m aggregate_server``."""

import sys

from aggregate_server.cli import main

sys.exit(main())
