"""memory_tools."""
