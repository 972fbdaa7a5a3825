"""Hub nodes (RecallConfig.hub_share): a semantic node linked to more than that share of the
episodes (and to more than graphview.HUB_MIN_EDGES records) carries no activation; the rest of
the graph is untouched."""
from __future__ import annotations

import numpy as np
import pytest

from store_format import flags as fl
from synapse_cli.engine import graphview
from synapse_cli.engine.graphview import RecallArrays
from synapse_cli.kernels.activation import activate

EPI = int(fl.MemoryType.EPISODIC) << fl.MEMORY_TYPE_SHIFT
SEM = int(fl.MemoryType.SEMANTIC) << fl.MEMORY_TYPE_SHIFT


def _arrays():
    """Episodes 0-4, node 5 linked to all of them (a speaker), node 6 to episodes 0 and 1."""
    edges = [(i, 5) for i in range(5)] + [(5, i) for i in range(5)]
    edges += [(0, 6), (6, 0), (1, 6), (6, 1), (0, 1), (1, 0)]
    edges.sort()
    src = np.array([a for a, _ in edges])
    indptr = np.zeros(8, np.int64)
    np.cumsum(np.bincount(src, minlength=7), out=indptr[1:])
    flags = np.array([EPI] * 5 + [SEM, SEM], np.uint8)
    return RecallArrays(np.arange(1, 8, dtype=np.uint64), np.zeros(7, np.int64), flags, indptr,
                        np.array([b for _, b in edges], np.int32), np.full(len(edges), 0.8,
                                                                             np.float32),
                        np.ones(len(edges), np.uint8))


@pytest.fixture
def few_edges_count(monkeypatch):
    """This 7-node graph stands for a big store: no minimum edge count."""
    monkeypatch.setattr(graphview, "HUB_MIN_EDGES", 0)


def _edges(indptr, indices):
    return {(a, int(b)) for a in range(len(indptr) - 1) for b in indices[indptr[a]:indptr[a + 1]]}


def test_hub_edges_go_and_the_rest_stay(few_edges_count):
    a = _arrays()
    indptr, indices, weights, types = a.without_hubs(0.5)  # node 5 reaches 5 of 5 episodes
    assert _edges(indptr, indices) == {(0, 6), (6, 0), (1, 6), (6, 1), (0, 1), (1, 0)}
    assert len(weights) == len(types) == len(indices) == 6
    full = a.without_hubs(1.0)  # 1 keeps every node
    assert _edges(full[0], full[1]) == _edges(a.indptr, a.indices)
    assert a.without_hubs(0.5)[1] is indices  # once per snapshot


def test_behind_a_wall_hubs_are_counted_among_what_it_lets_through(few_edges_count):
    """A tag wall that lets through episodes 0, 1 and node 6 (a user's): node 6 links both of
    that user's episodes, a hub there at share 0.5, though it links 2 of the store's 5. Counted
    over the whole store, what other users store would decide it."""
    a = _arrays()
    within = np.array([True, True, False, False, False, False, True])
    assert _edges(*graphview.subgraph(a.without_hubs(0.5), within)[:2]) == {
        (0, 6), (6, 0), (1, 6), (6, 1), (0, 1), (1, 0)}  # the old order: a hub for nobody
    walled = a.without_hubs(0.5, within)
    assert _edges(walled[0], walled[1]) == {(0, 1), (1, 0)}
    assert _edges(*a.without_hubs(1.0, within)[:2]) == _edges(
        *graphview.subgraph(a.without_hubs(1.0), within)[:2])


def test_a_hub_no_longer_carries_activation_to_unrelated_episodes(few_edges_count):
    a = _arrays()
    kw = dict(alpha=1.0, S=0.8, delta=0.5, rho=0.0, beta=0.0, M=7, gamma=5.0, theta=0.5, T=3,
              use_fan=True, use_inhibition=False, frontier_only=True, validate=True)
    anchor = (np.array([0], np.int32), np.array([1.0], np.float32))
    with_hub, _ = activate(a.indptr, a.indices, a.weights, a.types, a.timestamps, *anchor, **kw)
    without, _ = activate(*a.without_hubs(0.5), a.timestamps, *anchor, **kw)
    assert with_hub[4] > without[4]  # episode 4 shares only the speaker with the anchor
    assert without[1] > without[4]   # its neighbour through node 6 and the direct edge does


def test_in_a_small_store_a_node_with_few_edges_is_a_bridge():
    """Node 5 links all 5 episodes, but 5 edges are no more than HUB_MIN_EDGES: in the
    12-line demo, 0.2 of the episodes is 2.4, and "Maya", named in 3 lines, must carry."""
    assert graphview.HUB_MIN_EDGES == 5
    a = _arrays()
    indptr, indices, _, _ = a.without_hubs(0.5)
    assert _edges(indptr, indices) == _edges(a.indptr, a.indices)
