"""Defaults the command line shows before anything runs.

Where a server listens and how many processes it may start, apart from the modules that use
them, so that parsing a command line loads neither the serving runtime nor the supervisor.
"""

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
MAX_PROCESSES = 64
