"""Part-of-speech tags, offline: textblob's PatternTagger (the Brill-style tagger of the
`pattern` library), whose 94k-word lexicon ships inside the `textblob` wheel; nothing is
downloaded (its noun-phrase extractors would need NLTK corpora, and are not used).

Used by the candidate rules (candidates.py) for what capitalisation and determiners cannot
tell: a bare noun or noun-noun compound ("pottery", "video games", "almond milk"), and whether a
capitalised word that starts a sentence is a name ("Maya finished ...") or a common word
("Adding ...", "Lately ..."). Loading the lexicon costs ~0.1-0.3 s, paid once by `consolidate`;
`recall` loads it only for a memory that writes a speaker's name in another case, to tell
whether that name is also a common word (engine/recall/attribution.py).
"""
from __future__ import annotations

import functools
import importlib.util
import sys
import types

NOUN_TAGS = ("NN", "NNS")
NAME_TAGS = ("NNP", "NNPS", "FW")  # FW: the lexicon's tag for many first names ("Maya")


@functools.lru_cache(maxsize=1)
def _textblob():
    """textblob.en's `tag` and `lexicon` (what PatternTagger calls). textblob/__init__ imports
    nltk (~1.5 s); textblob.en needs only textblob._text, so the package is entered through a
    bare stand-in module (0.1 s), removed again so that a real `import textblob` still works."""
    if "textblob" in sys.modules:
        from textblob.en import lexicon, tag
        return tag, lexicon
    spec = importlib.util.find_spec("textblob")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("textblob is not installed (a dependency of synapse)")
    stub = types.ModuleType("textblob")
    stub.__path__ = list(spec.submodule_search_locations)
    sys.modules["textblob"] = stub
    try:
        from textblob.en import lexicon, tag
    finally:
        if sys.modules.get("textblob") is stub:
            del sys.modules["textblob"]
        for k in [k for k in sys.modules if k.startswith("textblob.")]:
            del sys.modules[k]  # the functions keep their modules alive
    return tag, lexicon


@functools.lru_cache(maxsize=4096)
def tag(text: str) -> tuple[tuple[str, str], ...]:
    """(token, Penn tag) pairs of `text`, in order."""
    fn, _ = _textblob()
    return tuple((str(w), str(t)) for w, t in fn(text))


def lexicon_tag(word: str) -> str | None:
    """The lexicon's most frequent tag of `word` as written in lower case (None: unknown)."""
    _, lex = _textblob()
    return lex.get(word.casefold())


def common_word(word: str) -> bool:
    """True when `word`, lower-cased, is a known common word (verb, adverb, adjective,
    determiner, noun ...): a capitalised sentence-initial token that is one is not a name.
    Unknown words and words the lexicon knows as names ("maya", "nike") are not common."""
    t = lexicon_tag(word)
    return t is not None and t not in NAME_TAGS
