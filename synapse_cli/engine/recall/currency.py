"""Memory that stays true: the current version of a fact first, chatter last (issue 17).

Six adjustments of the default mode's fused score, all applied before the gate:
- *content prior*: a turn of one or two words ("ok", "RIP", "👍") scores high against any
  question that names its speaker, because ingest embeds "speaker: text"; it loses
  `lambda_chatter` x (1 - tokens / `content_tokens`) (tokens: its BM25 document length, the
  speaker included), so it never outranks a statement because of a name. A turn that only
  asks ("what's the GP's name again?") is worded like the question and states nothing: among
  the best `version_depth` it loses `lambda_question`, so the reply that answers it can rise.
- *supersession*: when the question asks for the current state of one fact (`asks_about_now`),
  a candidate that a newer candidate restates (cosine between the two records >=
  `version_sim`, both among the best `version_depth`) loses `lambda_superseded`: "standup
  moves to 10:00" after "standup is at 9:30". A question about the past ("when did", "first",
  "originally", "before", "used to") or a list ("what are her hobbies?", whose answer is every
  version) keeps the order; `recall --as-of` makes the later versions invisible instead.
- *news* (`lambda_change`, same questions): a statement among the best `version_depth` that
  reports a change ("switched to Three", "pescatarian now", "BA instead") gains up to
  `lambda_change`, scaled by its similarity to the question (0 for unrelated text, all of it
  for the closest candidate): an update worded unlike both the question and the version it
  replaces shares too little with either for the two rules around it to see it.
- *recency* (`lambda_recent`, any question in the present tense): among the best 10, the newer of
  two candidates the question finds about as well gains a little (recency_bonus).
- *newest first* (`newest_first`, any question in the present tense, asks_in_present): among
  the best `version_depth`, the versions of one fact (cosine >= `version_sim` to the
  best-scoring of them, and a topic word of the question in common, so that two turns of one
  speaker are not versions just because both start with the speaker's name) are reordered by
  time within the places they hold: the newest takes the best place, which brings in an update
  the penalty alone leaves below the top 10 ("moved it to Tuesday 24th" after "the design
  review is Thursday 19th").
"""
from __future__ import annotations

import re

import numpy as np

_PAST_WORDS = (r"did|was|were|used to|originally|original|initially|before|previous|"
               r"previously|earlier|old|former|formerly|ago")
_PAST = re.compile(rf"\b(first|{_PAST_WORDS})\b", re.IGNORECASE)
# "first" may be an ordinal of a thing rather than a time ("Aisha's first dress fitting"): a
# question that also says "now" asks about the present version of that thing
_PAST_NOW = re.compile(rf"\b({_PAST_WORDS})\b", re.IGNORECASE)
_NOW = re.compile(r"\b(now|currently|current|still|anymore|any more|latest|these days|"
                  r"nowadays|at the moment|right now)\b", re.IGNORECASE)
# one state in the present tense: "where does X live", "what is X's plan", "who owns"; not a
# list ("what are X's hobbies", "what do they like"), whose answer is every version
_WH = r"^\W*(what|whats|when|where|which|who|how)\b"  # "what's" is "what" and "'s"
_ONE_STATE = re.compile(_WH + r".*?\bis\b", re.IGNORECASE)


def _past(query: str) -> bool:
    """The question asks about the past (_PAST), unless its only sign of the past is "first"
    and it says "now" too (_NOW)."""
    return bool((_PAST_NOW if _NOW.search(query) else _PAST).search(query))


def asks_about_now(query: str) -> bool:
    """True for a question about the current state of one fact ("Where does Dana live now?",
    "When is the review?"): answered with the newest version. Not for a question about the
    past ("when did", "originally", "before", "first" unless it says "now" too) or a list
    ("what are her hobbies?")."""
    if _past(query):
        return False
    return bool(_NOW.search(query) or _ONE_STATE.search(query))


# any present tense: "which Python version does Potluck run on", "where are the keys kept",
# "is the bathroom getting a bath or a shower?"
_PRESENT = re.compile(r"^\W*(what|when|where|who)['’]s\b|" + _WH
                      + r".*?\b(is|are|does|do|has|have)\b|^\W*(is|are|does|do|has|have)\b",
                      re.IGNORECASE)


def asks_in_present(query: str) -> bool:
    """asks_about_now, or any other question in the present tense and not about the past,
    a yes-or-no one too ("Is the bathroom getting a bath or a walk-in shower?"): its
    versions of one fact are put newest first (version_order), which only reorders what the
    question found. superseded_penalty and change_bonus, which move candidates in and out of
    the ranking, stay with asks_about_now: on "Which vet does Dana's cat go to?" they sank the
    answer below a later reminder to call the vet (bench/quality/agent_use.py)."""
    return asks_about_now(query) or (not _past(query) and bool(_PRESENT.search(query)))


# Words with which a chat reports that a fact changed: "switched to Three", "pescatarian now",
# "moved it to Tuesday", "KLM booking cancelled, BA instead", "Updated: ...".
_CHANGE = re.compile(r"\b(now|switched|changed|moved|moving|instead|"
                     r"updated|no longer|anymore|any more|rescheduled|replaced|cancelled|"
                     r"canceled|postponed|pushed back|pushed to|new)\b", re.IGNORECASE)


