"""Entity types the window settles by rule (a speaker is a person, a month a time, "dance class"
an event); the model only chooses among MODEL_TYPES for the rest (extractor.py)."""
from __future__ import annotations

import re

from .candidates import _activity, _split_turns, _with_modifiers, speakers, window_text
from .words import _CLOCK, _CONCEPT_SUFFIX, _HEAD_TYPE, _MONTHS, _PLACE_CUE, _TOKEN, _YEAR

ENTITY_TYPES = ("person", "place", "organization", "event", "preference", "concept", "time",
                "object")


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





def rule_type(name: str, text: str) -> str | None:
    """A type settled by the span's form and context, or None (the model chooses): a quoted
    title is an object; a capitalised name after "in/at/from/visit" or "the" is a place, another
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
        # "at the LGBTQ center": the cue's place is the center; the name only modifies it
        kind = re.search(rf"\b{re.escape(name)}\s+(\w+)", text)
        modifier = kind is not None and kind.group(1) in _HEAD_TYPE
        if m and m.group(1).casefold() in _PLACE_CUE and not modifier:
            return "place"
        if _HEAD_TYPE.get(head) or name.isupper():
            return _HEAD_TYPE.get(head)
        if re.search(rf"\b[Tt]he\s+{re.escape(name)}\b", text):
            return "place"  # "the Dolomites", "the Alps": a person's name takes no article
        return "person"
    if head in _HEAD_TYPE:
        return _HEAD_TYPE[head]
    if head.endswith(_CONCEPT_SUFFIX) and len(head) > 6:
        return "concept"
    return None


