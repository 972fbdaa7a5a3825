"""`synapse recall`: the memories that matter for a query, as JSON (a list on a terminal)."""
from __future__ import annotations

import sys
from typing import List, Optional

import typer

from . import output, render
from ..engine.inputs import BOM
from .common import JSON_OPTION, QUIET_OPTION, check_tags, complete, parse_time_option
from .common import setting_choices, store_path
from .exits import USAGE, UserError


MEMORY_TYPES = ("episodic", "semantic", "working", "procedural")  # engine.recall.TYPE_BITS


def register(app: typer.Typer) -> None:
    app.command("recall")(recall)


def _queries(query: Optional[str]) -> list[tuple[str, str | UserError]]:
    """(where, text) per query: the argument, or NDJSON/plain lines on stdin, where a bad line
    gives (where, UserError) so that the good lines are still answered."""
    if query is not None and query != "-":
        if not query.strip():
            raise UserError("empty query", code=USAGE)
        return [("argument", query)]
    out = []
    for n, raw in enumerate(sys.stdin.buffer.read().splitlines(), 1):
        if n == 1 and raw.startswith(BOM):
            raw = raw[len(BOM):]
        if raw.strip():
            try:
                out.append((f"-:{n}", _query_line(raw, f"-:{n}")))
            except UserError as exc:
                out.append((f"-:{n}", exc))
    if not out:
        raise UserError("no query: pass one as an argument or as lines on stdin", code=USAGE)
    return out


def _query_line(raw: bytes, where: str) -> str:
    """The query of one stdin line: {"query": ...} or plain UTF-8 text, checked as a query
    argument is (no NUL), so that a bad line is answered with its error, not the batch."""
    import orjson

    from ..engine.inputs import InputError, duplicate_key
    from ..engine.recall.service import check_query

    if raw.lstrip().startswith(b"{"):
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise UserError(f"{where}: invalid JSON ({exc.msg})") from None
        text = obj.get("query") if isinstance(obj, dict) else None
        if not isinstance(text, str) or not text.strip():
            raise UserError(f"{where}: expected an object with a non-empty string `query`")
        if len(obj) > 1:  # `{"query": ..., "k": 3}` must not look as if k were used
            extra = ", ".join(sorted(k for k in obj if k != "query"))
            raise UserError(f"{where}: unknown field(s) {extra}: a query line holds only "
                            "`query`", hint="options apply to every query: --k, --mode ...")
        if (key := duplicate_key(raw)) is not None:
            raise UserError(f"{where}: `{key}` appears twice")
    else:
        try:
            text = raw.decode("utf-8").strip()
        except UnicodeDecodeError as exc:
            raise UserError(f"{where}: not valid UTF-8 (byte {exc.start})") from None
    try:
        return check_query(text)
    except InputError as exc:
        raise UserError(f"{where}: {exc.reason}") from None


