"""memory_server."""