def reports_change(text: str | None) -> bool:
    """The statement says that something changed (_CHANGE), outside a question."""
    from .attribution import is_statement

    return is_statement(text) and bool(_CHANGE.search(text or ""))


def change_bonus(store, arrays, cfg, query: str, top: np.ndarray,
                 sim: np.ndarray) -> np.ndarray | None:
    """float per position: for a question about the current state (asks_about_now), each of
    the best `version_depth` candidates that reports a change (reports_change) gains
    `lambda_change` times its cosine to the query (`sim`, per position) scaled to [0, 1]
    between `anchor_min_sim` (unrelated text) and the best of those candidates: an update
    worded unlike the question and unlike the version it replaces ("done, switched to Three"
    for "What is Dana's current phone plan?") still says that it is the news, while "new
    week new me", barely related, gains a tenth of it. None when nothing changes."""
    if cfg.lambda_change <= 0 or not len(top) or not asks_about_now(query):
        return None
    top = np.asarray(top[: cfg.version_depth], np.int64)
    hit = np.array([reports_change(b.get("text")) for b in store.bodies(arrays.ids[top])])
    if not hit.any():
        return None
    s = sim[top].astype(np.float64)
    s = np.where(np.isfinite(s), s, cfg.anchor_min_sim)
    floor = min(cfg.anchor_min_sim, s.max())  # the cosine of text unrelated to the query
    span = s.max() - floor
    scale = np.clip((s - floor) / span, 0.0, 1.0) if span > 0 else np.ones(len(top))
    out = np.zeros(len(arrays.ids), np.float64)
    out[top[hit]] = cfg.lambda_change * scale[hit]
    return out


def chatter_penalty(store, arrays, cfg) -> np.ndarray | None:
    """float per position: minus the content prior (0 for records BM25 does not index)."""
    if cfg.lambda_chatter <= 0 or store.manifest.bm25 is None:
        return None
    key = ("chatter", cfg.content_tokens)
    if key not in arrays.cache:
        from .scan import bm25_open

        rec, dl = bm25_open(store, arrays.cache).doc_lengths()  # the live set does not matter
        short = np.zeros(len(arrays.ids), np.float64)
        pos = np.searchsorted(arrays.ids, rec)
        ok = pos < len(arrays.ids)
        ok[ok] = arrays.ids[pos[ok]] == rec[ok]
        short[pos[ok]] = np.clip(1.0 - dl[ok] / cfg.content_tokens, 0.0, 1.0)
        arrays.cache[key] = short
    return -cfg.lambda_chatter * arrays.cache[key]


def question_penalty(store, arrays, cfg, top: np.ndarray) -> np.ndarray | None:
    """float per position: minus `lambda_question` for each of the best `version_depth`
    candidates whose last sentence is a question (attribution.is_statement); None when none
    is."""
    if cfg.lambda_question <= 0 or not len(top):
        return None
    from .attribution import is_statement

    top = np.asarray(top[: cfg.version_depth], np.int64)
    asks = np.array([not is_statement(b.get("text")) for b in store.bodies(arrays.ids[top])])
    if not asks.any():
        return None
    out = np.zeros(len(arrays.ids), np.float64)
    out[top[asks]] = -cfg.lambda_question
    return out


def superseded_penalty(store, arrays, cfg, query: str, top: np.ndarray) -> np.ndarray | None:
    """float per position: minus `lambda_superseded` for each of the best `version_depth`
    candidates that a newer one among them restates; None when nothing changes."""
    if cfg.lambda_superseded <= 0 or len(top) < 2 or not asks_about_now(query):
        return None
    from ..graphview import unit_vectors

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


RECENT_DEPTH = 10  # the candidates among which recency_bonus prefers the newer


def recency_bonus(arrays, cfg, query: str, top: np.ndarray,
                  scores: np.ndarray) -> np.ndarray | None:
    """float per position: for a question in the present tense (asks_in_present), each of
    the best RECENT_DEPTH candidates gains `lambda_recent` x its recency x its relevance, both
    scaled to [0, 1] among them (oldest 0, newest 1; the last of them 0, the best 1): of two
    statements near the top that the question finds about as well, the newer comes first even
    when they are too unlike each other to be seen as versions of one fact ("FROM
    python:3.13-slim" after "Potluck runs on Python 3.12", cosine 0.36). None when nothing
    changes."""
    if cfg.lambda_recent <= 0 or len(top) < 2 or not asks_in_present(query):
        return None
    top = np.asarray(top[:RECENT_DEPTH], np.int64)
    sc = np.asarray(scores[:RECENT_DEPTH], np.float64)
    ts = arrays.timestamps[top].astype(np.float64)
    relevance = (sc - sc.min()) / max(float(sc.max() - sc.min()), 1e-12)
    recency = (ts - ts.min()) / max(float(ts.max() - ts.min()), 1.0)
    gain = cfg.lambda_recent * recency * relevance
    if not gain.any():
        return None
    out = np.zeros(len(arrays.ids), np.float64)
    out[top] = gain
    return out