def recall(
    query: Optional[str] = typer.Argument(None, help="The query; '-' or none reads NDJSON "
                                                     "({\"query\": ...}) or lines from stdin."),
    mode: Optional[str] = typer.Option(None, "--mode", "-m",
                                       metavar="MODE",
                                       autocompletion=complete(*setting_choices("recall.mode")),
                                       help="How to search. synapse (default): from the "
                                            "best matches, activation spreads along the links "
                                            "between memories; ecphory: through the people, "
                                            "places and facts consolidate found, returning "
                                            "the passages they came from; synaptic: through "
                                            "memories close in time and meaning; vector, bm25, "
                                            "hybrid: plain similarity and keyword baselines, "
                                            "without the gate (they never say 'no record'). "
                                            "Config: recall.mode."),
    k: Optional[int] = typer.Option(None, "--k", "-k",
                                    help="How many memories to return (default 30; config: "
                                         "recall.k)."),
    explain: bool = typer.Option(False, "--explain",
                                 help="Show how each result was reached: the memories "
                                      "activation passed through, and the semantic nodes "
                                      "(people, places, things) that tie it to the question "
                                      "(ecphory: the fact it came from; synaptic: the chain "
                                      "from the query)."),
    cues: Optional[str] = typer.Option(None, "--cues", metavar="rules|model",
                                       autocompletion=complete(*setting_choices("ecphory.cues")),
                                       help="ecphory: find the names, places and times in "
                                            "the query by rules (default, instant) or with the "
                                            "local model (slower). Config: ecphory.cues."),
    propagation: Optional[str] = typer.Option(None, "--propagation", metavar="centroid|original",
                                              autocompletion=complete(
                                                  *setting_choices("synaptic.propagation")),
                                              help="synaptic: one search per step from the "
                                                   "average of the memories reached (default, "
                                                   "fast) or one per memory reached (slower on "
                                                   "a large store). Config: "
                                                   "synaptic.propagation."),
    no_touch: bool = typer.Option(False, "--no-touch",
                                  help="Read only: do not count this recall (recalled "
                                       "memories fade more slowly)."),
    memory_type: List[str] = typer.Option([], "--type", metavar="TYPE",
                                          autocompletion=complete(*MEMORY_TYPES),
                                          help="Only this memory type (repeatable): episodic, "
                                               "semantic, working, procedural."),
    since: Optional[str] = typer.Option(None, "--since", metavar="TIME",
                                        help="Only memories at or after TIME (ISO 8601 / epoch ms)."),
    until: Optional[str] = typer.Option(None, "--until", metavar="TIME",
                                        help="Only memories at or before TIME (a bare date: "
                                             "the end of that day, UTC)."),
    as_of: Optional[str] = typer.Option(None, "--as-of", metavar="TIME",
                                        help="Answer as at TIME: later memories are invisible "
                                             "and decay is computed at TIME (not a rehearsal: "
                                             "nothing is touched; a bare date: the end of "
                                             "that day, UTC)."),
    tag: List[str] = typer.Option([], "--tag", metavar="TAG",
                                  help="Only memories carrying TAG (repeatable; speaker:NAME, "
                                       "session:ID work too)."),
    tau_gate: Optional[float] = typer.Option(None, "--tau-gate",
                                             help="Answer \"no record\" when the best match "
                                                  "is weaker than this (default 0.05; config: "
                                                  "gate.tau_gate)."),
    no_gate: bool = typer.Option(False, "--no-gate", help="Never answer \"no record\": return "
                                                          "the best matches anyway."),
    no_attribution: bool = typer.Option(
        False, "--no-attribution", help="Skip the gate's attribution check (a query naming one "
                                        "speaker is refused when another speaker's statement "
                                        "answers it better; config: gate.attribution)."),
    verify: bool = typer.Option(False, "--verify",
                                help="Second rejection stage: the local model reads the top "
                                     "memories and the query; reject when it does not find "
                                     "what the query asks explicitly mentioned (slower: a "
                                     "model call per query)."),
    verify_threshold: Optional[float] = typer.Option(
        None, "--verify-threshold", help="--verify rejects below this log P(yes) - log P(no) "
                                         "(config: verify.verify_threshold)."),
    verify_memories: Optional[int] = typer.Option(
        None, "--verify-memories", help="How many top memories --verify shows the model "
                                        "(default 5; config: verify.verify_memories)."),
    no_inhibition: bool = typer.Option(False, "--no-inhibition",
                                       help="For measuring: strong memories do not hold back "
                                            "weaker ones while activation spreads (no effect "
                                            "at the default activation.beta = 0)."),
    no_fan: bool = typer.Option(False, "--no-fan", help="For measuring: a memory with many "
                                                        "links passes each the same activation "
                                                        "instead of sharing it out."),
    no_decay: bool = typer.Option(False, "--no-decay", help="For measuring: ignore how much "
                                                            "memories have faded with age "
                                                            "(config: score.decay = false)."),
    no_graph: bool = typer.Option(False, "--no-graph", help="For measuring: the direct matches "
                                                            "only, no links between memories."),
    no_activation: bool = typer.Option(False, "--no-activation",
                                       help="For measuring: rank by similarity and keywords "
                                            "alone, without spreading activation."),
    json: bool = JSON_OPTION,
    quiet: bool = QUIET_OPTION,
) -> None:
    """Recall the memories that matter for a query: JSON on stdout, a list on a terminal.

    Activation spreads from the memories that best match the query along the links between
    memories, so a memory that shares no word with the question can still be found. A query
    with no supporting memory prints {"rejected": true, "results": []} and exits 0 (on a
    terminal: "no record").

    Example: synapse recall "where did Caroline go hiking?" --k 5 | jq '.results[].text'
    """
    from ..engine import config
    from ..engine.recall import TYPE_BITS, Recaller, RecallConfig, SynapticConfig

    for t in memory_type:
        if t not in TYPE_BITS:
            raise UserError(f"--type {t!r}: expected one of {', '.join(TYPE_BITS)}", code=USAGE)
    check_tags(tag)
    settings = config.resolve({"recall.mode": mode, "recall.k": k, "gate.tau_gate": tau_gate,
                               "ecphory.cues": cues, "synaptic.propagation": propagation,
                               "verify.verify_threshold": verify_threshold,
                               "verify.verify_memories": verify_memories,
                               "score.decay": False if no_decay else None,
                               "gate.attribution": False if no_attribution else None})
    cfg = RecallConfig(**settings.kwargs("recall"), explain=explain, gate=not no_gate,
                       inhibition=not no_inhibition, fan=not no_fan,
                       graph=not no_graph, activation=not no_activation,
                       types=tuple(memory_type),
                       since_ms=parse_time_option(since, "--since", start=True),
                       until_ms=parse_time_option(until, "--until", end_of_day=True),
                       tags=tuple(tag),
                       synaptic=SynapticConfig.from_settings(settings))
    as_of_ms = parse_time_option(as_of, "--as-of", end_of_day=True)
    if as_of_ms is not None:
        if until is not None:
            raise UserError("--as-of and --until both end the window: give one", code=USAGE)
        if cfg.since_ms is not None and cfg.since_ms > as_of_ms:
            raise UserError("--since is later than --as-of: the window ends before it starts",
                            code=USAGE)
        cfg.until_ms, no_touch = as_of_ms, True
    queries = _queries(query)
    check = _verifier(settings) if verify else None
    bad = [q for _, q in queries if isinstance(q, UserError)]
    if len(bad) == len(queries) == 1:
        raise bad[0]
    with Recaller(store_path()) as r:
        for where, text in queries:
            if isinstance(text, UserError):  # answer the others; an error object in its place
                output.warn(f"synapse: skipped {text}")
                if not output.Out.want_table():  # on a terminal the warning is the answer
                    output.emit({"where": where, "error": str(text).split(": ", 1)[-1]})
                continue
            result = r.recall(text, cfg, touch=not no_touch, check=check, now_ms=as_of_ms)
            if output.Out.want_table():
                render.print_recall(result, explain)
            else:
                output.emit(result)
        if r.touch_error:
            output.warn(f"synapse: answered, but recording the recall failed ({r.touch_error}); "
                        "--no-touch answers without writing")
    if bad:
        raise UserError(f"{len(bad)} of {len(queries)} query lines were not valid; the others "
                        "were answered")


def _verifier(settings):
    """recall --verify: a function that checks one result with the local model (loaded once,
    on the first query the gate lets through)."""
    from .. import api
    from ..engine.recall import AnswerChecker, VerifyConfig

    path = api.model_path(settings["extraction.model"])  # errors: exits.code_for / hint_for
    checker = AnswerChecker(path, threads=settings["extraction.threads"])
    vcfg = VerifyConfig(memories=settings["verify.verify_memories"],
                        threshold=settings["verify.verify_threshold"])
    return lambda result: checker.check(result, vcfg)
