"""Coverage-guided fuzzing (atheris / libFuzzer) of every reader in store_format/ and of the
recall path over a damaged store.

The property: whatever the bytes, a reader either succeeds or raises a typed StoreError. Any
other exception, a crash of the interpreter (a numba kernel reading out of bounds), a hang
(-timeout) or unbounded memory is a finding. The memory limit (-rss_limit_mb) is the child's
own resident size after setup and one pass over the seeds plus a margin, not an absolute
figure: that baseline depends on the machine (peak 1.5 GB within the first second on one CI
machine, 0.25 GB on the development VM; per-thread BLAS and numba buffers are the likely cause). Instrumented, the store target grows
by about 5 KB per input (uninstrumented 0.1 KB; atheris's, not the readers'), so the margin
covers runs of about 10 minutes. Seeds are the files of a small
real store (ingested, consolidated with the fake extractor, compacted, with BM25 postings,
ingest index and a CSR snapshot), so the fuzzer starts from valid files.

    python bench/reliability/fuzz.py --seconds 600                   # every target, 600 s each
    python bench/reliability/fuzz.py --target store --seconds 3600
    python bench/reliability/fuzz.py --replay tests/fuzz_regressions # replay saved inputs in-process

Findings are copied to tests/fuzz_regressions/<target>-<sha1>.bin (tests/test_fuzz.py replays
them). Prints one JSON object.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
REGRESSIONS = TESTS / "fuzz_regressions"
DIM = 384

sys.path[:0] = [str(ROOT), str(TESTS)]
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _instrumented_imports():
    """Import the code under test, instrumented for coverage when atheris is running."""
    global mf, sg, gf, ix, bm25, payload, errors, Store, graphview, recall_mod, FakeEmbedder
    from store_format import errors, graph_files as gf, ingest_index as ix, manifest as mf
    from store_format import payload
    from store_format import segments as sg
    from synapse_cli.engine import graphview
    from synapse_cli.engine import recall as recall_mod
    from synapse_cli.engine.store import Store
    from synapse_cli.models import bm25
    from synapse_cli.models.fake import FakeEmbedder


# --- the seed store ----------------------------------------------------------------------------

TEXTS = [
    {"text": "Caroline went hiking in the Dolomites with Melanie", "speaker": "Caroline",
     "session": "s1"},
    {"text": "Melanie painted a sunset over Oslo harbour", "speaker": "Melanie", "session": "s1"},
    {"text": "Maya adopted a dog called Pixel", "speaker": "Caroline", "session": "s2"},
    {"text": "Blue Bottle coffee in Berlin was too bitter", "speaker": "Melanie",
     "session": "s2"},
    {"text": "Caroline joined a pottery class on Tuesday", "speaker": "Caroline",
     "session": "s1"},
    {"text": "résumé naïve 日本語 🧠 unicode text", "speaker": "Maya", "session": "s3"},
    {"text": "Ana met Caroline at the climbing gym", "speaker": "Ana", "session": "s3"},
]


INPUT_LINES = (b'{"text": "Met Ana at the gym", "speaker": "me", "session": 3, "tags": ["user:1"], '
               b'"timestamp": "2026-06-02T18:05:00Z", "meta": {"k": [1, {"x": null}]}}\n'
               b'{"text": "second", "importance": 2.5, "valence": -0.5, "type": "working"}\n')


def build_seed_store(path: Path) -> Path:
    """A small store with every kind of file: segments, payload, edge log, CSR snapshot, BM25
    vocab and log, ingest index (compacted once, one record left in the trash)."""
    from fakes_extractor import FakeExtractor
    from synapse_cli import api
    from synapse_cli.engine.consolidate import ConsolidateConfig, consolidate
    from synapse_cli.engine.maintenance.prune import compact
    from synapse_cli.engine.store import StoreWriter
    from synapse_cli.models.fake import FakeEmbedder as FE

    emb = FE(DIM)
    api.ingest(TEXTS, store=str(path), embedder=emb)
    with StoreWriter.open(path) as w:
        consolidate(w, FakeExtractor(), emb, ConsolidateConfig(window=3))
    with StoreWriter.open(path) as w:
        w.set_flags({2: int(w.header(2).flags) | 1})
        compact(w)
    api.ingest([{"text": "Oslo trip planned with Maya", "session": "s4"}], store=str(path),
               embedder=emb)
    with StoreWriter.open(path) as w:
        w.set_flags({4: int(w.header(4).flags) | 1})  # in the trash, not compacted
    return path


def store_files(path: Path) -> list[str]:
    return sorted(n for n in os.listdir(path) if n not in ("LOCK",) and not n.startswith("extract"))


# --- targets: each takes bytes and may only raise StoreError ------------------------------------

class Work:
    """Scratch files shared by the targets (one process fuzzes at a time)."""

    dir: Path
    seed: Path  # pristine seed store
    store: Path  # copy that the store target damages
    files: list[str]
    originals: dict[str, bytes]
    embedder = None


def _write(name: str, data: bytes) -> Path:
    p = Work.dir / name
    with open(p, "wb") as f:
        f.write(data)
    return p


def _ints(data: bytes, n: int) -> tuple[list[int], bytes]:
    """n small integers from the first 2n bytes (u16 each), and the rest."""
    head = data[:2 * n].ljust(2 * n, b"\0")
    return [int.from_bytes(head[2 * i:2 * i + 2], "little") for i in range(n)], data[2 * n:]


def t_manifest(data: bytes) -> None:
    mf.decode_manifest(data, "MANIFEST")


def t_segment(data: bytes) -> None:
    (n, pb), rest = _ints(data, 2)
    p = _write("seg-000001.dat", rest)
    sg.verify_segment(p, n % 64, payload_bytes=pb * 8 + 16, expected_dim=DIM, expected_number=1)
    r = sg.SegmentReader(p, n % 64, expected_dim=DIM, expected_number=1)
    r.check(payload_bytes=pb * 8 + 16)
    for i in range(r.n):
        r.header_at(i)


def t_payload(data: bytes) -> None:
    (committed, off, length, rid), rest = _ints(data, 4)
    p = _write("payload.log", rest)
    try:
        payload.verify_payload(p, committed)
    finally:
        with payload.PayloadReader(p, min(committed, len(rest))) as r:
            r.read(off, length, rid)


def t_edgelog(data: bytes) -> None:
    (n, start), rest = _ints(data, 2)
    p = _write("edges.log", rest)
    gf.EdgeLog(p).read(n % 256, start % (n % 256 + 1))  # start > committed: a caller bug


def t_csr(data: bytes) -> None:
    p = _write("graph.csr", data)
    snap = gf.CSRSnapshot.read(p)
    gf.fold(snap, gf.make_entries([1], [2], gf.ASSOCIATION, 0.5))


def t_ingest(data: bytes) -> None:
    (n,), rest = _ints(data, 1)
    ix.read(_write("ingest.idx", rest), n % 512)


def t_bm25(data: bytes) -> None:
    (vlen, vb, lb), rest = _ints(data, 3)
    vocab, log = rest[:vlen], rest[vlen:]
    vp, lp = _write("bm25.vocab", vocab), _write("bm25.log", log)
    terms = bm25.read_vocab(vp, min(vb, len(vocab)) if vb else len(vocab))
    bm25.read_log(lp, min(lb, len(log)) if lb else len(log), len(terms))


def t_store(data: bytes) -> None:
    """Replace one file of a real store, then open, recall (every mode) and verify."""
    if not data:
        return
    name = Work.files[data[0] % len(Work.files)]
    path = Work.store / name
    path.write_bytes(data[1:])
    try:
        from synapse_cli.engine.maintenance.verify import verify

        verify(Work.store, retries=1)
        with Store.open(Work.store) as s:
            arrays = graphview.build(s)
            vec = Work.embedder.encode(["Caroline hiking"])[0]
            for mode in ("synapse", "hybrid"):
                recall_mod.recall(s, "Caroline hiking Oslo", vec,
                                  recall_mod.RecallConfig(mode=mode, k=5), arrays)
    finally:
        path.write_bytes(Work.originals[name])


# --- the input side: what users type and pipe in -------------------------------------------------
# The property: a parser either accepts or raises its typed error (InputError, UserError,
# ConfigError), and what ingest accepts can be stored and shown again (payload entry, JSON
# output), so no command ever exits 70 on it.

def t_ndjson(data: bytes) -> None:
    """Ingest's NDJSON parser; every accepted item goes through the payload and the output
    encoder the way ingest and `inspect record` use them."""
    import numpy as np

    from synapse_cli.commands.output import dumps
    from synapse_cli.engine import inputs
    from synapse_cli.engine.memory import NewMemory

    for x in inputs.parse_ndjson(data.splitlines(), "-"):
        if isinstance(x, inputs.InputError):
            continue
        body = NewMemory(text=x.text, vector=np.zeros(1, np.float32), timestamp_ms=0,
                         tags=x.tags, meta={"speaker": x.speaker, "meta": x.meta or None}).body()
        entry = payload.pack_entry(1, body)
        back = payload._decode_body(entry[12:-4], "fuzz", 0)  # length, id | body | CRC
        dumps({"payload": back})


def t_textin(data: bytes) -> None:
    """The text and document parsers."""
    from synapse_cli.engine import inputs

    list(inputs.parse_text(data.splitlines(), "-"))
    list(inputs.parse_document(data, "-"))


def t_query(data: bytes) -> None:
    """A query line on stdin, then the tags and times recall is given on its command line."""
    from synapse_cli.commands.common import check_tags, parse_time_option
    from synapse_cli.commands.recall_cmd import _query_line
    from synapse_cli.engine.filters import check_filters
    from synapse_cli.engine.recall import RecallConfig

    _query_line(data, "-:1")
    text = data.decode("utf-8", "replace").replace("\0", "")
    parts = text.split("\n")
    check_tags(parts)
    since = parse_time_option(parts[0], "--since")
    until = parse_time_option(parts[-1], "--until") if len(parts) > 1 else None
    check_filters(RecallConfig(tags=tuple(parts), since_ms=since, until_ms=until))


def t_config(data: bytes) -> None:
    """config.toml, and a SYNAPSE_* variable holding the same bytes."""
    from synapse_cli.engine import config

    path = _write("config.toml", data)
    text = data.decode("utf-8", "replace").replace("\0", "")
    config.resolve(path=path, environ={s.env: text for s in config.SETTINGS[::7]})


TARGETS = {"manifest": t_manifest, "segment": t_segment, "payload": t_payload,
           "edgelog": t_edgelog, "csr": t_csr, "ingest": t_ingest, "bm25": t_bm25,
           "store": t_store, "ndjson": t_ndjson, "textin": t_textin, "query": t_query,
           "config": t_config}


def expected_errors() -> tuple:
    """What bad bytes may raise: a typed store error, or the user-facing input errors."""
    from synapse_cli.commands.exits import UserError
    from synapse_cli.engine.config import ConfigError
    from synapse_cli.engine.inputs import InputError

    return (errors.StoreError, InputError, UserError, ConfigError)


def t_all(data: bytes) -> None:
    """One target for all: the first byte picks the reader (one coverage-guided run)."""
    if data:
        TARGETS[list(TARGETS)[data[0] % len(TARGETS)]](data[1:])


def check(target: str, data: bytes) -> None:
    """Run one input; StoreError is the expected outcome of bad bytes, anything else raises."""
    fn = t_all if target == "all" else TARGETS[target]
    try:
        fn(data)
    except expected_errors():
        pass


def setup(work: Path) -> None:
    _instrumented_imports()
    Work.dir = work
    work.mkdir(parents=True, exist_ok=True)
    Work.seed = work / "seed-store"
    if not (Work.seed / "MANIFEST").exists():
        build_seed_store(Work.seed)
    Work.store = work / "store"
    shutil.rmtree(Work.store, ignore_errors=True)
    shutil.copytree(Work.seed, Work.store)
    Work.files = store_files(Work.store)
    Work.originals = {n: (Work.store / n).read_bytes() for n in Work.files}
    Work.embedder = FakeEmbedder(DIM)


def seeds(target: str) -> list[bytes]:
    """Valid inputs for `target`, from the seed store's files."""
    m = mf.read_manifest(Work.seed)
    f = Work.originals
    u16 = lambda *xs: b"".join(int(x).to_bytes(2, "little") for x in xs)  # noqa: E731
    seg = m.segments[0]
    out = {
        "manifest": [f["MANIFEST"]],
        "segment": [u16(seg.records, min(m.payload.bytes // 8, 65535)) + f[seg.file]],
        "payload": [u16(min(m.payload.bytes, 65535), 16, 40, 1) + f[m.payload.file]],
        "edgelog": [u16(m.graph.log_entries, 0) + f[m.graph.log]],
        "csr": [f[m.graph.csr]] if m.graph.csr else [],
        "ingest": [u16(m.ingest["entries"]) + f[m.ingest["file"]]],
        "bm25": [u16(len(f[m.bm25["vocab"]]), 0, 0) + f[m.bm25["vocab"]] + f[m.bm25["log"]]],
        "store": [bytes([i]) + f[n] for i, n in enumerate(Work.files)],
        "ndjson": [INPUT_LINES, b'{"text": "a", "meta": ' + b'{"a": ' * 40 + b"1" + b"}" * 41],
        "textin": [b"\xef\xbb\xbfplain line\nsecond line\n"],
        "query": [b'{"query": "where does Ana live?"}', b"2026-10-10\nuser:3\n2026-10-01"],
        "config": [b"[recall]\nk = 10\nmode = \"synapse\"\n[gate]\ntau_gate = 0.05\n"],
    }
    if target == "all":
        return [bytes([i]) + s for i, t in enumerate(TARGETS) for s in out[t]]
    return out[target]


# --- running -------------------------------------------------------------------------------------

def child(target: str, work: Path, libfuzzer_args: list[str], rss_margin_mb: int) -> None:
    """Inside the fuzzing process: instrument, set up, hand over to libFuzzer."""
    import atheris

    # numba compiles the kernels from their bytecode: instrumented, they no longer type-check.
    # `exclude` does not keep out a kernel first imported inside the block (consolidate, run by
    # setup, spreads activation and computes PageRank), so those are imported before it.
    import synapse_cli.kernels.activation  # noqa: F401
    import synapse_cli.kernels.pagerank  # noqa: F401

    with atheris.instrument_imports(include=["store_format", "synapse_cli"],
                                    exclude=["synapse_cli.kernels"]):
        setup(work)
    corpus = work / f"corpus-{target}"
    if not corpus.exists():
        corpus.mkdir()
        for i, s in enumerate(seeds(target)):
            (corpus / f"seed-{i}").write_bytes(s)
    fn = t_all if target == "all" else TARGETS[target]

    expected = expected_errors()

    def one(data: bytes) -> None:
        try:
            fn(data)
        except expected:
            pass

    for seed in seeds(target):  # warm up: first calls allocate thread buffers, compile kernels
        one(seed)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    limit = f"-rss_limit_mb={rss_mb + rss_margin_mb}"
    print(f"stat::baseline_rss_mb: {rss_mb}", file=sys.stderr, flush=True)
    atheris.Setup([sys.argv[0], limit, *libfuzzer_args, str(corpus)], one)
    atheris.Fuzz()


def fuzz(target: str, seconds: float, work: Path, save: Path | None = REGRESSIONS,
         rss_margin_mb: int = 1024, timeout_s: int = 20) -> dict:
    """Fuzz `target` for `seconds` in a child process; keep what it finds under `save`."""
    artifacts = work / f"artifacts-{target}"
    artifacts.mkdir(parents=True, exist_ok=True)
    args = [f"-max_total_time={int(seconds)}", f"-timeout={timeout_s}", "-max_len=65536",
            f"-artifact_prefix={artifacts}/", "-print_final_stats=1"]
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, __file__, "--child", target, "--work", str(work),
                        "--rss-margin-mb", str(rss_margin_mb), "--", *args],
                       capture_output=True, text=True, timeout=seconds + 600)
    stats = {}
    for line in p.stderr.splitlines():
        if line.startswith("stat::number_of_executed_units"):
            stats["execs"] = int(line.split(":")[-1])
        for key in ("peak_rss_mb", "baseline_rss_mb"):
            if line.startswith(f"stat::{key}"):
                stats[key] = int(line.split(":")[-1])
    found = []
    for a in sorted(artifacts.iterdir()):
        data = a.read_bytes()
        name = f"{target}-{a.name.split('-')[0]}-{hashlib.sha1(data).hexdigest()[:12]}.bin"
        found.append(name)
        if save is not None:
            save.mkdir(parents=True, exist_ok=True)
            (save / name).write_bytes(data)
    return {"target": target, "seconds": round(time.monotonic() - t0, 1), "rc": p.returncode,
            **stats, "findings": found,
            "log_tail": p.stderr[-3000:] if (p.returncode or found) else ""}


def replay(paths: list[Path]) -> dict:
    """Run saved inputs (<target>-*.bin) in-process; returns {file: error or None}."""
    out = {}
    for p in paths:
        target = p.name.split("-")[0]
        try:
            check(target, p.read_bytes())
            out[p.name] = None
        except Exception as exc:  # noqa: BLE001 - the finding itself
            out[p.name] = f"{type(exc).__name__}: {exc}"[:300]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="each",
                    help="a target name, 'all' (one multiplexed run) or 'each' (default)")
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--work", help="work directory (seed store, corpora); default a temp dir")
    ap.add_argument("--replay", nargs="*", metavar="PATH")
    ap.add_argument("--rss-margin-mb", type=int, default=1024,
                    help="memory a run may add to its baseline before it is a finding")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("libfuzzer", nargs="*", help=argparse.SUPPRESS)
    a = ap.parse_args()
    work = Path(a.work or tempfile.mkdtemp(prefix="synapse-fuzz-"))
    if a.child:
        child(a.child, work, a.libfuzzer, a.rss_margin_mb)
        return
    if a.replay is not None:
        setup(work)
        paths = [q for p in map(Path, a.replay or [REGRESSIONS])
                 for q in (sorted(p.glob("*.bin")) if p.is_dir() else [p])]
        res = replay(paths)
        print(json.dumps({"replayed": len(res), "failures": {k: v for k, v in res.items() if v}},
                         indent=1))
        sys.exit(1 if any(res.values()) else 0)
    targets = list(TARGETS) if a.target == "each" else [a.target]
    results = [fuzz(t, a.seconds, work, rss_margin_mb=a.rss_margin_mb) for t in targets]
    print(json.dumps({"work": str(work), "results": results}, indent=1))
    sys.exit(1 if any(r["findings"] or r["rc"] for r in results) else 0)


if __name__ == "__main__":
    main()
