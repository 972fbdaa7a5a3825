"""`recall --mode ecphory`: cue-driven centroid spreading over engrams (seed 002, Algorithm 1).

The store already holds seed 002's bipartite entity-chunk graph: consolidation turns every
entity into a semantic node (an engram) with text "name [TYPE] type [DESC] desc" (eq. 1) and links
it to the episodes (chunks, for documents) it came from by ABSTRACTION edges, the provenance
edges. Per query:
 1. cue extraction (models/cues.py: rules, or the local model) and its embedding v_c;
 2. S_0 = the k_init engrams nearest v_c;
 3. D times: the `centroid_seeds` engrams of S_all nearest v_r, their centroid weighted by
    softmax(v_e . v_r) (eq. 2), and the expansion x k_init engrams nearest that centroid that are
    not yet in S_all join it (eq. 3, lines 6-10);
 4. S_all re-ranked by cosine to v_r, the k_final best kept (lines 13-16);
 5. the chunks of those engrams through the provenance edges, plus the direct_chunks chunks
    nearest v_r (line 17);
 6. (`chunk_rank = "linked"`, the default) those chunks by cosine to v_r, joined by the chunks of
    the documents the best `link_seeds` of them name (engine/consolidate/doclinks.py), each scored its own
    cosine + link_weight x the naming chunk's: the bipartite graph walked chunk -> document
    engram -> chunk. On HotpotQA dev this hop is what lifts recall@5 from 79.0 (rrf) to 89.0;
    the centroid hops add nothing there (hops 0 to 3 all give 89.0).
v_r is the seed's text's choice (eq. 2 and step 3 weight and re-rank by the original query,
`rerank_by = "query"`, the default) or its Algorithm 1's (the cue, `"cue"`). On HotpotQA dev
(bench/quality/hotpotqa_recall.py) the query reading finds 6.5 more points of recall@5 (89.0 against
82.5): MiniLM embeds a list of names less well than the question when it compares them with
chunks. The cue always makes S_0: that is what ecphory is, direct hits on what the query names.
With k_final <= k_init and v_r = v_c, S_final is S_0's best (S_0 holds the k_init engrams
nearest v_c), and with centroid_seeds = k_init every hop has the same seeds: the hops then
change nothing, a property of Algorithm 1 as written.
Results: the chunks (ranked by step 6 or `rank_chunks`), then the k_final engrams, at most k in
all, in the JSON shape of the default mode. A store without semantic nodes (never consolidated, or
filtered out by --type) still answers: by direct chunk search with the ranking vector (the
query's, or the cue's with `rerank_by="cue"`), and says so in `fallback`. Engram vectors are
the stored int8 vectors normalised, kept per snapshot.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from store_format import flags as fl
from store_format import graph_files as gf

from .signals import result_row

@dataclass
class EcphorySettings:
    # ecphory mode (seed 002 Algorithm 1 and Table 5; this module)
    k_init: int = 10             # engrams nearest the cue (S_0)
    hops: int = 2                # D: centroid hops
    expansion: int = 3           # engrams searched per hop: expansion x k_init
    centroid_seeds: int = 10     # engrams of S_all whose weighted centroid is the next query
    k_final: int = 20            # engrams kept after re-ranking
    rerank_by: str = "query"     # seeds, weights, re-ranking, direct search: query or cue
    direct_chunks: int = 5       # chunks nearest the cue added to the engrams' source chunks
    chunk_rank: str = "linked"   # order of those chunks: linked, rrf, engram or cosine
    link_seeds: int = 3          # linked: the best chunks whose document links are followed
    link_weight: float = 0.3     # linked: share of the linking chunk's cosine a link adds
    cues: str = "rules"          # cue extractor: rules, or model (the local llama.cpp model)
    cue_model: str | None = None  # GGUF for cues = "model" (None: the extractor's default)


FALLBACK_NOTE = ("no semantic nodes to search (run `synapse consolidate`, or widen --type): "
                 "direct chunk search only")
FILTERED_NOTE = ("no semantic node passes the filter (a node carries the tags of the memories "
                 "it was made from, so --tag leaves out those made from untagged or other "
                 "users' memories; --type or a time window may too): direct chunk search only")


def _top(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest finite scores, best first, ties to the lower index."""
    ok = np.flatnonzero(np.isfinite(scores))
    if k <= 0 or not len(ok):
        return np.zeros(0, np.int64)
    s = scores[ok]
    if k < len(ok):
        kth = np.partition(s, len(s) - k)[len(s) - k]
        keep = s >= kth  # everything tied with the k-th, so ties resolve by index below
        ok, s = ok[keep], s[keep]
    return ok[np.lexsort((ok, -s))][:k].astype(np.int64)


