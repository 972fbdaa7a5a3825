"""Recall: answer a query from a store, in one of six modes (README "recall").

dispatch.py     `recall()`, the entry point, and MODES: each mode to its pipeline
config.py       `RecallConfig`, composed of each mode's own settings
synapse.py      the default mode's pipeline: signals, ranking, current facts, speaker focus, gate
baselines.py    vector, bm25, hybrid: the scores they rank by (through synapse.py's pipeline)
ecphory.py      seed 002's cue-driven centroid spreading over engrams
synaptic.py     seed 001's SynapticRAG (temporal association, LIF)
scan.py, signals.py   what the modes start from: header scan, filter walls, BM25, activation
topic.py, attribution.py   the gate's checks; currency.py: current facts first
bridges.py      name bridges (pseudo-relevance feedback through names)
speakers.py     the query without the store's speakers' names, and the names it asks about
answer_check.py `recall --verify` (the local model); service.py: `Recaller`, warm recall
"""
from ..filters import TYPE_BITS
from .answer_check import AnswerChecker, VerifyConfig
from .config import RecallConfig
from .dispatch import MODES, recall
from .scan import bm25_open
from .service import Recaller, recall_config
from .synapse import speaker_mask
from .synaptic import SynapticConfig

__all__ = ["TYPE_BITS", "AnswerChecker", "VerifyConfig", "RecallConfig", "MODES", "recall",
           "bm25_open", "Recaller", "recall_config", "speaker_mask", "SynapticConfig"]
