"""`synapse ingest`: store what happened as episodic memories."""
from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
from typing import BinaryIO, List, Optional

import typer

from . import output, render
from .common import JSON_OPTION, QUIET_OPTION, complete, lock_timeout, store_path
from .exits import DATAERR, INTERRUPTED, NOINPUT, USAGE, UserError

FORMATS = ("json", "text", "doc")


def register(app: typer.Typer) -> None:
    app.command("ingest")(ingest)


def _open_inputs(files: list[str]) -> list[tuple[str, BinaryIO]]:
    """Each input as a seekable binary file: ingest reads its input twice (check everything,
    then store), so stdin or a pipe is first copied to a temporary file."""
    opened = []
    for name in files or ["-"]:
        try:  # any readable file: also a FIFO or a process substitution (/dev/fd/N)
            fh = sys.stdin.buffer if name == "-" else open(name, "rb")
        except OSError as exc:  # sysexits: an input file missing or unreadable is 66
            reason = "no such file" if isinstance(exc, FileNotFoundError) else \
                (exc.strerror or str(exc)).lower()
            raise UserError(f"{name}: {reason}", code=NOINPUT) from None
        if not fh.seekable():
            spool = tempfile.TemporaryFile()
            shutil.copyfileobj(fh, spool)
            spool.seek(0)
            fh = spool
        opened.append((name, fh))
    return opened


def _parse(inputs_: list[tuple[str, BinaryIO]], fmt: str):
    """Every Item and InputError of the inputs, in input order, streamed from the start."""
    from ..engine import inputs

    for name, fh in inputs_:
        fh.seek(0)
        if fmt == "doc":
            yield from inputs.parse_document_stream(fh, name)
        else:
            parse = inputs.parse_ndjson if fmt == "json" else inputs.parse_text
            yield from parse(inputs.iter_lines(fh), name)


def _check_all(inputs_, fmt: str, skip_invalid: bool) -> int:
    """The number of valid items; the first invalid one ends the command (nothing stored)
    unless --skip-invalid, which reports each."""
    from ..engine.inputs import InputError

    n = 0
    for x in _parse(inputs_, fmt):
        if not isinstance(x, InputError):
            n += 1
        elif skip_invalid:
            output.warn(f"synapse: skipped {x}")
        else:
            raise UserError(str(x), code=DATAERR,
                            hint="nothing was stored; fix the input there or pass --skip-invalid")
    return n


def _changed(what: str, tally) -> UserError:
    return UserError(f"{what}: the input changed while being ingested", code=DATAERR,
                     hint=f"the {tally.counts['stored']} items printed before are stored; run "
                          "the command again on input that does not change")


def _embedder(model_dir: str | None):
    from .. import api

    try:
        return api.embedder_for(model_dir)
    except FileNotFoundError as exc:  # --embedder DIR without a model in it
        raise UserError(f"--embedder: {exc}", code=NOINPUT) from None


def _batches(parsed, size: int):
    """Runs of parsed input holding `size` items each (InputErrors ride along in place)."""
    from ..engine.inputs import InputError

    group, n = [], 0
    for x in parsed:
        group.append(x)
        n += not isinstance(x, InputError)
        if n == size:
            yield group
            group, n = [], 0
    if group:
        yield group


