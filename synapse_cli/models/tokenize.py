"""The one tokenizer behind BM25: our persisted index and the rank-bm25 reference both use it.

Three versions, because a store's postings are tokens (docs/FORMAT.md section 11): a BM25 index
keeps the version it was created with, and new indexes use the newest.

- Version 1: Unicode NFC, ``str.lower()``, then every ``\\w+`` match.
- Version 2 (text beyond ASCII English): compatibility decomposition (NFKD), accents dropped
  from Latin and Greek letters ("Zürich" and "Zurich" are one word), case folded
  (``str.casefold``: "Straße" is "strasse"); then, in order, every run of Han, kana or Hangul
  characters as its overlapping character bigrams (these scripts do not put spaces between
  words, so a bigram is the unit that a two-character word such as 柯基 shares with any
  sentence containing it; a one-character run is itself), every other ``\\w+`` run, and every
  emoji or pictographic symbol as a token of its own (one 🔥 is one token; skin-tone and
  joiner characters are dropped).
- Version 3: version 2 with a negation joined to its word, whichever apostrophe is typed:
  "won't" is the token "wont", not "won" and "t", so that "Who won the Six Nations?" does not
  match every "I won't" and the store's vocabulary does not claim to know "won", "don" or
  "isn".

No stemming and no stopword list: BM25's idf already discounts very common words (and
rank-bm25's epsilon floor keeps them from going negative), and a stopword list would have to be
measured on LoCoMo before it could be trusted to help. Tokens are non-empty and never contain a
newline, which the vocabulary file relies on.
"""
from __future__ import annotations

import re
import unicodedata

VERSION = 3  # what a new BM25 index uses

_WORD_V1 = re.compile(r"\w+")

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002fa1f"
_PICTO = "\u2300-\u23ff\u2600-\u27bf\u2b00-\u2bff\U0001f000-\U0001f3fa\U0001f400-\U0001faff"
_TOKEN_V2 = re.compile(f"(?P<cjk>[{_CJK}]+)|(?P<word>[^\\W{_CJK}]+)|(?P<picto>[{_PICTO}])")
# a combining accent (U+0300-036F) after a Latin or Greek letter; Cyrillic keeps its breve (й is
# a letter of its own, not и) and kana their voicing marks (が is not か)
_ACCENT = re.compile("(?<=[\u0041-\u03ff\u1e00-\u1fff])[\u0300-\u036f]+")


_ONE_PICTO = re.compile(f"[{_PICTO}]")
# version 3: n't ends its word, whichever apostrophe is typed (', ’, ‘, `, ʼ)
_NOT = re.compile("(?<=\\wn)['\u2019\u2018`\u02bc]t\\b")


def is_pictograph(token: str) -> bool:
    """Whether a version 2 token is an emoji or pictographic symbol (not a word)."""
    return _ONE_PICTO.fullmatch(token) is not None


def fold(text: str) -> str:
    """Version 2's normal form: NFKD, Latin and Greek accents dropped, NFC, casefold."""
    if text.isascii():
        return text.casefold()
    return unicodedata.normalize("NFC", _ACCENT.sub("", unicodedata.normalize("NFKD", text))
                                 ).casefold()


def tokenize(text: str, version: int = VERSION) -> list[str]:
    """Split `text` into the tokens of tokenizer `version` (1, 2 or 3), in order, with
    repetition."""
    if version == 1:
        return _WORD_V1.findall(unicodedata.normalize("NFC", text).lower())
    text = fold(text)
    if version >= 3:
        text = _NOT.sub("t", text)
    out: list[str] = []
    for m in _TOKEN_V2.finditer(text):
        run = m.group("cjk")
        if run is None:
            out.append(m.group(0))
        elif len(run) == 1:
            out.append(run)
        else:
            out.extend(run[i:i + 2] for i in range(len(run) - 1))
    return out