def engram_matrix(store, arrays) -> tuple[np.ndarray, np.ndarray]:
    """(record positions of the semantic nodes, their unit vectors float32 [m, dim]), built once
    per snapshot (arrays.cache)."""
    hit = arrays.cache.get("ecphory_engrams")
    if hit is None:
        pos, vecs, base = [], [], 0
        for seg in store.segments:
            if seg.n:
                f = np.asarray(seg.headers["flags"])
                rows = np.flatnonzero(fl.memory_type_code(f) == fl.MemoryType.SEMANTIC)
                pos.append(base + rows)
                vecs.append(np.asarray(seg.vectors[rows], np.float32))
            base += seg.n
        dim = store.manifest.dim
        pos = np.concatenate(pos).astype(np.int64) if pos else np.zeros(0, np.int64)
        vecs = np.concatenate(vecs) if vecs else np.zeros((0, dim), np.float32)
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        vecs = np.ascontiguousarray(vecs / np.maximum(norms, 1e-12), np.float32)
        hit = arrays.cache["ecphory_engrams"] = (pos, vecs)
    return hit


def centroid_spread(vecs: np.ndarray, live: np.ndarray, cue_vec: np.ndarray, k_init: int,
                    hops: int, expansion: int, n_seeds: int, rank_vec: np.ndarray | None = None):
    """Algorithm 1, lines 3-16, over engram rows.

    vecs : float32 [m, d] unit engram vectors; live : bool [m], engrams allowed (filters,
    tombstones); cue_vec : float32 [d] unit cue vector, which finds S_0 (line 3); rank_vec : the
    unit vector that picks the seeds, weights the centroid and re-ranks (lines 6, 7, 14): the
    cue in Algorithm 1, the query in the seed's eq. 2 and step 3 (None = cue_vec).
    Returns (sims float32 [m], each engram's cosine to rank_vec, -inf where not live; S_all as
    rows in order of arrival; hop int [len(S_all)], 0 = a direct cue hit, t = found from the
    t-th centroid; trace: per hop the seed rows, their weights and the new rows).
    """
    cue_sims = vecs @ cue_vec
    cue_sims[~live] = -np.inf
    if rank_vec is None:
        sims = cue_sims
    else:
        sims = vecs @ rank_vec
        sims[~live] = -np.inf
    s_all = list(_top(cue_sims, k_init))
    hop = [0] * len(s_all)
    trace = []
    for t in range(1, hops + 1):
        if not s_all:
            break
        members = np.asarray(s_all, np.int64)
        seeds = members[_top(sims[members], n_seeds)]
        w = np.exp(sims[seeds].astype(np.float64))  # eq. 2: a softmax of the similarities
        w /= w.sum()
        centroid = (w[:, None] * vecs[seeds]).sum(axis=0).astype(np.float32)
        near = vecs @ centroid
        near[~live] = -np.inf
        known = set(s_all)
        new = [int(r) for r in _top(near, expansion * k_init) if int(r) not in known]
        s_all += new
        hop += [t] * len(new)
        trace.append({"hop": t, "seeds": seeds.tolist(), "weights": w.tolist(), "new": new})
    return sims, s_all, hop, trace


def provenance(arrays, engram_pos: int, chunk_ok: np.ndarray) -> np.ndarray:
    """Chunk positions an engram came from: its ABSTRACTION out-edges to non-semantic records
    that pass the filters."""
    a, b = int(arrays.indptr[engram_pos]), int(arrays.indptr[engram_pos + 1])
    dst = arrays.indices[a:b].astype(np.int64)
    dst = dst[arrays.types[a:b] == gf.ABSTRACTION]
    return dst[chunk_ok[dst]]


def rank_chunks(via_engram: dict, direct: list, chunk_sim: np.ndarray, how: str,
                rrf_k: int) -> list:
    """Order C_final (the seed hands it to the LLM as a set, so the order is ours).

    via_engram: chunk position -> its rank (0 = best) in the provenance list (the chunks of the
    final engrams in engram order); direct: the direct-search chunk positions, best first.
    "rrf": reciprocal-rank fusion of the two rankings; "engram": the provenance chunks in the
    order of their engrams, then the direct ones; "cosine": every chunk of C_final by its own
    cosine to the cue.
    """
    chunks = list(dict.fromkeys(list(via_engram) + list(direct)))
    if how == "cosine":
        key = {c: -float(chunk_sim[c]) for c in chunks}
    elif how == "engram":
        key = {c: (via_engram[c] if c in via_engram else len(via_engram) + direct.index(c))
               for c in chunks}
    else:
        d_rank = {c: r for r, c in enumerate(direct)}
        score = {}
        for c in chunks:
            s = 0.0
            if c in via_engram:
                s += 1.0 / (rrf_k + 1 + via_engram[c])
            if c in d_rank:
                s += 1.0 / (rrf_k + 1 + d_rank[c])
            score[c] = s
        key = {c: -score[c] for c in chunks}
    return sorted(chunks, key=lambda c: (key[c], c))


