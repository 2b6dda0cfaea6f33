"""aggregate_server."""
