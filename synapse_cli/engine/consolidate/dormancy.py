"""Dormancy: node garbage collection (seed 000 section 3.1), docs/FORMAT.md section 16.

"Nodes with activation consistently below a dormancy threshold epsilon = 0.01 for W = 10
windows are archived to disk." How this is observed here, once per consolidation window,
before that window's commit and in the same commit:
- the window's episodes (energy 1) and the existing nodes its extraction names (energy 1) are
  the anchors; activation spreads over the committed graph with recall's propagation (Eq. 2,
  fan effect, temporal decay) for T steps, *without* the sigmoid of Eq. 4: every node the wave
  reaches fires at least sigmoid(-gamma theta) = 0.076 > epsilon, so epsilon is compared with
  the energy that actually arrived (the potential u);
- a live semantic node is active in the window when that energy is >= epsilon, when the
  window's extraction names it (a merge), when it was recalled since the last window (its
  recall_count grew: "repeated recall"), or when it is pinned;
- an inactive node's count of low windows grows by one, an active one's goes back to 0; at W it
  is archived: recall, activation and PageRank skip it; it stays on disk, and comes back when a
  later window names it again or on `synapse mark --restore-dormant ID`.
Windows cut from documents (a source and no session) do not advance this clock: a corpus is not
time passing in the agent's life, and a document's entities are not "consistently" quiet
because other documents were read after it (on HotpotQA, 994 one-document windows archived
4,883 of 4,944 engrams, and ecphory's recall@5 fell from 79.0 to 71.0).
Only semantic nodes (what consolidation derives) are archived: episodes are the evidence recall
returns, and dropping them for lack of activation would be forgetting, which is `prune`'s job.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from store_format import dormancy as dm
from store_format import flags as fl
from store_format import manifest as mf


@dataclass
class DormancyConfig:
    epsilon: float = 0.01   # seed 000: dormancy threshold
    windows: int = 10       # seed 000: W; 0 turns archiving off


class DormancyState:
    """Per node (record id, increasing): low windows in a row, recall_count last seen,
    archived; plus the number of windows observed so far and the episode ids of the last
    one, so that a window re-run after a crash is not counted twice."""

    def __init__(self, ids=None, low=None, seen=None, archived=None, windows: int = 0,
                 last_window=()):
        self.ids = np.asarray(ids if ids is not None else [], np.uint64)
        self.low = np.asarray(low if low is not None else [], np.int64)
        self.seen = np.asarray(seen if seen is not None else [], np.int64)
        self.archived = np.asarray(archived if archived is not None else [], bool)
        self.windows = int(windows)
        self.last_window = [int(i) for i in last_window]

    @classmethod
    def load(cls, store) -> "DormancyState":
        ref = store.manifest.dormancy
        if ref is None:
            return cls()
        e = dm.read(store.path / ref["file"], ref["entries"])
        return cls(e["record_id"], e["low_windows"].astype(np.int64),
                   e["recall_seen"].astype(np.int64), e["archived"] == 1, ref["windows"],
                   ref["last_window"])

    def archived_ids(self) -> list[int]:
        return [int(x) for x in self.ids[self.archived]]

    def _ensure(self, ids: np.ndarray) -> np.ndarray:
        """Positions of `ids` in the state, adding missing ones (0 low windows, active)."""
        ids = np.asarray(ids, np.uint64)
        new = np.setdiff1d(ids, self.ids)
        if len(new):
            all_ids = np.union1d(self.ids, new)
            k = np.searchsorted(all_ids, self.ids)
            low, seen = np.zeros(len(all_ids), np.int64), np.zeros(len(all_ids), np.int64)
            arch = np.zeros(len(all_ids), bool)
            low[k], seen[k], arch[k] = self.low, self.seen, self.archived
            self.ids, self.low, self.seen, self.archived = all_ids, low, seen, arch
        return np.searchsorted(self.ids, ids)

    def wake(self, ids) -> list[int]:
        """Un-archive `ids` and reset their counts; returns the ids that were archived."""
        ids = np.asarray(sorted({int(i) for i in ids}), np.uint64)
        if not len(ids):
            return []
        j = self._ensure(ids)
        woken = [int(x) for x in self.ids[j][self.archived[j]]]
        self.archived[j] = False
        self.low[j] = 0
        return woken

    def observe(self, store, anchor_ids, named_ids, cfg: DormancyConfig,
                recall_cfg=None, clock: bool = True) -> list[int]:
        """One consolidation window (see the module docstring) over the committed state of
        `store`. `anchor_ids`: the window's episodes; `named_ids`: existing nodes its
        extraction names (woken if archived). Returns the ids archived by this window.
        `clock=False` (a document window): only its wakes count; no node ages by it.
        A window whose episodes all belong to the last window observed is that window again,
        re-run after a crash between its commit and its in-place rewrites (FORMAT.md 13.3): it
        was counted already, so only its wakes are applied."""
        from .. import graphview
        from ..recall.config import RecallConfig

        rc = recall_cfg or RecallConfig()
        self.wake(named_ids)
        episodes = sorted({int(i) for i in anchor_ids})
        if set(episodes) <= set(self.last_window):
            return []
        self.last_window = episodes
        if not clock:
            return []
        self.windows += 1
        arrays = graphview.build(store)
        if not arrays.n:
            return []
        flags = arrays.flags
        nodes = np.flatnonzero((fl.memory_type_code(flags) == fl.MemoryType.SEMANTIC)
                               & ~fl.is_tombstone(flags))
        if not len(nodes):
            return []
        want = np.asarray(sorted({int(i) for i in anchor_ids} | {int(i) for i in named_ids}),
                          np.uint64)
        pos = np.searchsorted(arrays.ids, want)
        ok = pos < arrays.n
        ok[ok] = arrays.ids[pos[ok]] == want[ok]
        anchors = pos[ok]
        energy = np.zeros(arrays.n, np.float32)
        if len(anchors) and len(arrays.indices):
            from ...kernels.activation import activate

            energy, _ = activate(arrays.indptr, arrays.indices, arrays.weights, arrays.types,
                                 arrays.timestamps, anchors.astype(np.int32),
                                 np.ones(len(anchors), np.float32), alpha=rc.alpha, S=rc.S,
                                 delta=rc.delta, rho=rc.rho, beta=0.0, M=rc.M, gamma=rc.gamma,
                                 theta=rc.theta, T=rc.T, use_fan=True, use_inhibition=False,
                                 use_sigmoid=False, frontier_only=True, validate=False)
        recall_count = np.concatenate([np.asarray(s.headers["recall_count"], np.int64)
                                       for s in store.segments])
        nid = arrays.ids[nodes]
        j = self._ensure(nid)
        active = ((energy[nodes] >= np.float32(cfg.epsilon)) | (recall_count[nodes] > self.seen[j])
                  | fl.is_pinned(flags[nodes]) | np.isin(nid, np.asarray(list(named_ids), np.uint64)))
        self.seen[j] = recall_count[nodes]
        awake = ~self.archived[j]
        self.low[j[awake & active]] = 0
        self.low[j[awake & ~active]] += 1
        if cfg.windows <= 0:
            return []
        newly = awake & (self.low[j] >= cfg.windows)
        self.archived[j[newly]] = True
        return [int(x) for x in nid[newly]]

    def stage(self, w) -> None:
        """Write the state as `dormancy-G.dat` (G = the generation the writer's next commit
        gets) and name it in that commit; the previous file is deleted after the commit."""
        name = mf.generation_name(mf.DORMANCY_NAME, w.manifest.generation + 1)
        entries = dm.make_entries(self.ids, self.seen, self.low, self.archived)
        dm.write(w.path / name, entries)
        w.stage(dormancy={"file": name, "entries": len(entries), "windows": self.windows,
                          "last_window": self.last_window})


def restore(w, ids) -> dict:
    """`synapse mark --restore-dormant`: bring archived nodes back into the active graph (one
    commit). Ids must exist (KeyError otherwise, before anything is written)."""
    ids = [int(i) for i in dict.fromkeys(int(i) for i in ids)]
    for rid in ids:
        w.locate(rid)
    state = DormancyState.load(w)
    woken = state.wake(ids)
    if woken:
        state.stage(w)
        w.commit()
        w.refresh()
    return {"woken": woken, "not_dormant": [r for r in ids if r not in set(woken)]}


def archived(store) -> set[int]:
    """Ids of the nodes the committed dormancy state archives."""
    return {int(x) for x in dm.archived_ids(store.path, store.manifest.dormancy)}
