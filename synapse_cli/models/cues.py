"""Retrieval cues of a query for `recall --mode ecphory` (seed 002 section 3.2 step 1, prompt B.2).

A cue is a concise statement of what to look for: the named entities and the temporal or
locational constraints of the query, "Cue 1, Cue 2, Cue 3" (the seed's output format), which
ecphory embeds in place of the raw query.  Two extractors:
- `rule_cues`: deterministic, the extractor's candidate-span rules (`candidate_spans`: quoted
  titles, proper names, absolute times, noun phrases, each verbatim from the query), with a
  name list "A and B" / "A or B" split into its names; no model, ~0.1 ms;
- `ModelCues`: the seed's cue prompt to the local llama.cpp model (the consolidation model,
  loaded by `LlamaExtractor.load`), its answer held by a GBNF grammar to a comma-separated list
  of spans of the query (up to 4 words, not starting or ending with a stop word), so a 135M model
  cannot invent or answer; it falls back to the rules when it returns nothing.
`extract_cues` picks one (`recall.cues` setting); an empty list means "use the query itself".
"""
from __future__ import annotations

import json
import re
import threading

from .extractor import LlamaExtractor, _quiet_stderr, candidate_spans
from .words import _STOP

MAX_CUES = 8
MAX_SPAN_WORDS = 4
_WORD = re.compile(r"[^\W_][\w'’&.-]*[^\W_]|[^\W_]", re.UNICODE)
_LIST_SPLIT = re.compile(r"\s+(?:and|or|&)\s+")
# Question words and fillers a cue never starts or ends with (on top of the extractor's stop
# words): they are what the query asks, not what memory holds.
_QUESTION = frozenset("""which who whom whose what when where why how both either neither
first last same larger smaller older oldest younger youngest most least name named known""".split())


def _split_lists(span: str) -> list[str]:
    """"Christopher Nolan and Sathish Kalathil" -> both names: the candidate rules join
    capitalised runs over "and" (a band name like "Simon and Garfunkel"), but in a question a
    list of names is usually a comparison of two things that are stored apart."""
    parts = _LIST_SPLIT.split(span)
    if len(parts) > 1 and all(p[:1].isupper() for p in parts):
        return parts
    return [span]


def rule_cues(query: str, limit: int = MAX_CUES) -> list[str]:
    """Cues by the extractor's candidate-span rules, verbatim from the query, most name-like
    first, without duplicates (case-insensitive)."""
    out: list[str] = []
    seen: set[str] = set()
    # Without the part-of-speech tagger (candidates.py): a one-line question gives it no
    # context ("the Seine flows through Paris": "flows" tagged a plural noun), and the ecphory
    # mode's cues were measured with the rules alone.
    for span in candidate_spans(" ".join(query.split()), limit=limit, pos=False):
        for part in _split_lists(span):
            part = part.strip(" ,.;:?!")
            if len(part) >= 2 and part.casefold() not in seen:
                seen.add(part.casefold())
                out.append(part)
    return out[:limit]


def _is_filler(word: str) -> bool:
    low = word.casefold()
    return low in _STOP or low in _QUESTION


def query_spans(query: str, max_words: int = MAX_SPAN_WORDS) -> list[str]:
    """Every run of up to `max_words` consecutive words of the query that neither starts nor
    ends with a stop or question word: what the model's grammar lets it answer."""
    words = _WORD.findall(query)
    spans: list[str] = []
    seen: set[str] = set()
    for i, w in enumerate(words):
        if _is_filler(w):
            continue
        for j in range(i, min(i + max_words, len(words))):
            if _is_filler(words[j]):
                continue
            span = " ".join(words[i:j + 1])
            if span not in seen:
                seen.add(span)
                spans.append(span)
    return spans


def cue_grammar(spans: list[str], max_cues: int = MAX_CUES) -> str:
    """GBNF: one to `max_cues` spans of the query separated by ", " (seed B.2's format)."""
    alts = " | ".join(json.dumps(s) for s in spans)
    more = " ".join(['(", " cue'] * (max_cues - 1)) + " " + ")?" * (max_cues - 1)
    return f"root ::= cue {more}\ncue ::= {alts}\n"


# Seed 002, Appendix B.2, in SmolLM2's ChatML; the fixed part first so that llama.cpp reuses its
# KV cache from one query to the next.
_SYSTEM = ("You are the memory retrieval mechanism of an intelligent agent. Analyze the user's "
           "query and extract \"Retrieval Cues\". These are the key entities or concepts that "
           "will be used to start a search in the long-term memory.\n"
           "Instructions: - Extract specific named entities. - Extract temporal or locational "
           "constraints. - Do not answer the question, just list the cues.\n"
           "Output Format: Cue 1, Cue 2, Cue 3...")


def build_prompt(query: str) -> str:
    return (f"<|im_start|>system\n{_SYSTEM}<|im_end|>\n<|im_start|>user\nUser Query: "
            f"{' '.join(query.split())}<|im_end|>\n<|im_start|>assistant\nOutput:")


class ModelCues:
    """Cue extraction with the local model; loaded on first use, then kept (one per process and
    model file: a Recaller answering many queries pays the load once)."""

    def __init__(self, model_path=None, threads: int = 2):
        # The extractor owns the model path default and the llama.cpp loading workarounds.
        self._llm_owner = LlamaExtractor(model_path, threads=threads)
        self.model_path = self._llm_owner.model_path
        self.last_usage: dict = {}

    def cues(self, query: str, max_tokens: int = 48) -> list[str]:
        spans = query_spans(query)
        if not spans:
            return []
        self._llm_owner.load()
        llm = self._llm_owner.llm
        import llama_cpp

        with _quiet_stderr():
            grammar = llama_cpp.LlamaGrammar.from_string(cue_grammar(spans), verbose=False)
            out = llm.create_completion(build_prompt(query), grammar=grammar, temperature=0.0,
                                        max_tokens=max_tokens, repeat_penalty=1.0, seed=0)
        self.last_usage = dict(out.get("usage") or {})
        text = out["choices"][0]["text"]
        found: list[str] = []
        for part in text.split(","):
            part = part.strip()
            if part and part in spans and part.casefold() not in {f.casefold() for f in found}:
                found.append(part)
        return found


_MODELS: dict = {}
_LOCK = threading.Lock()


def model_cues(model_path=None, threads: int = 2) -> ModelCues:
    """The process-wide ModelCues for this model file (loaded once)."""
    key = (str(model_path or ""), threads)
    with _LOCK:
        if key not in _MODELS:
            _MODELS[key] = ModelCues(model_path, threads)
        return _MODELS[key]


def extract_cues(query: str, method: str = "rules", model_path=None,
                 threads: int = 2) -> tuple[list[str], str, str | None]:
    """(cues, the extractor that produced them: "rules" or "model", a note when the model was
    asked for and the rules answered instead). The model falls back to the rules when it cannot
    be loaded (no GGUF file, no llama.cpp) or when its answer is empty."""
    if method not in ("rules", "model"):
        raise ValueError(f"unknown cue extractor {method!r}")
    note = None
    if method == "model":
        try:
            found = model_cues(model_path, threads).cues(query)
        except (FileNotFoundError, ImportError, OSError, ValueError) as exc:
            found, note = [], f"cue model unavailable ({exc}): rules used"
        if found:
            return found, "model", None
        note = note or "the cue model found no cue: rules used"
    return rule_cues(query), "rules", note


def cue_text(cues: list[str], query: str) -> str:
    """What ecphory embeds: the cues joined as the seed's prompt lists them, else the query."""
    return ", ".join(cues) if cues else query