def linked_chunks(store, arrays, seeds: list, chunk_sim: np.ndarray, chunk_ok: np.ndarray,
                  weight: float, node_ok: np.ndarray | None = None) -> dict:
    """The hop along document links (engine/consolidate/doclinks.py), the bipartite graph walked from chunk
    to engram to chunk: for each seed chunk d, the document nodes d links to (its own document's
    excepted) and those documents' chunks c (whose `source` is the node's name), each scored
    cos(q, c) + weight * cos(q, d), the best over seeds. Only document nodes are followed: a
    generic engram ("American") would cost a body read for each of its hundreds of chunks.
    `node_ok` (bool per position): the document nodes a walled filter lets through.
    Returns {chunk position: (score, seed chunk position, document node position)}."""
    from ..consolidate.doclinks import is_document

    semantic = arrays.semantic()
    if node_ok is not None:
        semantic = semantic & node_ok
    out: dict[int, tuple[float, int, int]] = {}
    seeds = [int(d) for d in seeds]
    seed_bodies = store.bodies(arrays.ids[seeds]) if seeds else []
    for d, seed_body in zip(seeds, seed_bodies):
        a, b = int(arrays.indptr[d]), int(arrays.indptr[d + 1])
        nodes = arrays.indices[a:b].astype(np.int64)
        nodes = nodes[(arrays.types[a:b] == gf.ABSTRACTION) & semantic[nodes]]
        if not len(nodes):
            continue
        own = str(seed_body.get("source")).casefold()
        for node, body in zip(nodes.tolist(), store.bodies(arrays.ids[nodes])):
            name = str(body.get("name", "")).casefold()
            if not is_document(body) or name == own:
                continue
            chunks = provenance(arrays, node, chunk_ok)
            for c, cb in zip(chunks.tolist(), store.bodies(arrays.ids[chunks])):
                if str(cb.get("source")).casefold() == name:
                    score = float(chunk_sim[c]) + weight * float(chunk_sim[d])
                    if c not in out or score > out[c][0]:
                        out[c] = (score, d, node)
    return out


_EMBEDDERS: dict = {}


def _embed(store, embed, text: str) -> np.ndarray:
    """The cue's vector from `embed`, else from the default embedder (loaded once per process),
    which must be the one the store was built with."""
    if embed is None:
        from .. import embedding

        embedder = _EMBEDDERS.get("default")
        if embedder is None:
            embedder = _EMBEDDERS["default"] = embedding.embedder()
        embedding.check(store, embedder)
        embed = embedder.encode
    return np.asarray(embed([text])[0], np.float32)


