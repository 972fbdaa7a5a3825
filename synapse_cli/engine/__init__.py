"""The library behind the commands (docs/ARCHITECTURE.md): usable from Python without the CLI.

At the top: the store and what writes into it (store.py, memory.py, ingest.py, inputs.py,
portable.py for export/import), what reads it (listing.py, graphview.py, filters.py,
scoring.py, pagerank_cache.py) and the settings (config.py, paths.py, errors.py). By capability:
recall/ (every recall mode and its gate), consolidate/ (episodes -> semantic nodes), maintenance/
(prune, verify, inspect).
"""
