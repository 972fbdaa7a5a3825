"""Candidate spans: what in a window *could* name an entity, found deterministically (a 135M
model cannot find them itself). Every span occurs verbatim in its window; speakers are never
candidates (`speakers`; the engine links episodes to speaker nodes itself)."""
from __future__ import annotations

import re

from . import postag
from .words import (_BE, _CLOCK, _CONNECT, _DAYS, _DET, _GENERIC, _GERUND_CUE, _HEAD_TYPE,
                    _MONTHS, _NOT_NOUN, _QUOTED, _SENT_END, _SPEAKER, _STOP, _TOKEN, _VERB_ING,
                    _YEAR)

MAX_CANDIDATES = 6


def window_text(texts: list[str]) -> str:
    return "\n".join(" ".join(t.split()) for t in texts)


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


def candidate_spans(text: str, limit: int = MAX_CANDIDATES, pos: bool | None = None,
                    tagged: set | None = None) -> list[str]:
    """Spans of window `text` that may name an entity, most name-like first, each verbatim.

    Speakers (the "Name: " prefixes, and short forms of their names) are never candidates: the
    consolidation engine links episodes to speaker nodes itself. Order: quoted titles, proper
    names (capitalised runs, not a sentence-initial word unless it recurs capitalised or is
    possessive), absolute times (months, years, clock times; weekdays are relative and left
    out), then common-noun phrases (up to 3 words after a determiner, or an activity gerund
    after "love/enjoy/went/into ..."), phrases mentioned twice first.
    """
    pos = USE_POS if pos is None else pos
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
                while j < len(toks) and not toks[j - 1][0].endswith(("'s", "’s")):
                    t = toks[j][0]
                    tl = t.casefold()
                    gap = body[toks[j - 1][2]:toks[j][1]]
                    if gap == " & " and pos and _is_cap(t) and tl not in _STOP \
                            and tl not in _DAYS and tl not in _MONTHS \
                            and not _is_speaker_ref(_base(t), names) \
                            and (postag.common_word(toks[j - 1][0]) or postag.common_word(t)):
                        j += 1  # "Smoke & Salt", "Bloom & Bramble"; not "Jess & Tom"
                        continue
                    if gap != " ":
                        break
                    if _is_cap(t) and tl not in _STOP and tl not in _DAYS and tl not in _MONTHS \
                            and not _is_speaker_ref(_base(t), names):
                        j += 1
                    elif tl in _CONNECT and j + 1 < len(toks) and _is_cap(toks[j + 1][0]) \
                            and toks[j + 1][0].casefold() not in _STOP \
                            and body[toks[j][2]:toks[j + 1][1]] == " " \
                            and not (tl == "and" and pos and _two_names(toks[j - 1][0],
                                                                       toks[j + 1][0])):
                        j += 2
                    else:
                        break
                if j < len(toks) and body[toks[j - 1][2]:toks[j][1]] == " " \
                        and toks[j][0] in _HEAD_TYPE and not toks[j - 1][0].endswith("s") \
                        and not tok.isupper() and (j > i + 1 or not starts[i]
                                                   or _base(tok).casefold() in cap_mid):
                    j += 1  # a name with its kind: "Berlin marathon", "LGBTQ center"
                if starts[i] and j > i + 2 and pos and toks[i + 1][0].casefold() not in _CONNECT \
                        and _base(tok).casefold() not in cap_mid and _verb_or_adverb(tok):
                    i = i + 1  # "Booked Hollins Barn!!" names the barn
                    tok, s, e = toks[i]
                    low = tok.casefold()
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
                          and not tok.endswith(("'s", "’s")) and not tok.isupper()
                          and not (pos and _initial_name(_base(tok), body[e:e + 1]))) \
                        and not (pos and _shouted([t for t, _, _ in toks[i:j]])):
                    caps.append(span)
                elif single and _activity(toks, i, body):
                    activities.append(tok)  # "Cooking and baking are ..."
                    nouns.append(tok)

                i = j
                continue
            if _YEAR.match(tok) or _CLOCK.match(tok):
                dates.append(tok)
            elif low in _DET or (low in _GERUND_CUE and i + 1 < len(toks)):
                phrase = _noun_phrase(toks, i + 1, body, gerund_only=low not in _DET,
                                      after_det=low in _ARTICLES)
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

    if pos:
        before = {n.casefold() for n in titles + caps + dates + nouns}
        for body, _, _ in parsed:
            for n in _tagged_nouns(body):
                nouns.append(n)
                if tagged is not None and n.casefold() not in before:
                    tagged.add(n)
    nouns += _coordinated(parsed, {n.casefold() for n in nouns})
    nouns.sort(key=tier)  # stable: then order of mention
    for group in (titles, caps, dates, nouns):
        for span in group:
            add(span)
    # A common noun inside a longer candidate is that candidate's head or modifier: "store" in
    # "online clothing store", "job" in "summer job".
    # The same holds for a shorter common-noun phrase ("pottery class" in "pottery class fees");
    # a name stays ("NYC" and "NYC trip"). A singular and its plural name one thing: the first
    # mention stays.
    padded = [f" {c.casefold()} " for c in found]
    found = [c for c in found if not (c.islower() or c.istitle())
             or not any(len(x) > len(c) + 2 and f" {c.casefold()} " in x for x in padded)]
    keys: set[str] = set()
    out = []
    for c in found:
        k = c.casefold()
        k = k[:-1] if len(k) > 3 and k.endswith("s") and not k.endswith("ss") else k
        if k not in keys:
            keys.add(k)
            out.append(c)
    return out[:limit]


