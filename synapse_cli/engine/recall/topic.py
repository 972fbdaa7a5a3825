"""The gate's topic check: "no record" when nothing stored ever mentions what a question is
about. "What is Dana's blood type?" names a person the store knows well, so its nearest memories
are close and activation flows; but no memory says "blood" or "type". A question whose topic
words (not names, not question or filler words) are all missing from the store's BM25
vocabulary, in every form (conflate.py), is rejected.

The check is lexical first: the store's own vocabulary is a per-store statistic, not a
threshold calibrated on one data set. Synonyms are the exception ("Does anyone have a pet?" in a
store that says "rescue dog"), so a word the store does not use still counts as known
when its embedding is close to one of the top memories (`topic_sim`: "pet" to "adopting a
rescue dog" is 0.25; `cover_sim` for the stricter check against the memories reached). An
identifier with digits that the store never mentions ("INC-415") is refused whatever else the
question shares with the store, and so is a question about something of someone the store never
mentions ("What is Bob's bank PIN?" where only Ana's memories can be seen). It cannot
refuse a question whose words the store uses for something else ("What breed is the cat?" in a
store that mentions cats). A question that asks for a kind of answer (a phone number, a price,
a time of day, a date, a version, a name, a number: answer_kind) is refused when none of the
memories it reaches both speaks of its topic and states an answer of that kind
(missing_value).
"""
from __future__ import annotations

import re

from ...models.tokenize import tokenize
from ...models.words import _DAYS, _MONTHS, _NOT_NOUN, _QUOTED, _STOP
from .bridges import _NOT_NAME, _POSSESSIVE, names_in

# Words that say how a question asks, not what about (beyond the stopwords of models/words.py):
# "When did Gina mention Shia Labeouf?", "What attributes describe John?", "the topic of
# discussion between John and Tim" ask about what was said, in words nobody says.
_ASKING = frozenset("""
what which who whom whose when where why how name names named called call currently current
now latest still anymore these days nowadays right recently today ever usually often exactly
happen happened happening new newest last first kind sort getting
anyone anybody someone somebody everyone everybody
mention mentions mentioning describe describes described talk talks talked talking discuss
discusses discussed discussion discussions topic topics conversation between attribute
attributes trait traits
""".split())
_IDENT = re.compile(r"\b[A-Za-z]+[-_.]?\d[\w.-]*")  # INC-412, v2, pr1234
_NAME = re.compile(r"(?<=\s)([A-Z][\w'’-]*)")  # capitalised after the first word
# whose the question asks about: an owner ("Bob's PIN", "Dana's dentist"). Not every name: the
# memories that answer "Which Slack channel do alerts go to?" need not say "Slack", and counting
# a name after the verb too ("where does X live") refused an answerable question of the
# held-out agent-use chats (bench/quality/agent_use.py)
_OWNER = re.compile(r"(?<=\s)([A-Z][\w-]*)['’]s\b")


def topic_words(query: str, tokenize=tokenize) -> list[str]:
    """The query's topic words: tokens that are neither stopwords, question words, bare numbers
    nor capitalised names (a name inside the question, "Dana's", "Paylark"). An identifier
    with digits ("INC-412", "v2.4") is a topic of its own: its number counts. `tokenize`: the
    store's BM25 tokenizer when the words are looked up in its index (a store keeps its
    tokenizer version, models/tokenize.py)."""
    # every token of a name: "Mary-Jane" and "O'Brien" leave no "jane" or "brien" behind
    names = {t for m in _NAME.finditer(query.strip()) for t in tokenize(m.group(1))}
    ids = {t for m in _IDENT.finditer(query) for t in tokenize(m.group(0)) if t.isdigit()}
    return [w for w in dict.fromkeys(tokenize(query))
            if w in ids or (w not in _STOP and w not in _ASKING and w not in names
                            and not w.isdigit() and len(w) > 1)]


def _has_digit(token: str) -> bool:
    return any(c.isdigit() for c in token)  # "412" of "INC-412", and "v3", "pr1234" whole


def unknown_identifiers(query: str, index, within=None) -> list[str]:
    """The tokens of the identifiers in `query` ("INC-415", "v3", "pr1234") that the store
    never mentions: an identifier names one thing, so when the store does not know it nothing
    stored is about it, whatever else the query shares with the store ("What was the root
    cause of INC-415?" in a store that discusses INC-412's root cause). `within`: the record
    ids that count (a tag filter's), else the whole store."""
    out = []
    for m in _IDENT.finditer(query):
        toks = index.tokenize(m.group(0))
        if any(_has_digit(t) and not index.knows(t, within) for t in toks):
            out += [t for t in toks if t not in out]
    return out