def recall(store, query: str, query_vec: np.ndarray, cfg, arrays, now_ms: int,
           embed=None) -> dict:
    """Answer one query in ecphory mode; the JSON-ready result of recall.recall's shape, plus
    `cues`, `cue_extractor` and, on a store without engrams, `fallback`.

    `embed(texts) -> float32 [n, dim]` embeds the cue (the store's embedder); None loads the
    default embedder once per process (only when the cue differs from the query)."""
    from ...models.cues import cue_text, extract_cues
    from .scan import scan_records, walled

    t0 = time.perf_counter()
    cues, used, note = extract_cues(query, cfg.cues, cfg.cue_model or None)
    cue = cue_text(cues, query)
    cue_ms = (time.perf_counter() - t0) * 1000
    query_vec = np.asarray(query_vec, np.float32)
    query_vec = query_vec / max(float(np.linalg.norm(query_vec)), 1e-12)
    rank_vec = query_vec if cfg.rerank_by == "query" else None  # None: the cue's, below

    pos, vecs = engram_matrix(store, arrays)
    # Cosine of every record to the ranking vector, filters and tombstones applied (-inf), and
    # the decay for the signals block (as the default mode reports it).
    cue_vec = query_vec
    if rank_vec is None or len(pos):
        cue_vec = np.asarray(query_vec if cue == query else _embed(store, embed, cue), np.float32)
        cue_vec = cue_vec / max(float(np.linalg.norm(cue_vec)), 1e-12)
    rank_vec = cue_vec if rank_vec is None else rank_vec
    sim, decay, _ = scan_records(store, rank_vec, cfg, now_ms, arrays)
    passed = np.isfinite(sim)
    semantic = arrays.semantic()
    chunk_ok = passed & ~semantic
    live = passed[pos]
    chunk_sim = np.where(chunk_ok, sim, -np.inf).astype(np.float32)
    direct = [int(c) for c in _top(chunk_sim, cfg.direct_chunks if live.any() else cfg.k)]

    final_rows, hop_of, trace = [], {}, []
    engram_sims = np.zeros(0, np.float32)
    via: dict[int, int] = {}        # chunk position -> its rank in the provenance list
    via_row: dict[int, int] = {}    # chunk position -> that engram's row
    if live.any():
        engram_sims, s_all, hops, trace = centroid_spread(
            vecs, live, cue_vec, cfg.k_init, cfg.hops, cfg.expansion, cfg.centroid_seeds,
            None if rank_vec is cue_vec else rank_vec)
        hop_of = dict(zip(s_all, hops))
        members = np.asarray(s_all, np.int64)
        final_rows = [int(r) for r in members[_top(engram_sims[members], cfg.k_final)]]
        found = {}  # chunk -> (rank of its best engram, -its own cosine)
        for rank, row in enumerate(final_rows):
            for c in provenance(arrays, int(pos[row]), chunk_ok).tolist():
                if c not in found:
                    found[c], via_row[c] = (rank, -float(chunk_sim[c])), row
        # The provenance list: engram order, and the chunks of one engram (a name mentioned in
        # many documents) by their own cosine.
        via = {c: i for i, c in enumerate(sorted(found, key=lambda c: (found[c], c)))}
    chunk_score = {}   # the ranking score where it is not the cosine (linked documents)
    link_of = {}       # chunk -> (seed chunk, document node) it was reached through
    if cfg.chunk_rank == "linked":  # cosine order, then the documents the best chunks name
        chunks = rank_chunks(via, direct, chunk_sim, "cosine", cfg.rrf_k)
        chunk_score = {c: float(chunk_sim[c]) for c in chunks}
        for c, (s, d, node) in linked_chunks(store, arrays, chunks[:cfg.link_seeds], chunk_sim,
                                             chunk_ok, cfg.link_weight,
                                             passed if walled(cfg) else None).items():
            if s > chunk_score.get(c, -np.inf):
                chunk_score[c], link_of[c] = s, (d, node)
        chunks = sorted(chunk_score, key=lambda c: (-chunk_score[c], c))
    else:
        chunks = rank_chunks(via, direct, chunk_sim, cfg.chunk_rank, cfg.rrf_k)

    # Results: the chunks, then the engrams, each scored by its cosine to the ranking vector.
    entries = [(c, chunk_score.get(c, float(chunk_sim[c])), None) for c in chunks]
    entries += [(int(pos[r]), float(engram_sims[r]), r) for r in final_rows]
    entries = entries[:cfg.k]
    # The gate compares cosines (anchor_min_sim), not the link-boosted ranking scores.
    confidence = max([0.0] + [float(chunk_sim[p] if row is None else engram_sims[row])
                              for p, _, row in entries])
    # Like the default mode's gate: "no record" when nothing is as close as an anchor must be.
    rejected = not entries or (cfg.gate and confidence < cfg.anchor_min_sim)
    ids = arrays.ids
    results = []
    if not rejected:
        bodies = store.bodies(ids[np.asarray([p for p, _, _ in entries], np.int64)])
        for (p, score, row), body in zip(entries, bodies):
            r = result_row(arrays, p, body, score, {
                "semantic": round(float(sim[p]), 6), "bm25": 0.0, "activation": 0.0,
                "pagerank": 0.0, "decay": round(float(decay[p]), 6)})
            if cfg.explain:
                if row is not None:  # an engram: the hop of the centroid search that found it
                    r["path"], r["hop"] = [int(ids[p])], hop_of[row]
                elif p in link_of:  # a linked document: seed chunk -> document node -> chunk
                    d, node = link_of[p]
                    r["path"], r["hop"] = [int(ids[d]), int(ids[node]), int(ids[p])], "link"
                elif p in via_row:  # a chunk reached through an engram's provenance edge
                    e = via_row[p]
                    r["path"], r["hop"] = [int(ids[pos[e]]), int(ids[p])], hop_of[e]
                else:  # a chunk from the direct search
                    r["path"], r["hop"] = [int(ids[p])], None
            results.append(r)
    out = {"query": query, "mode": "ecphory", "rejected": bool(rejected),
           "confidence": round(confidence, 6), "results": results,
           "cues": cues, "cue_extractor": used, "cue_ms": round(cue_ms, 3)}
    if note:
        out["cue_note"] = note
    if not live.any():
        out["fallback"] = FILTERED_NOTE if walled(cfg) or cfg.types else FALLBACK_NOTE
    if cfg.explain:  # the centroid hops: which engrams made each centroid, what it found
        out["hops"] = [{"hop": h["hop"],
                        "seeds": ids[pos[np.asarray(h["seeds"], np.int64)]].tolist(),
                        "weights": [round(x, 6) for x in h["weights"]],
                        "found": ids[pos[np.asarray(h["new"], np.int64)]].tolist()}
                       for h in trace]
    out["elapsed_ms"] = round((time.perf_counter() - t0) * 1000, 3)
    return out
