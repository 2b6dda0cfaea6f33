"""The defaults of a reindex run (:mod:`memory_tools.operations.reindex`), on their own.

``memory-server`` shows them in its ``reindex --help`` and parses every command line with them;
importing the reindex itself for that would load the embedders and the vector index into
every command, ``admin`` ones included.
"""

DEFAULT_BATCH_SIZE = 32
DEFAULT_MIN_RECALL = 0.95
DEFAULT_RECALL_QUERIES = 50
RECALL_K = 10
