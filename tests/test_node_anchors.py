"""Anchors on a consolidated store (RecallConfig.node_anchors): the semantic nodes closest to
the query seed the activation on top of the anchors_k episodes of each trigger, never in their
places; on a store without nodes nothing changes."""
from __future__ import annotations

import numpy as np

from store_format import flags as fl
from synapse_cli.engine.graphview import RecallArrays
from synapse_cli.engine.recall import RecallConfig
from synapse_cli.engine.recall.signals import _anchors

EPI = int(fl.MemoryType.EPISODIC) << fl.MEMORY_TYPE_SHIFT
SEM = int(fl.MemoryType.SEMANTIC) << fl.MEMORY_TYPE_SHIFT


def _arrays(flags: list[int]) -> RecallArrays:
    n = len(flags)
    return RecallArrays(np.arange(1, n + 1, dtype=np.uint64), np.zeros(n, np.int64),
                        np.array(flags, np.uint8), np.zeros(n + 1, np.int64),
                        np.zeros(0, np.int32), np.zeros(0, np.float32), np.zeros(0, np.uint8))


# positions 0-5 episodes, 6-8 nodes; the nodes are the three closest to the query
SIM = np.array([0.50, 0.45, 0.40, 0.35, 0.30, 0.10, 0.90, 0.80, 0.15], np.float32)
BM25 = np.array([0.0, 0.0, 0.0, 0.0, 2.0, 1.0, 5.0, 0.0, 0.0])
CONSOLIDATED = [EPI] * 6 + [SEM] * 3


def test_nodes_take_no_episode_place():
    a = _arrays(CONSOLIDATED)
    got = _anchors(SIM, BM25, a, RecallConfig(anchors_k=3, node_anchors=0))
    # dense top 3 episodes: 0, 1, 2; lexical: 4 and 5 (5 below anchor_min_sim); no node
    assert got.tolist() == [0, 1, 2, 4]


def test_nodes_come_on_top_of_the_episodes():
    a = _arrays(CONSOLIDATED)
    got = _anchors(SIM, BM25, a, RecallConfig(anchors_k=3, node_anchors=2))
    # episodes: dense 0, 1, 2 and lexical 4 (5 below anchor_min_sim); nodes: the two closest
    assert got.tolist() == [0, 1, 2, 4, 6, 7]
    # a node needs anchor_min_sim too: node 8 (0.15) never seeds
    assert 8 not in _anchors(SIM, BM25, a, RecallConfig(anchors_k=3, node_anchors=3)).tolist()


def test_a_store_without_nodes_is_unchanged():
    a = _arrays([EPI] * 9)
    on = _anchors(SIM, BM25, a, RecallConfig(anchors_k=3, node_anchors=5))
    off = _anchors(SIM, BM25, a, RecallConfig(anchors_k=3, node_anchors=0))
    assert on.tolist() == off.tolist() == [0, 4, 6, 7]


def test_nodes_never_seed_alone():
    """A node's derived text sits a little closer to an unrelated question than its episode:
    alone it let "How do I make a sourdough starter?" through the gate of a consolidated store
    whose episodes reach nothing (agent-use, dev_assistant)."""
    a = _arrays(CONSOLIDATED)
    low = np.array([0.19, 0.18, 0.1, 0.1, 0.1, 0.1, 0.21, 0.2, 0.1], np.float32)
    assert _anchors(low, np.zeros(9), a, RecallConfig(node_anchors=5)).tolist() == []
    beside = low.copy()
    beside[1] = 0.25  # one episode reaches the question: the nodes seed beside it
    assert _anchors(beside, np.zeros(9), a, RecallConfig(node_anchors=5)).tolist() == [1, 6, 7]
    # a type filter that leaves only nodes (recall --type semantic): they seed on their own
    only = np.where(np.arange(9) < 6, -np.inf, low).astype(np.float32)
    assert _anchors(only, np.zeros(9), a, RecallConfig(node_anchors=5)).tolist() == [6, 7]


def test_nodes_that_cannot_be_returned_do_not_set_the_scale_of_the_episodes_scores():
    """The fused score min-max scales the cosine and divides BM25 by its maximum; node 6 (the
    best cosine and BM25 here, as a node's short "name desc" text often is) set both scales on
    a consolidated store, so every episode's lexical term shrank. Over the returnable records
    only, the episodes score as in a store without the nodes."""
    from synapse_cli.engine.recall.signals import Signals
    from synapse_cli.engine.recall.synapse import rank

    cfg = RecallConfig(k=9)

    def signals(sim, bm25, no_result):
        m = len(sim)
        return Signals(sim, np.ones(m, np.float32), np.ones(m, np.float32), bm25,
                       np.zeros(m, np.float32), np.zeros(m, np.float32),
                       no_result=no_result)

    node = np.array([f == SEM for f in CONSOLIDATED])
    top, scores = rank(signals(SIM, BM25, node), cfg)
    alone_top, alone_scores = rank(signals(SIM[:6].copy(), BM25[:6].copy(), None), cfg)
    assert top.tolist() == alone_top.tolist() and not node[top].any()
    np.testing.assert_allclose(scores, alone_scores)
    # asked for (no_result None: --types semantic), nodes are ranked with the episodes
    assert 6 in rank(signals(SIM, BM25, None), cfg)[0].tolist()
