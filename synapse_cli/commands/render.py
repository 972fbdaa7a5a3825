"""What a person at a terminal sees from `ingest` and `recall` (the JSON is for pipes and
--json, and is built elsewhere): a progress bar while ingesting, a summary, a readable list."""
from __future__ import annotations

from ..engine.inputs import utc_datetime
from . import output

EMBED_SLICE = 64  # texts per progress step: small enough to move, large enough to batch well


class IngestProgress:
    """A rich progress bar on stderr while `ingest` embeds; a no-op with -q or off a terminal.

    `wrap(embedder)` returns an embedder that encodes in slices and advances the bar, so the
    engine needs no progress hook of its own; `done(n)` sets the count after each batch (items
    found already stored are never embedded)."""

    def __init__(self):
        self.bar, self.task = None, None

    def __enter__(self):
        if output.Out.quiet or not output.Out.stderr_is_tty():
            return self
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                   TimeElapsedColumn, TimeRemainingColumn)

        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), TimeRemainingColumn(),
                            console=output.stderr_console(), transient=True)
        self.bar.start()
        self.task = self.bar.add_task("loading the embedding model", total=None)
        return self

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.stop()

    def wrap(self, embedder):
        return embedder if self.bar is None else _SlicedEmbedder(embedder, self)

    def start(self, total: int) -> None:
        if self.bar is not None:
            self.bar.update(self.task, description="ingesting", total=total, completed=0)

    def advance(self, n: int) -> None:
        self.bar.advance(self.task, n)

    def done(self, n: int) -> None:
        if self.bar is not None:
            self.bar.update(self.task, completed=n)


class _SlicedEmbedder:
    """The embedder, encoding in EMBED_SLICE-text slices so the bar can move."""

    def __init__(self, inner, progress: IngestProgress):
        self._inner, self._progress = inner, progress

    def __getattr__(self, name):  # name, dim and anything else the engine reads
        return getattr(self._inner, name)

    def encode(self, texts: list[str]):
        import numpy as np  # not at import: `synapse --help` must start fast

        texts = list(texts)
        if len(texts) <= 1:  # the --goal, or a batch of one: `done` counts it
            return self._inner.encode(texts)
        parts = []
        for i in range(0, len(texts), EMBED_SLICE):
            parts.append(self._inner.encode(texts[i:i + EMBED_SLICE]))
            self._progress.advance(len(parts[-1]))
        return np.concatenate(parts)


class IngestTally:
    """Counts of `ingest`'s outcome rows, batch after batch, for the terminal's summary (the
    rows themselves are not kept: a big document has tens of thousands)."""

    def __init__(self):
        self.counts = {s: 0 for s in ("stored", "duplicate", "gated", "invalid")}
        self.first = self.last = None  # stored ids (they increase)

    def add(self, rows: list[dict]) -> None:
        for r in rows:
            self.counts[r["status"]] += 1
            if r["status"] == "stored":
                self.first = self.first or r["id"]
                self.last = r["id"]

    def summary(self, seconds: float, store) -> str:
        """One paragraph: how many items were stored (with their ids), duplicate, gated,
        invalid."""
        c = self.counts
        span = "" if self.first is None else f" (id {self.first})" if self.first == self.last \
            else f" (ids {self.first}-{self.last})"
        n = sum(c.values())
        parts = [f"{c['stored']} stored{span}", f"{c['duplicate']} already stored",
                 f"{c['gated']} off-goal", f"{c['invalid']} invalid"]
        return (f"{n} item{'s' if n != 1 else ''}: {', '.join(parts)} in {seconds:.1f} s\n"
                f"store: {store}")


def _when(ms) -> str:
    if not isinstance(ms, (int, float)):
        return ""
    t = utc_datetime(int(ms))
    return t.strftime("%Y-%m-%d %H:%M") if t is not None else f"{ms} ms"


def _why_rejected(result: dict) -> str:
    topic = result.get("topic") or {}
    if topic.get("unknown"):
        return "the store never mentions " + ", ".join(topic["unknown"])
    if topic.get("no_value"):
        return f"no memory on its topic states a {topic['no_value']}"
    attribution = result.get("attribution") or {}
    if attribution and not attribution.get("passed", True):
        return f"what matches is about someone other than {attribution.get('name')}"
    if result.get("verify") is not None:
        return "the local model found no memory that answers it"
    return "nothing stored is related"


def print_recall(result: dict, explain: bool) -> None:
    """A numbered list (rank, record id for mark / prune --id, when, who, memory; the path
    with --explain), or why there is no answer."""
    from rich.table import Table

    console = output.stdout_console()
    head = f"[bold]{output.shown(result['query'])}[/]"
    if result.get("rejected"):
        console.print(f"{head}\n  no record: {_why_rejected(result)} "
                      f"(confidence {result.get('confidence', 0):.2f})")
        return
    table = Table(title=head, title_justify="left", box=None, pad_edge=False,
                  caption=f"mode {result.get('mode')}, confidence "
                          f"{result.get('confidence', 0):.2f}", caption_justify="left")
    table.add_column("#", justify="right", style="bold")
    table.add_column("id", justify="right", style="dim")
    table.add_column("when (UTC)", no_wrap=True)
    table.add_column("who", no_wrap=True)
    table.add_column("memory", ratio=1)
    if explain:
        table.add_column("path")
    for rank, r in enumerate(result["results"], 1):
        who = r.get("speaker") or ""
        text = output.shown(r.get("text") or "")
        if r.get("type") not in (None, "episodic"):
            text = f"[dim]({r['type']})[/] {text}"
        row = [str(rank), str(r.get("id", "")), _when(r.get("timestamp")), output.shown(who),
               text]
        if explain:
            lines = [" > ".join(str(x) for x in r.get("path") or [])]
            lines += ["via " + " > ".join(str(x) for x in v) for v in r.get("via") or []]
            row.append("\n".join(lines))
        table.add_row(*row)
    console.print(table)
