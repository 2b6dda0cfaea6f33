"""Workflows: what a caller may do, authorised, validated and audited.

Reading, searching, changing, sharing and the trash. Every adapter (MCP tools, the web app, the
HTTP routes) calls these; none of them imports a job, an operator task or an adapter.
"""