def unknown_topic(query: str, index, embed=None, memories=None,
                  min_sim: float = 0.2, within=None) -> list[str] | None:
    """The topic words of `query` when the store knows none of them (then the gate says "no
    record"), or the words of an identifier the store never mentions (unknown_identifiers),
    or the owners it names that the store never mentions (unknown_names), else None. A query
    without topic words is refused here only for those.

    With `embed` (texts -> unit vectors) and `memories` (a function returning the unit vectors
    of the best candidates, called only when the words are unknown),
    a word the store does not use still counts as known when its vector has cosine >=
    `min_sim` to one of those memories: "medication" to "allergic to penicillin" (0.40),
    where "blood" to anything a chat about flats and dentists says stays near 0.2 (MiniLM;
    the agent-use tune half, bench/quality/agent_use.py: unknown words of never-answered questions
    0.16-0.35, of answerable ones 0.13-0.44).

    `within` (record ids): under a tag filter, the store is what that filter lets through, so
    that whether a word is known never depends on another user's records."""
    words = topic_words(query, index.tokenize)
    ids = unknown_identifiers(query, index, within)
    if ids:
        return ids
    if words and not any(index.knows(w, within) for w in words) \
            and not _near(words, embed, memories, min_sim):
        return words
    return unknown_names(query, index, within) or None


def unknown_names(query: str, index, within=None) -> list[str]:
    """The owners named in `query` ("Bob's", _OWNER; not stopwords, days or months) that the
    store never mentions in any form: the question asks about something of theirs, so when no
    memory mentions them, none is about it. "What is Bob's bank PIN?" under Ana's tag, whose
    memories say "Ana's bank PIN is 4417", was answered with her PIN. `within`: as in
    unknown_identifiers."""
    out = []
    for m in _OWNER.finditer(query.strip()):
        for t in index.tokenize(m.group(1))[:1]:
            if len(t) > 1 and not t.isdigit() and t not in _NOT_NAME and t not in out \
                    and not index.knows(t, within):
                out.append(t)
    return out


def uncovered_topic(query: str, index, texts: list[str | None], embed=None, memories=None,
                    min_sim: float = 0.3) -> list[str] | None:
    """The topic words of `query` when none of them, in any form or family (conflate.stem,
    conflate.family), is used by any of `texts` (the best memories), else None: the memories
    the question reaches talk about the people it names, not about what it asks ("What is
    Dana's blood type?" reaches Dana's turns, none says "blood" or "type"). Stricter than
    unknown_topic, which asks the whole store. A word close in meaning to one of the memories
    (cosine of its vector to theirs >= `min_sim`, with `embed` and `memories` as in
    unknown_topic) counts as used."""
    from ...models.conflate import family, stem

    words = topic_words(query, index.tokenize)
    if not words:
        return None
    tokens = {t for text in texts for t in index.tokenize(text or "")}
    stems = {stem(t) for t in tokens}
    families = {key for t in tokens if (key := family(t))}
    if any(stem(w) in stems or family(w) in families for w in words) \
            or _near(words, embed, memories, min_sim):
        return None
    return words


def _near(words: list[str], embed, memories, min_sim: float) -> bool:
    """Some word's vector has cosine >= `min_sim` to one of the memories' (False without
    `embed` or `memories`)."""
    if embed is None or memories is None:
        return False
    vecs = memories()
    return bool(len(vecs)) and float((embed(words) @ vecs.T).max()) >= min_sim


# What a question asks for, and what a memory that answers it must state (answer types, the
# oldest idea of question answering): a phone number has digits enough to dial, a price a
# sum of money, "what time" a clock time, "what's the name of" a proper name. Checked in
# this order; the first kind whose question pattern matches decides. Not "how many": in chat
# that is mostly a count over many memories ("How many times has Nate won?"), stated by none.
_NUMBER_WORDS = (r"one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|twenty|"
                 r"thirty|forty|fifty|hundred|thousand|dozen|couple|half|a few")
# months and days by name; the ones that are also common words ("may", "sat", "wed", "mon",
# "mar", "march") only next to a day's number: "May 12", "12 March"
_AMBIGUOUS = ("may", "march", "mar", "sat", "wed", "mon")
_NAMED = [w for w in _MONTHS + _DAYS + ["jan", "feb", "apr", "jun", "jul", "aug", "sep", "sept",
                                        "oct", "nov", "dec"] if w not in _AMBIGUOUS]