# A preposition right after an article starts a compound ("a via ferrata", "the in crowd").
_ARTICLES = frozenset({"a", "an", "the"})
_PREP_IN_COMPOUND = frozenset({"via", "after", "in", "off", "on", "up", "over", "under", "out"})
# Adverbs of place that end a noun phrase without being part of it ("the center downtown").
_PLACE_ADVERB = frozenset({"downtown", "uptown", "nearby", "abroad", "overseas", "upstairs",
                           "downstairs", "outside", "inside", "offshore"})

USE_POS = True
POS_ADJ = True


def _two_names(left: str, right: str) -> bool:
    """Neither side of "X and Y" is a common word: two names ("Jess and Tom", "Élodie and
    Zoë"), not one ("Pride and Prejudice", "Marks and Spencer"; "Aisha and Rob" too, as "rob"
    is a verb)."""
    return not (postag.common_word(_base(left)) or postag.common_word(_base(right)))


def _shouted(run: list[str]) -> bool:
    """Capitals that shout, not name: two words or more, or one of four letters or more,
    every one upper case and a common word or one letter repeated ("AAAAAAAA WIN", "HOME");
    an acronym the lexicon does not know ("LGBTQ", "RSVP") or a short one ("US", "TV") stays
    a name."""
    return (len(run) > 1 or len(run[0]) > 3) and all(
        t.isupper() and (len(set(t)) == 1 or postag.common_word(_base(t))) for t in run)


def _verb_or_adverb(tok: str) -> bool:
    """The tagger's lexicon knows `tok`, lower-cased, as a verb or an adverb ("Booked",
    "Finally"): a sentence-initial one before a name is not part of it. Not adjectives:
    "New York", "Red Lion"."""
    t = postag.lexicon_tag(tok)
    return t is not None and t.startswith(("VB", "RB"))


def _initial_name(tok: str, after: str) -> bool:
    """A capitalised word that starts a sentence is a name when the tagger's lexicon does not
    know it in lower case as a common word ("Maya finished ...", not "Adding ...") and it is
    not a word standing alone before punctuation ("Yep, ...", "Hah!": interjections the
    lexicon does not know); the lexicon's own names ("maya": FW) always are."""
    if not (tok.isalpha() and len(tok) > 2):
        return False
    t = postag.lexicon_tag(tok)
    return t in postag.NAME_TAGS or (t is None and after == " ")


def _noun_ok(w: str) -> bool:
    low = w.casefold()
    return (w.islower() and w.replace("-", "").isalpha() and len(w) >= 3 and low not in _STOP
            and low not in _NOT_NOUN and low not in _DAYS and low not in _MONTHS
            and low not in _VERB_ING)


