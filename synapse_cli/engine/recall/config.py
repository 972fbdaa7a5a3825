"""`RecallConfig`: every setting of one recall, composed of each mode's own settings.

Each mode keeps its settings beside its code (`SynapseSettings`, `GateSettings` and
`AblationSettings` in synapse.py, `BaselineSettings` in baselines.py, `EcphorySettings` in
ecphory.py; synaptic's `SynapticConfig`, in synaptic.py, rides in the `synaptic` field);
`RecallConfig` inherits them all, so every field is still `cfg.<name>` and `synapse config`,
engine/config.py's SETTINGS and tests/test_config.py see one flat dataclass. Its bases are
listed last-first because a dataclass takes its bases' fields in reverse order: the fields
keep the order they have always had (mode, k, the default mode's, the gate's, rrf_k, ecphory's,
the ablations, then the filters and the rest below).
"""
from __future__ import annotations

from dataclasses import dataclass

from .baselines import BaselineSettings
from .ecphory import EcphorySettings
from .synapse import AblationSettings, GateSettings, SynapseSettings


@dataclass
class CommonSettings:
    mode: str = "synapse"
    k: int = 30


@dataclass
class RecallConfig(AblationSettings, EcphorySettings, BaselineSettings, GateSettings,
                   SynapseSettings, CommonSettings):
    # filters
    types: tuple = ()
    since_ms: int | None = None
    until_ms: int | None = None
    tags: tuple = ()
    # False (mode synapse): consolidation's semantic nodes still anchor and carry activation,
    # but only the other types fill the k result slots (unless `types` names semantic
    # explicitly; the baselines rank every record). On the
    # consolidated LoCoMo dev stores a returned node took a slot from the turns the questions
    # need: recall@10 62.7 with them, 65.8 without, every category up (docs/TUNING.md).
    semantic_results: bool = False
    explain: bool = False
    synaptic: object = None  # engine.recall.synaptic.SynapticConfig for mode "synaptic"; None = defaults
