"""Asking a corpus: the one path below every caller (the query assets, the CLI, the HTTP app, the MCP tools).

published.py loads a corpus's published index; asking.py answers one question from it with its sources, usage and
time; records.py records answers, through an on-disk queue while the store is busy; service.py keeps every
published corpus warm for a long-lived server.
"""