_NEXT_TO_DAY = "|".join(_AMBIGUOUS)
_KINDS = (
    ("phone number",
     re.compile(r"\b(phone|mobile|telephone|landline|cell)\s+(number|no)\b", re.IGNORECASE),
     re.compile(r"(?<![\w+-])(?!\d{4}-\d\d-\d\d)\+?\d[\d ()-]{5,}\d")),  # not an ISO date
    ("sum of money",  # "how much does it cost", "what is the rent"; not "who pays the rent?"
     re.compile(r"\bhow much\b.*\b(cost|costs|costing|charge|charges|charged|charging|earn|"
                r"earns|earned|earning|pay|pays|paid|paying|spend|spends|spent|spending|owe|"
                r"owes|owed|owing|rent|fee|fees|budget)\b|"
                r"\bwhat\b.*\b(price|prices|cost|costs|salary|fee|fees|rent|budget)\b",
                re.IGNORECASE),
     # a currency, or an amount a price can be ("450", "26.80"): not "40 regulars"
     re.compile(r"[£$€¥₹]\s?\d|\d\s?(k|p|quid|pounds?|dollars?|euros?|bucks|grand|usd|gbp|"
                r"eur)\b|\b(quid|pounds|dollars|euros|bucks|pence|cents|free)\b|"
                r"\b(?!(?:19|20)\d\d\b)\d{3,}\b|\b\d+\.\d\d\b|"
                # a year is one only after "in", "since"...: "2000 all in" is a price
                r"(?<!\bin )(?<!\bsince )(?<!\bfrom )(?<!\bof )(?<!\buntil )(?<!\bby )"
                r"\b(?:19|20)\d\d\b", re.IGNORECASE)),
    ("time of day",
     re.compile(r"\bwhat time\b(?! of (the )?(year|month|week|day|life)\b)", re.IGNORECASE),
     re.compile(r"\b([01]?\d|2[0-3])[:.][0-5]\d\b|\b\d{1,2}\s?([ap]\.?m)\b|\b(noon|midday|"
                r"midnight|o['’]?clock)\b|\b(half|quarter)\s+(past|to)\b|\bhalf\s+("
                + _NUMBER_WORDS + r")\b", re.IGNORECASE)),
    ("date",
     re.compile(r"\b(what|which) (date|day)\b", re.IGNORECASE),
     re.compile(r"\b\d{1,2}(st|nd|rd|th)\b|\b\d{1,2}[/.-]\d{1,2}\b|\b(" + "|".join(_NAMED)
                + r")s?\b|\b(" + _NEXT_TO_DAY + r")\s+\d{1,2}\b|\b\d{1,2}\s+(" + _NEXT_TO_DAY
                + r")\b|\b(today|tomorrow|tonight)\b", re.IGNORECASE)),  # "Fridays"
    ("version",
     re.compile(r"\bversions?\b", re.IGNORECASE),
     re.compile(r"\bv?\d+(\.\d+)*\b", re.IGNORECASE)),  # "3.12", "postgres 16", "v2"
    ("name",
     re.compile(r"\bname of\b|\b(first|last|full|maiden|middle|sur)\s?name\b|"
                r"['’]s name\b|\bcalled\?*$", re.IGNORECASE),
     None),  # a proper name (bridges.names_in) or a label (_states)
    ("number",
     re.compile(r"\b(how much|how old|age|ip address)\b", re.IGNORECASE),
     re.compile(r"[0-9£$€]|\b(" + _NUMBER_WORDS + r")\b", re.IGNORECASE)),
)
# the thing whose version a question asks: "Which Postgres version", "the version of Django"
# (two patterns: in one alternation the leftmost match wins, and "Which version of Django"
# would give "Which")
_VERSION_OF = (re.compile(r"\bversions?\s+of\s+(?:the\s+)?([A-Za-z][\w.+-]*)", re.IGNORECASE),
               re.compile(r"([A-Za-z][\w.+-]*)\s+versions?\b", re.IGNORECASE))


# what else a name can be: something quoted (models/words.py _QUOTED), an identifier with
# digits (_IDENT), code (in backticks or snake_case: `checkout_v2`), a #channel or @handle
_CODE = re.compile(r"`[^`]+`|\b\w+_\w+|(?<![\w&])[#@][A-Za-z][\w-]+")


QUESTION_CHARS = 300  # a question longer than this asks for no kind of answer in its tail


def answer_kind(query: str):
    """(what the question asks for, the words that ask it, the pattern of an answer; None for
    a proper name) for the first of _KINDS whose question pattern matches, else None. Only
    the first QUESTION_CHARS characters are read: the patterns backtrack over a long text."""
    query = query[:QUESTION_CHARS]
    for kind, asks, answer in _KINDS:
        m = asks.search(query)
        if m:
            return kind, m.group(0), answer
    return None


_WHEN = frozenset(_DAYS + _MONTHS + "today tomorrow tonight yesterday morning afternoon "
                  "evening night week weekend month year".split())
