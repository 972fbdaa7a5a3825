"""Query-side conflation of English word forms for BM25: "books" also finds "book", "read" also
finds "reading", "hiking" also finds "hikes".

The index keeps the exact tokens of the one tokenizer (tokenize.py; rank-bm25 equality depends
on it), so nothing stored changes: at query time each query word brings along the words of the
vocabulary that share its stem, each scored as a query word of its own. The stemmer is Porter's
step 1 (plurals, then -ed / -ing with its clean-up), which is the part that groups the forms a
question and a memory use for the same thing; the later Porter steps (-ational, -ness ...) join
words of different meaning more often than they help here.
"""
from __future__ import annotations

from typing import Container

_VOWELS = set("aeiou")


def _has_vowel(s: str) -> bool:
    return any(c in _VOWELS for c in s)


def _measure(s: str) -> int:
    """Porter's m: the number of vowel-consonant sequences ("hik" 1, "visit" 2)."""
    kinds = "".join("v" if c in _VOWELS else "c" for c in s)
    return kinds.replace("vc", "|").count("|") if kinds else 0


def _cvc(s: str) -> bool:
    """Ends consonant-vowel-consonant, the last not w, x or y (hik, lik, but not cook, paint)."""
    return (len(s) >= 3 and s[-1] not in _VOWELS and s[-1] not in "wxy"
            and s[-2] in _VOWELS and s[-3] not in _VOWELS)


def stem(word: str) -> str:
    """books -> book, classes -> class, studies / studied -> study, reading -> read,
    running -> run, hiking / hikes / hiked -> hike, paintings -> paint."""
    w = word
    if len(w) <= 3 or not w.isalpha():
        return w
    # step 1a: plurals and third person
    if w.endswith("sses"):
        w = w[:-2]
    elif w.endswith(("ies", "ied")) and len(w) > 4:
        w = w[:-3] + "y"
    elif w.endswith("es") and w[:-2].endswith(("s", "x", "z", "ch", "sh")):
        w = w[:-2]
    elif w.endswith("s") and not w.endswith(("ss", "us", "is")):
        w = w[:-1]
    # step 1b: -ing, -ed, when what is left still has a vowel
    for suffix in ("ing", "ed"):
        base = w[: -len(suffix)]
        if w.endswith(suffix) and len(base) >= 2 and _has_vowel(base):
            if base[-1] == base[-2] and base[-1] not in "lsz":
                w = base[:-1]  # running -> run
            elif _measure(base) == 1 and _cvc(base):
                w = base + "e"  # hiking -> hike
            else:
                w = base
            break
    return w


def variants(word: str, vocabulary: Container[str]) -> list[str]:
    """The other forms of `word` in `vocabulary` (same stem), found by generating the forms of
    its stem rather than by scanning the vocabulary."""
    s = stem(word)
    if len(s) < 3 or not s.isalpha():
        return []
    forms = [s, s + "s", s + "es", s + "ing", s + "ings", s + "ed", s + "d"]
    if s.endswith("e"):
        forms += [s[:-1] + "ing"]  # hike -> hiking
    if s.endswith("y"):
        forms += [s[:-1] + "ies", s[:-1] + "ied"]  # study -> studies, studied
    if s[-1] not in _VOWELS:
        forms += [s + s[-1] + "ing", s + s[-1] + "ed"]  # run -> running
    out = []
    for form in forms:
        if form != word and form not in out and form in vocabulary and stem(form) == s:
            out.append(form)
    return out


# Letters two words share to count as one word family for the gate's topic check (not for
# ranking): "available" / "availability", "organise" / "organiser", which Porter's step 1 keeps
# apart. Seven, so that short words and mere shared beginnings ("student" / "studio") stay apart.
FAMILY = 7


def family(word: str) -> str | None:
    """The first FAMILY letters of an alphabetic word at least that long ("availab"), else
    None: the key two words of one family share."""
    return word[:FAMILY] if len(word) >= FAMILY and word.isalpha() else None
