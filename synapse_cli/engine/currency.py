"""Memory that stays true: the current version of a fact first, chatter last (issue 17).

Two adjustments of the default mode's fused score, both applied before the gate:
- *content prior*: a turn of one or two words ("ok", "RIP", "👍") scores high against any
  question that names its speaker, because ingest embeds "speaker: text"; it loses
  `lambda_chatter` x (1 - tokens / `content_tokens`) (tokens: its BM25 document length, the
  speaker included), so it never outranks a statement because of a name.
- *supersession*: when the question asks for the current state of one fact (`asks_about_now`),
  a candidate that a newer candidate restates (cosine between the two records >=
  `version_sim`, both among the best `version_depth`) loses `lambda_superseded`: "standup
  moves to 10:00" after "standup is at 9:30". A question about the past ("when did", "first",
  "originally", "before", "used to") or a list ("what are her hobbies?", whose answer is every
  version) keeps the order; `recall --as-of` makes the later versions invisible instead.
"""
from __future__ import annotations

import re

import numpy as np

_PAST = re.compile(r"\b(did|was|were|used to|first|originally|original|initially|before|"
                   r"previous|previously|earlier|old|former|formerly|ago)\b", re.IGNORECASE)
_NOW = re.compile(r"\b(now|currently|current|still|anymore|any more|latest|these days|"
                  r"nowadays|at the moment|right now)\b", re.IGNORECASE)
# one state in the present tense: "where does X live", "what is X's plan", "who owns"; not a
# list ("what are X's hobbies", "what do they like"), whose answer is every version
_ONE_STATE = re.compile(r"^\W*(what|what's|whats|when|when's|where|where's|which|who|who's|"
                        r"how)\b.*?\b(is)\b", re.IGNORECASE)


def asks_about_now(query: str) -> bool:
    """True for a question about the current state of one fact ("Where does Dana live now?",
    "When is the review?"): answered with the newest version. Not for a question about the
    past ("when did", "first", "originally", "before") or a list ("what are her hobbies?")."""
    if _PAST.search(query):
        return False
    return bool(_NOW.search(query) or _ONE_STATE.search(query))


def chatter_penalty(store, arrays, cfg) -> np.ndarray | None:
    """float per position: minus the content prior (0 for records BM25 does not index)."""
    if cfg.lambda_chatter <= 0 or store.manifest.bm25 is None:
        return None
    key = ("chatter", cfg.content_tokens)
    if key not in arrays.cache:
        from .recall import bm25_open

        rec, dl = bm25_open(store, arrays.cache).doc_lengths()  # the live set does not matter
        short = np.zeros(len(arrays.ids), np.float64)
        pos = np.searchsorted(arrays.ids, rec)
        ok = pos < len(arrays.ids)
        ok[ok] = arrays.ids[pos[ok]] == rec[ok]
        short[pos[ok]] = np.clip(1.0 - dl[ok] / cfg.content_tokens, 0.0, 1.0)
        arrays.cache[key] = short
    return -cfg.lambda_chatter * arrays.cache[key]


def superseded_penalty(store, arrays, cfg, query: str, top: np.ndarray) -> np.ndarray | None:
    """float per position: minus `lambda_superseded` for each of the best `version_depth`
    candidates that a newer one among them restates; None when nothing changes."""
    if cfg.lambda_superseded <= 0 or len(top) < 2 or not asks_about_now(query):
        return None
    from .graphview import unit_vectors

    top = np.asarray(top[: cfg.version_depth], np.int64)
    v = unit_vectors(store, top)
    same = (v @ v.T) >= cfg.version_sim
    ts = arrays.timestamps[top]
    newer = ts[None, :] > ts[:, None]          # [i, j]: j is newer than i
    old = (same & newer).any(axis=1)
    if not old.any():
        return None
    out = np.zeros(len(arrays.ids), np.float64)
    out[top[old]] = -cfg.lambda_superseded
    return out