_I = re.compile(r"\bI(?:['’](?:m|ve|ll|d))?\b")  # a capital every typist keeps
_CALLED = re.compile(r"\b(?:called|named|name is|name['’]s)\s+(?:(?:a|an|the|our|my|his|her)\s+)?"
                     r"([a-z][\w'’-]*)")
_WORD_OR_MARK = re.compile(r"[\w'’-]+|[^\w\s]")


def _states(text: str, answer, asked: set[str], about: set[str] = frozenset()) -> bool:
    """`text` states an answer of the kind: it matches `answer`, or, for a name (None), it
    has a proper name (capitalised inside a sentence) that the question does not use or a
    label (quoted, an identifier, code). A text typed without capitals (but "I") shows no
    name by its case; there a name is a word after "called"/"named"/"name is" ("the vet is
    called greenside") or one that follows a word of the topic (`about`, stems) and ends a
    phrase ("our dog biscuit, not ..."; not "dog food is ...", "the dentist texted"), and is
    no stopword, common word, time or -ed/-ing/-ly form."""
    from ...models.conflate import stem

    if answer is not None:
        return bool(answer.search(text))
    if _QUOTED.search(text) or _IDENT.search(text) or _CODE.search(text):
        return True
    if any(c.isupper() for c in _I.sub("", text)):
        return any(n.casefold() not in asked for n in names_in(text))
    if any(w not in _STOP and w not in _WHEN and w not in asked
           for w in _CALLED.findall(text)):
        return True
    toks = _WORD_OR_MARK.findall(text)
    return any(stem(a) in about and w.isalpha() and w not in _STOP and w not in _NOT_NOUN
               and w not in _WHEN and w not in asked and not w.endswith(("ed", "ing", "ly"))
               and not nxt[:1].isalnum()
               for a, w, nxt in zip(toks, toks[1:], toks[2:] + [""]))


def answers(query: str, texts: list[str | None], tokenize=tokenize,
            names=frozenset) -> tuple[str, list[bool]] | None:
    """For a question that asks for a kind of answer (answer_kind), (the kind, per text of
    `texts` whether it both speaks of what the question is about and states an answer of that
    kind); None for a question that asks for no kind or names nothing to look for ("How much
    is it?"). What it is about: its topic words, in any form; when those are only the asking
    words ("How old is Biscuit?"), also `names()`, the people and things it names that are
    not speakers (speakers.subject_names; called only then), since "Biscuit turned 6" answers
    it. A version is of the thing the question names, when it names one ("Which Postgres
    version..."), and stated right after its name: the question's topic words ("staging",
    "run") say too little."""
    from ...models.conflate import stem

    found = answer_kind(query)
    if found is None:
        return None
    kind, asking, answer = found
    about = {stem(w) for w in topic_words(query, tokenize)}
    named = _versioned(query, names) if kind == "version" else None
    if named:  # the number right after the thing the question names: "postgres 16",
        # "python:3.13"; not "staging: 212 passed" or "django-tailwind ... tailwind 4"
        about = {stem(named)}
        answer = re.compile(r"\b" + re.escape(named) + r"[\s:]{0,2}(version\s*)?v?\d",
                            re.IGNORECASE)
    elif not about - {stem(w) for w in tokenize(asking)}:  # "How old is Biscuit?"
        about |= {stem(n) for n in names()}
    if not about:
        return None
    asked = {_POSSESSIVE.sub("", w).casefold() for w in re.findall(r"[\w'’-]+", query)}
    return kind, [bool(about & {stem(t) for t in tokenize(text or "")})
                  and _states(text or "", answer, asked, about) for text in texts]


def _versioned(query: str, names) -> str | None:
    """The name whose version `query` asks ("Postgres" in "Which Postgres version does staging
    run?"), when it is one of `names()` (the question's names that are no speakers), else
    None: "Which version of the report did Sam send?" asks about the report, not Sam."""
    found = [m.group(1).casefold() for p in _VERSION_OF if (m := p.search(query))]
    known = {n.casefold() for n in names()} if found else set()
    return next((w for w in found if w in known), None)


def missing_value(query: str, texts: list[str | None], tokenize=tokenize,
                  names=frozenset) -> str | None:
    """What the question asks for ("phone number", answer_kind) when none of `texts` (the best
    memories) both speaks of what it is about and states an answer of that kind (answers):
    "What's Maureen's phone number?": they talk about her, "she's number 29" is no phone
    number; "What's the name of Dana's dentist?": the dentist turns name no one. None
    otherwise."""
    found = answers(query, texts, tokenize, names)
    if found is None or any(found[1]):
        return None
    return found[0]
