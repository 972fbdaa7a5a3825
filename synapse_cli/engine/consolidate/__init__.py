"""Consolidation: episodic windows -> semantic nodes and graph edges (`synapse consolidate`).

run.py            `consolidate()`: windows, replay, extraction, nodes, edges, one commit per window
extract_cache.py  the extraction cache (FORMAT.md 13.1): the model sees a window once
doclinks.py       document engrams and the links between documents that name each other
dormancy.py       node dormancy (seed 000 3.1): nodes the activation no longer reaches
The PageRank cache it refreshes after the last window is engine/pagerank_cache.py (recall reads it).
"""
from .dormancy import DormancyConfig, DormancyState
from .extract_cache import CACHE_NAME, ExtractCache, model_sha256
from .run import ConsolidateConfig, ConsolidateResult, consolidate

__all__ = ["DormancyConfig", "DormancyState", "CACHE_NAME", "ExtractCache", "model_sha256",
           "ConsolidateConfig", "ConsolidateResult", "consolidate"]