def ingest(
    files: Optional[List[str]] = typer.Argument(None, metavar="[FILE]...",
                                                help="Input files; none or '-' reads stdin."),
    fmt: str = typer.Option("json", "--format", "-f", metavar="json|text|doc",
                            autocompletion=complete(*FORMATS),
                            help="json: NDJSON objects; text: one memory per line; "
                                 "doc: 1,200-character chunks with 200 overlap."),
    goal: Optional[str] = typer.Option(None, "--goal", metavar="TEXT",
                                       help="Drop input whose similarity to this goal is below "
                                            "--goal-threshold (reported as gated). Config: "
                                            "gating.goal."),
    goal_threshold: Optional[float] = typer.Option(None, "--goal-threshold",
                                                   help="Cosine similarity a memory needs to "
                                                        "pass --goal (default 0.1)."),
    importance: Optional[float] = typer.Option(None, "--importance",
                                               help="Importance (0.05-10) for items that do not "
                                                    "give one (default 1.0)."),
    skip_invalid: bool = typer.Option(False, "--skip-invalid",
                                      help="Store the valid items and report each bad one, "
                                           "instead of rejecting the whole input."),
    batch: Optional[int] = typer.Option(None, "--batch", metavar="N",
                                        help="Items embedded and committed together (default "
                                             "256). Config: ingest.batch."),
    embedder: Optional[str] = typer.Option(None, "--embedder", metavar="DIR",
                                           help="Sentence-transformers model directory for a "
                                                "new store (a store refuses any model but its "
                                                "own). Config: embedding.embed_model_dir."),
    json: bool = JSON_OPTION,
    quiet: bool = QUIET_OPTION,
) -> None:
    """Store input as episodic memories: embeddings, BM25 postings, temporal edges.

    NDJSON fields: text (required), timestamp (ISO 8601 or epoch ms), speaker, session,
    source, importance (0.05-10), valence (-1..1), arousal (0..1), tags (list), pinned,
    resolved, type (episodic|working|procedural), dia_id, meta (object). The whole input is
    checked first: a malformed line exits 65 naming it and stores nothing. It is then stored in
    batches of --batch items, each one transaction; a batch's JSON lines (one per input item)
    are printed once it is committed, so an interrupted ingest keeps every batch it printed and
    a rerun skips those items as duplicate. On a terminal: a progress bar and a summary.

    Example: echo '{"text": "Met Ana at the climbing gym", "speaker": "me"}' | synapse ingest
    """
    import time

    from .. import api
    from ..engine.inputs import InputError

    if fmt not in FORMATS:
        raise UserError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}", code=USAGE)
    settings = api.settings(goal=goal, goal_threshold=goal_threshold,
                            default_importance=importance, batch=batch,
                            embed_model_dir=embedder)  # a bad config fails before input
    sources = _open_inputs(files or [])
    total = _check_all(sources, fmt, skip_invalid)
    table = output.Out.want_table()
    tally, t0, stored_batches = render.IngestTally(), time.perf_counter(), 0
    stdout_failed = None  # later writes go to /dev/null (output._write)
    with render.IngestProgress() as progress:
        ingester = api.Ingester(store_path(), lock_timeout=lock_timeout(), resolved=settings,
                                embedder=progress.wrap(_embedder(embedder))) \
            if total else contextlib.nullcontext()
        with ingester as ing:
            progress.start(total)
            try:
                for group in _batches(_parse(sources, fmt), settings["ingest.batch"]):
                    items = [x for x in group if not isinstance(x, InputError)]
                    bad = [x for x in group if isinstance(x, InputError)]
                    # the input is read twice: a file that changed since the check fails here
                    if bad and not skip_invalid:
                        raise _changed(f"{bad[0]}, unlike when the whole input was checked",
                                       tally)
                    if items and ing is None:
                        raise _changed(f"{items[0].where}: input that held nothing valid when "
                                       "the whole input was checked now holds some", tally)
                    outcomes = iter(ing.add(items).outcomes if items else [])
                    stored_batches += bool(items)
                    # printed only after the commit: a printed line is a stored item
                    rows = [{"id": None, "status": "invalid", "where": x.where,
                             "error": x.reason} if isinstance(x, InputError)
                            else next(outcomes).as_dict() for x in group]
                    tally.add(rows)
                    progress.done(sum(tally.counts.values()) - tally.counts["invalid"])
                    if not table:
                        try:
                            output.emit_all(rows)
                        except output.StdoutClosed:  # `| head`: keep storing, as the user asked
                            pass
                        except output.StdoutFailed as exc:  # raised once everything is stored
                            stdout_failed = stdout_failed or exc
            except KeyboardInterrupt:
                if not stored_batches:
                    raise
                raise UserError(f"interrupted: the {tally.counts['stored']} items of the "
                                f"{stored_batches} committed batches are stored",
                                code=INTERRUPTED, hint="run the same command again: what is "
                                "stored is skipped as duplicate") from None
    seconds = time.perf_counter() - t0
    if stdout_failed is not None:
        raise stdout_failed
    if table:
        output.stdout_console().print(tally.summary(seconds, store_path()))
    elif not total:
        output.info("nothing to ingest")
    else:
        c = tally.counts
        output.info(f"stored {c['stored']}, duplicate {c['duplicate']}, gated {c['gated']}, "
                    f"invalid {c['invalid']} in {seconds:.2f}s")
