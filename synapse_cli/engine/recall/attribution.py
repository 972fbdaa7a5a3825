"""Attribution check: the part of recall's gate that refuses answers about the wrong person.

Memories of a conversation answer "what did Caroline realise after her charity race?" with
whatever matches best, and in a dialogue that is often the other person's turn: Melanie ran the
race, Caroline only replied "that charity race sounds great, Mel!". Activation and similarity
cannot tell the two apart (LoCoMo category 5 is built from such swapped questions: the top
activation separates them from answerable questions no better than chance, AUC 0.45-0.50).

The check, for a query that names exactly one person who speaks in the top `depth` memories:
- only statements count as evidence: a memory whose last sentence is a question states nothing
  (a trailing bracketed annotation such as "[shares a photo]" is not part of the speech);
- content = how well a memory states the query with that name removed (the store indexes
  "speaker: text", so the name alone would favour every turn of that speaker), over the top
  `depth` memories, counting only the query words a memory uses outside its questions:
  "They're adorable! What are their names? Pets bring such joy!" asks for the names, it does
  not state them. `scoring="coverage"` (the default): the sum, over the query words it states,
  of each word's best BM25 share among the top memories, so a short reply that repeats a word
  is worth what the sentence it repeats is worth; `"bm25"`: its BM25 over the words it states
  (per-word scores summed), which favours short turns;
- a statement counts for the person whose fact it states, not always its speaker:
  * a *restatement* of the named person counts for them: a statement whose matched topic words
    (query words with a BM25 share, not stopwords) are all stated by an earlier statement of
    the named person among the top `depth` (an assistant's "Noted: vegetarian." after the
    user's "I'm vegetarian"; Caroline's "that charity race sounds great!" after Melanie's "I
    ran a charity race", when the question is about Melanie). The rule only adds evidence for
    the person asked about; it never takes their own words away (crediting every restatement
    to its first speaker, both ways, refused 6.6% of LoCoMo's answerable questions instead of
    4.5%, for 58.6% of category 5 instead of 52.7%);
  * another speaker's statement that names the person with a possessive ("it's Mei's
    birthday tomorrow") counts for that person, and with `mentioned` one that names them in
    any way other than to address them ("Tomás moved to Berlin", not "Thanks, Tomás!"): in
    a group chat, what others say about a person is often all there is;
- margin = (best content of a statement that counts for someone else - best of one that counts
  for the named person), divided by the best content of any statement (a relative margin); no
  statement for the named person gives margin 1. Memories without a speaker (notes, semantic
  nodes) count for nobody.
The query is rejected when the margin is above `threshold`: someone else said it.

Measured on LoCoMo dev (bench/quality/locomo_recall.py, gate section): see README "Evaluation".
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import numpy as np

from ...models.tokenize import tokenize

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@dataclass
class Verdict:
    name: str
    margin: float
    threshold: float

    @property
    def passed(self) -> bool:
        return self.margin <= self.threshold

    def as_dict(self) -> dict:
        return {"name": self.name, "margin": round(self.margin, 6), "threshold": self.threshold,
                "passed": self.passed}


def _name_pattern(name: str) -> re.Pattern:
    return re.compile(r"(?<!\w)" + re.escape(name) + r"(?:['\u2019]s)?(?!\w)")


@functools.lru_cache(maxsize=256)
def _speaker_pattern(name: str, any_case: bool) -> re.Pattern:
    """`name` as a whole word, never inside a contraction ("i'm" is no "M"); group `s`: a
    possessive."""
    return re.compile(r"(?<![\w'\u2019])" + re.escape(name) + r"(?P<s>['\u2019]s)?(?!\w)",
                      re.IGNORECASE if any_case else 0)


@functools.lru_cache(maxsize=256)
def _lower_case_is_the_name(name: str) -> bool:
    """Typed without its capital, `name` still names the speaker: 3+ letters and no everyday
    word ("Em", "Rob", "Ash", "Will" are words: words.py _NAME_WORDS and _STOP, else the
    tagger's lexicon, postag.common_word)."""
    from ...models import postag
    from ...models.words import _NAME_WORDS, _STOP

    low = name.casefold()
    return not (len(name) < 3 or low in _STOP or low in _NAME_WORDS or postag.common_word(name))


def _in_text(name: str, text: str) -> list[re.Match]:
    """The places a memory names the speaker `name`: as written, and in any case when the
    name is no everyday word ("leaving drinks for gaz saturday": chat often types no
    capitals). The tagger's lexicon (~0.15 s to load) is consulted only for a text that
    holds the name in another case, so a store typed with capitals never loads it."""
    loose = list(_speaker_pattern(name, True).finditer(text))
    if all(m.group(0).startswith(name) for m in loose) or _lower_case_is_the_name(name):
        return loose
    return [m for m in loose if m.group(0).startswith(name)]


def _possessive(m: re.Match) -> bool:
    return m.group("s") is not None


def named_speaker(query: str, speakers: set[str]) -> str | None:
    """The one speaker the query names as a whole word (case-sensitive), else None."""
    named = [s for s in speakers if s.strip() and _name_pattern(s).search(query)]
    return named[0] if len(named) == 1 else None


def without_name(query: str, name: str) -> str:
    return _name_pattern(name).sub(" ", query)


def is_statement(text: str | None) -> bool:
    """False for a text whose last sentence is a question (it asserts nothing); a trailing
    note in brackets ("[shares a photo of ...]") is not read."""
    spoken = (text or "").rstrip()
    # by hand, not a regex anchored at the end: that one rescans a long run of spaces from
    # each of its positions (a 60,000-space memory cost a recall 8 s)
    if spoken.endswith("]"):  # the note opens at the first "[" after the "]" before its own
        note = spoken.find("[", spoken.rfind("]", 0, len(spoken) - 1) + 1)
        if note >= 0:
            spoken = spoken[:note].rstrip()
    return bool(spoken) and not spoken.endswith("?")


def stated_words(text: str | None, tokenize=tokenize) -> set[str]:
    """Tokens of the sentences of `text` that are not questions (a trailing "[shares a photo
    of ...]" note counts as one). `tokenize`: the store's BM25 tokenizer, whose tokens the
    query words are (a store keeps its tokenizer version, models/tokenize.py)."""
    return {t for sentence in _SENTENCE_END.split((text or "").strip())
            if not sentence.rstrip().endswith("?") for t in tokenize(sentence)}


def _stated_matrix(words: list[str], per_word: np.ndarray, texts: list[str | None],
                   tokenize=tokenize):
    """(bool [words, texts]: text i states word j, float [words, texts]: the BM25 shares)."""
    stated = [stated_words(t, tokenize) for t in texts]
    used = np.array([[w in s for s in stated] for w in words], dtype=bool).reshape(len(words),
                                                                                 len(texts))
    return used, np.asarray(per_word, np.float64).reshape(used.shape)


def stated_content(words: list[str], per_word: np.ndarray, texts: list[str | None],
                   tokenize=tokenize) -> np.ndarray:
    """Per text, the sum of `per_word[j]` (word j's BM25 share) over the words it states."""
    used, share = _stated_matrix(words, per_word, texts, tokenize)
    return (share * used).sum(axis=0)


def stated_coverage(words: list[str], per_word: np.ndarray, texts: list[str | None],
                    tokenize=tokenize) -> np.ndarray:
    """Per text, the sum over the query words it states (with a BM25 share) of that word's
    best share among `texts`: which words it covers, weighted by how telling each is, without
    BM25's length normalisation and term frequency (a short "Noted: vegetarian." covers
    "vegetarian" exactly as much as the longer sentence it repeats)."""
    used, share = _stated_matrix(words, per_word, texts, tokenize)
    if not share.size:
        return np.zeros(len(texts))
    best = share.max(axis=1, keepdims=True)
    return np.where(used & (share > 0), best, 0.0).sum(axis=0)


def matched_topics(words: list[str], per_word: np.ndarray, texts: list[str | None],
                   tokenize=tokenize) -> list[frozenset]:
    """Per text, the query words it states that have a BM25 share and are not stopwords: what
    it says about the question (the basis of the restatement rule)."""
    from ...models.words import _STOP

    used, share = _stated_matrix(words, per_word, texts, tokenize)
    hit = used & (share > 0)
    topical = [j for j, w in enumerate(words) if w not in _STOP]
    return [frozenset(words[j] for j in topical if hit[j, i]) for i in range(len(texts))]


_YOU = re.compile(r"\b(you|your|yours|yourself|you're|youre|you've|you'll|you'd|u|ur)\b",
                  re.IGNORECASE)
# the speaker as subject or owner; not "me" as an object ("tell me all about it", "let me
# know"), which asks the listener about themselves
_ME = re.compile(r"\b(i|i'm|im|i've|ive|i'll|i'd|my|mine|myself)\b", re.IGNORECASE)


def addresses(text: str | None) -> bool:
    """The statement speaks to someone about them: it says "you"/"your" and not "I"/"my"
    ("Your new address is saved", "you're on the Explorer plan now"), so its fact is the
    listener's, not the speaker's."""
    t = (text or "").replace("\u2019", "'")
    return bool(_YOU.search(t)) and not _ME.search(t)


_GREETING = re.compile(r"(?:^|\b)(hey|hi|hello|thanks|thank you|congrats|congratulations|oh|"
                       r"wow|yes|yeah|yep|ok|okay|sure|dear|bye|morning|night|welcome|sorry|"
                       r"great|good|nice|lol|haha|aw+|omg)[\s,!.]*$", re.IGNORECASE)


def mentions_third_person(name: str, text: str | None) -> bool:
    """`text` names `name` other than to address them: "Tomás moved to Berlin", "the party
    is at Ana's place" (possessive), "I'll drive Ana", but not "Hey Ana!", "Thanks, Ana.",
    "Ana, that's great", "so proud of you, Ana!", "Hey Ana how are you" (a vocative: the name
    set off by a comma or closing the sentence, or right after a greeting)."""
    t = text or ""
    for m in _in_text(name, t):
        if _possessive(m):
            return True
        if re.match(r"\s*(?:[,!?]|\.(?:\s|$)|$)", t[m.end():]):  # "..., Ana!" / "Ana, ..."
            continue
        if _GREETING.search(t[:m.start()]):  # "Hey Ana how are you"
            continue
        return True
    return False


def credited(name: str, speakers: list[str | None], texts: list[str | None],
             matched: list[frozenset] | None = None, order: list | None = None,
             addressed: bool = False, mentioned: bool = False) -> list:
    """Per memory, the person its statement counts for (see the module docstring): its speaker;
    the named person when another speaker names them with a possessive ("Mei's"); else, for a
    restatement (its `matched` words all stated by an earlier statement of another speaker,
    `order` giving the time order, e.g. (timestamp, id)), whoever that earlier one counts for,
    when that is the named person (the rule only adds evidence for the person asked about).
    With `addressed`, another speaker's statement that addresses its listener (addresses())
    counts for the named person too: an agent's "you're on the Explorer plan now" is the
    customer's fact. With `mentioned`, another speaker's statement that names the person other
    than as a vocative (mentions_third_person: "Tomás moved to Berlin") counts for them, which
    the possessive rule is a case of. Without `matched` and `order` the restatement rule does
    not apply."""
    def possessive(text: str) -> bool:  # "Mei's", "mei's" in a text without capitals
        return any(_possessive(m) for m in _in_text(name, text))

    out = list(speakers)
    n = len(speakers)
    if matched is None or order is None:
        seq = range(n)
    else:
        seq = sorted(range(n), key=lambda i: order[i])
    done = []
    for i in seq:
        spk = speakers[i]
        if spk and spk != name and is_statement(texts[i]) and (
                possessive(texts[i] or "") or (addressed and addresses(texts[i]))
                or (mentioned and mentions_third_person(name, texts[i]))):
            out[i] = name
        elif spk and matched is not None and order is not None and matched[i] \
                and is_statement(texts[i]):
            src = next((j for j in done if order[j] < order[i] and speakers[j]
                        and speakers[j] != spk and matched[i] <= matched[j]), None)
            if src is not None and out[src] == name:
                out[i] = name
        if speakers[i] and is_statement(texts[i]):
            done.append(i)
    return out


def margin(name: str, speakers: list[str | None], texts: list[str | None],
           content: np.ndarray, credit: list | None = None) -> float | None:
    """How much better the best statement that counts for someone else matches than the best
    that counts for the named person (see the module docstring; `credit`: whom each counts
    for, default its speaker); None when no statement matches at all."""
    mine, others = [], []
    credit = speakers if credit is None else credit
    for spk, who, text, c in zip(speakers, credit, texts, content.tolist()):
        if spk and is_statement(text):  # a note with no speaker is nobody's word against hers
            (mine if who == name else others).append(c)
    best = max(mine + others, default=0.0)
    if best <= 0:
        return None
    if not others:
        return -1.0
    if not mine:
        return 1.0
    return (max(others) - max(mine)) / best


def check(query: str, bodies: list[dict], word_scores, depth: int,
          threshold: float, order: list | None = None,
          restatements: bool = True, scoring: str = "coverage",
          addressed: bool = False, mentioned: bool = False,
          tokenize=tokenize) -> Verdict | None:
    """The verdict for a query over its ranked result bodies, or None when the check does not
    apply (no single named speaker among them, or no statement matches).
    `word_scores(query_without_name)` returns (its distinct words, their BM25 shares [words,
    depth]) for the first `depth` results (BM25Index.word_scores). Only those `depth` results
    are read, so the verdict does not depend on how many results the caller asked for.
    `order`: a sortable time key per body (e.g. (timestamp, id)); with it and `restatements`,
    a restatement counts for whoever said it first. `scoring`: "coverage" (stated_coverage)
    or "bm25" (stated_content). `tokenize`: the tokenizer `word_scores` used (the store's)."""
    top = bodies[:depth]
    speakers = [b.get("speaker") for b in top]
    name = named_speaker(query, {s for s in speakers if s})
    if name is None:
        return None
    texts = [b.get("text") for b in top]
    words, per_word = word_scores(without_name(query, name))
    matched = matched_topics(words, per_word, texts, tokenize) \
        if restatements and order is not None else None
    credit = credited(name, speakers, texts, matched, order[:depth] if matched else None,
                      addressed, mentioned)
    content = (stated_coverage if scoring == "coverage" else stated_content)(
        words, per_word, texts, tokenize)
    m = margin(name, speakers, texts, content, credit)
    return None if m is None else Verdict(name, m, threshold)
