"""Operator tasks: administration, backup and restore, export, reconciliation, reindexing, models.

They build on the workflows and the jobs; the operator CLI (``memory_tools.serving``) runs them.
"""
