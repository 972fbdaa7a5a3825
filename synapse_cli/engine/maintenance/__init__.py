"""Keeping a store healthy and looking inside it. The rest uses the modules themselves (their
main functions share the modules' names: `prune.prune`, `verify.verify`).

prune.py    forgetting: select by policy, trash, restore, mark, compact (`prune`, `mark`)
verify.py   `inspect --verify`: every file of a store checked, the problems listed
inspect.py  `inspect`: the store's summary and one record; EDGE_TYPES, the edge type names
nodes.py    the semantic graph as a reader sees it: find a node, open one (MCP, the API)
"""
from . import inspect, nodes, prune, verify

__all__ = ["inspect", "nodes", "prune", "verify"]