def version_order(store, arrays, cfg, query: str, top: np.ndarray,
                  scores: np.ndarray) -> np.ndarray | None:
    """float per position to add to the fused score so that, within each group of versions of
    one fact among the best `version_depth` candidates, the newest takes the group's best
    score, the next newest its second best, and so on: the group keeps its places in the
    ranking, its members are reordered by time. A group: the best-scoring candidate not yet in
    one and every other such candidate at cosine >= `version_sim` to it that shares one of the
    question's topic words with it (shared_words; not joined transitively, so a chain of one
    speaker's small talk is no group). With `kind_versions`, first one group of the answers of
    the kind the question asks for (answer_givers) and the versions of each of them. None when
    nothing changes or the question is not in the present tense (asks_in_present)."""
    if len(top) < 2 or not asks_in_present(query):
        return None
    from ..graphview import unit_vectors

    top = np.asarray(top[: cfg.version_depth], np.int64)
    sc = np.asarray(scores[: cfg.version_depth], np.float64)
    v = unit_vectors(store, top)
    bodies = store.bodies(arrays.ids[top])
    same = ((v @ v.T) >= cfg.version_sim) & shared_words(store, arrays, bodies, query, cfg.tags)
    n = len(top)
    group = np.full(n, -1)
    if cfg.kind_versions:  # the answers of the kind asked, and the versions of each, are one
        given = answer_givers(store, arrays, bodies, query, cfg.tags)
        members = same[given].any(axis=0)
        if members.sum() >= 2:
            group[members] = np.flatnonzero(members)[np.argmax(sc[members])]
    for i in np.argsort(-sc, kind="stable"):  # the best unassigned candidate leads a group
        if group[i] < 0:
            group[(group < 0) & same[i]] = i
    ts = arrays.timestamps[top]
    out = None
    for g in np.unique(group):
        members = np.flatnonzero(group == g)
        if len(members) < 2:
            continue
        # newest first; turns stamped with one time (a LoCoMo session) keep their score order
        by_time = members[np.lexsort((-sc[members], -ts[members]))]
        by_score = np.sort(sc[members])[::-1]
        delta = by_score - sc[by_time]
        if not np.any(delta):
            continue
        out = np.zeros(len(arrays.ids), np.float64) if out is None else out
        out[top[by_time]] += delta - 1e-9 * np.arange(len(members))
    return out


def answer_givers(store, arrays, bodies: list[dict], query: str, tags=()) -> np.ndarray:
    """bool per candidate (`bodies`, the best candidates' payloads): for a question that asks
    for a kind of answer (a time of day, a sum of money, a name...: topic.answer_kind), the
    candidate speaks of what the question is about and states an answer of that kind
    (topic.answers); all False for other questions. "What time is the morning carer visit?":
    "9:30 from Monday", "7:45 morning call" and "first visit 7:45 on the dot" give one answer
    each, as unlike one another as three turns can be."""
    from .speakers import subject_names
    from .topic import answers

    out = np.zeros(len(bodies), bool)
    found = answers(query, [b.get("text") for b in bodies],
                    names=lambda: subject_names(store, arrays, query, tags))
    if found is not None:
        out[:] = found[1]
    return out


def content_words(text: str | None, speaker: str | None = None) -> set[str]:
    """The words of `text` that can carry a fact: not stopwords, numbers or the speaker's
    name; each with a plural or -ing/-ed ending cut off (_stem), so that "moves" and "moved"
    meet."""
    from ...models.tokenize import tokenize
    from ...models.words import _STOP

    drop = set(tokenize(speaker or ""))
    return {_stem(w) for w in tokenize(text or "") if w not in _STOP and w not in drop
            and len(w) > 1 and not w.isdigit()}


def _stem(w: str) -> str:
    """A crude common form: the first of -ing, -ed, -es, -s cut off when 3 letters remain."""
    for suf in ("ing", "ed", "es", "s"):
        if w.endswith(suf) and len(w) - len(suf) >= 3:
            return w[: -len(suf)]
    return w


def shared_words(store, arrays, bodies: list[dict], query: str | None = None,
                 tags=()) -> np.ndarray:
    """bool [n, n]: the two memories (`bodies`, their payloads) share a content word
    (content_words); with `query`, a content word that is one of its topic words
    (engine/recall/topic.py): both speak of what the question asks about (`tags`: the
    recall's tag filter, for speakers.subject_names)."""
    words = [content_words(b.get("text"), b.get("speaker")) for b in bodies]
    if query is not None:
        from .speakers import subject_names
        from .topic import topic_words

        # what the question asks about: its topic words and the names in it that are not a
        # speaker's ("Kwame", "Lagos"), whom or where the fact is about
        asked = {_stem(w) for w in [*topic_words(query),
                                    *subject_names(store, arrays, query, tags)]}
        words = [w & asked for w in words]
    n = len(words)
    out = np.eye(n, dtype=bool)
    for i in range(n):
        for j in range(i + 1, n):
            out[i, j] = out[j, i] = bool(words[i] & words[j])
    return out