def _tagged_nouns(body: str) -> list[str]:
    """Bare nouns and noun compounds the part-of-speech tagger finds (postag.py): runs of up to
    3 nouns, optionally after one descriptive adjective ("pottery", "video games", "contemporary
    dance"), generic words ("kids", "stuff") trimmed from the end; every span verbatim."""
    out: list[str] = []
    run: list[tuple[str, str]] = []

    def flush():
        while run and (run[-1][0].casefold() in _GENERIC | _PLACE_ADVERB
                       or run[-1][1] not in postag.NOUN_TAGS):
            run.pop()
        while run and run[0][0].casefold() in _GENERIC:
            run.pop(0)
        if run and any(t in postag.NOUN_TAGS and w.casefold() not in _GENERIC for w, t in run):
            span = " ".join(w for w, _ in run)
            if re.search(rf"(?<![\w-]){re.escape(span)}(?![\w-])", body):
                out.append(span)
        run.clear()

    for w, t in postag.tag(body):
        if t in postag.NOUN_TAGS and _noun_ok(w) and len(run) < 3:
            run.append((w, t))
        elif POS_ADJ and t == "JJ" and not run and _noun_ok(w) and not w.endswith(("ed", "ing")):
            run.append((w, t))
        else:
            flush()
            if POS_ADJ and t == "JJ" and _noun_ok(w) and not w.endswith(("ed", "ing")):
                run.append((w, t))
    flush()
    return out


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
    "coconut cream frosting"); not a noun that a determiner makes the head of its own phrase
    ("at the shelter volunteering")."""
    k = i
    while k > 0 and i - k < 2 and body[toks[k - 1][2]:toks[k][1]] == " ":
        t = toks[k - 1][0]
        low = t.casefold()
        if not t.isalpha() or _is_cap(t) or low in _STOP or low in _NOT_NOUN or low in _GENERIC \
                or low in _DET or low in _BE or low.endswith(("ed", "ly", "ing")) or len(t) < 3:
            break
        if k > 1 and toks[k - 2][0].casefold() in _DET:
            break
        k -= 1
    return body[toks[k][1]:toks[i][2]]


def _content(tok: str) -> bool:
    """A lowercase word that can open a noun phrase (not a function word or adjective)."""
    low = tok.casefold()
    return tok.isalpha() and tok.islower() and low not in _STOP and low not in _NOT_NOUN \
        and low not in _DET


def _noun_phrase(toks, i: int, body: str, gerund_only: bool = False,
                 after_det: bool = False) -> str | None:
    """The noun phrase starting at token i ("a [rescue dog]", "went [camping]"): up to 3
    content words on one phrase (no punctuation between), leading evaluative adjectives and
    adverbs dropped, ending on a word that can be a noun. `after_det`: token i follows an
    article, where a preposition can only be the first word of a compound ("a [via
    ferrata]", "an [after party]")."""
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
        if after_det and j == i and low in _PREP_IN_COMPOUND and j + 1 < len(toks) \
                and body[toks[j][2]:toks[j + 1][1]] == " " and _content(toks[j + 1][0]):
            words.append(j)
            j += 1
            continue
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
        if words and low.endswith("s") and not low.endswith("ss") and j + 1 < len(toks) \
                and not toks[words[-1]][0].casefold().endswith("s") \
                and body[toks[j][2]:toks[j + 1][1]] == " " and _content(toks[j + 1][0]):
            break  # a verb between two nouns: "the eagle [symbolizes] freedom"
        words.append(j)
        j += 1
    # The last word must be able to be a noun: not a participle or adjective.
    while words and (toks[words[-1]][0].casefold().endswith(("ed", "ing", "ful", "ous", "ive",
                                                            "able", "ible"))
                     and len(words) > 1):
        words.pop()
    while len(words) > 1 and toks[words[-1]][0].casefold() in _GENERIC | _PLACE_ADVERB:
        words.pop()  # "dance fam" -> "dance", "the LGBTQ center downtown" -> "LGBTQ center"
    if not words or all(toks[w][0].casefold() in _GENERIC for w in words):
        return None
    last = toks[words[-1]][0].casefold()
    if last.endswith(("ed", "ous", "ful", "ly")) or last in _VERB_ING:
        return None
    return body[toks[words[0]][1]:toks[words[-1]][2]]

