"""Shared helpers for the store / migration / corruption / CLI tests.

Everything here works on real files: stores are built with `StoreWriter` (one append of all
records, so building 10,000 records takes well under a second), and the CLI is the installed
`synapse` script run in a subprocess. Child processes import this module too (for
`make_memories`), so it must stay importable outside pytest's fixture machinery.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from store_format import flags as fl
from store_format import graph_files as gf
from store_format import manifest as mf
from store_format import segments as sg
from store_format.headers import HEADER_BYTES
from store_format.tags import encode_tags
from synapse_cli.engine.memory import NewMemory
from synapse_cli.engine.store import Store, StoreWriter

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
SHARED_DATA = ROOT.parent / "shared" / "data"  # the benchmark data, beside a workspace clone
REQUIRE_DATA = "SYNAPSE_REQUIRE_DATA"  # set by .ci/run, where the data is laid out
SYNAPSE = Path(sys.executable).with_name("synapse")  # the console script of this venv
DIM = 384
T0 = 1_700_000_000_000

# Header fields that carry data (padding/reserved excluded), with the value a layout that
# lacks the field reads as (FORMAT.md section 4 "Safe defaults").
V1_FIELDS = ("timestamp_ms", "synaptic_tags", "exact_norm", "importance", "recall_count",
             "centroid_id", "valence", "flags")
V2_FIELDS = ("arousal", "storage_strength")
DEFAULTS = {"arousal": 0, "storage_strength": 1.0}
# What a store directory may hold after create/append/migrate (no BM25 or ingest files here).
ALLOWED_FILE = re.compile(r"MANIFEST|LOCK|seg-\d{6}\.dat(\.bak)?|payload\.log|edges\.log|graph\.csr")


def needs_shared_data(*files: tuple[str, ...]):
    """Decorate a test that reads benchmark data, ../shared/data beside the repository (each
    argument: path parts of one file). A user's clone has none: the test is skipped, named
    with the reason in pytest's summary (-ra). Where the data must be, .ci/run sets
    $SYNAPSE_REQUIRE_DATA and the test runs (and fails) without it."""
    missing = [SHARED_DATA.joinpath(*f) for f in files if not SHARED_DATA.joinpath(*f).exists()]

    def mark(test):
        reason = (f"{test.__name__}: benchmark data not found: {missing[0] if missing else ''} "
                  "(../shared/data beside the repository, as in the project's CI; a plain "
                  "clone has none)")
        return pytest.mark.skipif(bool(missing) and not os.environ.get(REQUIRE_DATA),
                                  reason=reason)(test)
    return mark


# --- memories ----------------------------------------------------------------------------------


@dataclass
class Mem(NewMemory):
    """A NewMemory that also sets the header fields `NewMemory` leaves at their defaults
    (recall_count, centroid_id, tombstone), so every header field is exercised."""

    recall_count: int = 0
    centroid_id: int = 0xFFFF
    tombstone: bool = False

    def header(self, exact_norm):
        h = super().header(exact_norm)
        return h.replace(recall_count=int(self.recall_count), centroid_id=int(self.centroid_id),
                         flags=h.flags | (fl.TOMBSTONE if self.tombstone else 0))


TAG_POOL = ["Work", "home", "speaker:alice", "session:s1", "café", "  Padded  ", "project-x",
            "Straße", "🧠"]
WORDS = ["alpha", "beta", "gamma", "délta", "ε", "日本", "zeta", "eta", "🧠", "theta"]


def make_memories(n: int, seed: int = 0, prefix: str = "memory") -> list[Mem]:
    """`n` memories with random vectors and header fields spread over their whole ranges,
    extremes included (record 0 of a batch of >= 8 hits every bound once somewhere)."""
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((n, DIM)).astype(np.float32)
    vectors *= rng.uniform(0.01, 10.0, (n, 1)).astype(np.float32)
    ts = T0 + np.cumsum(rng.integers(0, 5_000, n))
    out = []
    for i in range(n):
        tags = [str(t) for t in rng.choice(TAG_POOL, size=int(rng.integers(0, 4)), replace=False)]
        meta = {"key": f"{prefix}-{i}"}  # unique even where the text is empty
        if i % 3 == 0:
            meta["speaker"] = f"speaker{i % 5}"
        if i % 4 == 0:
            meta["session"] = f"s{i % 7}"
        out.append(Mem(
            text=f"{prefix}-{i} {WORDS[i % len(WORDS)]} {rng.integers(0, 10**9)}",
            vector=vectors[i],
            timestamp_ms=int(ts[i]),
            memory_type=int(rng.integers(0, 4)),
            importance=float(rng.uniform(0.05, 10.0)),
            valence=int(rng.integers(-128, 128)),
            arousal=None if rng.random() < 0.2 else int(rng.integers(0, 256)),
            storage_strength=float(rng.uniform(0.0, 5.0)),
            tags=tags,
            pinned=bool(rng.random() < 0.3),
            resolved=bool(rng.random() < 0.7),
            consolidated=bool(rng.random() < 0.2),
            meta=meta,
            recall_count=int(rng.integers(0, 2**32)) if rng.random() < 0.5 else 0,
            centroid_id=int(rng.integers(0, 0x10000)),
            tombstone=bool(rng.random() < 0.1),
        ))
    extremes = [  # (index, field changes): each bound of section 4 once
        (1, dict(timestamp_ms=0, importance=0.05, valence=-128, arousal=0, storage_strength=0.0,
                 recall_count=0, centroid_id=0)),
        (2, dict(timestamp_ms=2**53, importance=10.0, valence=127, arousal=255,
                 storage_strength=5.0, recall_count=2**32 - 1, centroid_id=0xFFFF)),
        (3, dict(vector=np.zeros(DIM, np.float32), tags=[], text="")),  # exact_norm 0
        (4, dict(memory_type=fl.MemoryType.PROCEDURAL, pinned=True, resolved=True,
                 consolidated=True, tombstone=True, tags=list(TAG_POOL))),
    ]
    for i, changes in extremes:
        if i < n:
            out[i] = dataclasses.replace(out[i], **changes)
    return out


def expected_header(mem: Mem, version: int) -> dict:
    """What a record of `mem` must read back as, per FORMAT.md sections 4 and 5."""
    v64 = np.asarray(mem.vector, np.float64)
    arousal = mem.arousal if mem.arousal is not None else min(255, abs(mem.valence) * 2)
    flags = fl.make_flags(memory_type=mem.memory_type, pinned=mem.pinned, resolved=mem.resolved,
                          consolidated=mem.consolidated, tombstone=mem.tombstone)
    return {
        "timestamp_ms": mem.timestamp_ms,
        "synaptic_tags": encode_tags(mem.tags),
        "exact_norm": float(np.float32(np.sqrt(np.dot(v64, v64)))),
        "importance": float(np.float32(mem.importance)),
        "recall_count": mem.recall_count,
        "centroid_id": mem.centroid_id,
        "valence": mem.valence,
        "flags": flags,
        "arousal": arousal if version >= 2 else DEFAULTS["arousal"],
        "storage_strength": (float(np.float32(mem.storage_strength)) if version >= 2
                             else DEFAULTS["storage_strength"]),
    }


def quantize_ref(v) -> np.ndarray:
    """FORMAT.md section 5, written out independently of store_format.vectors."""
    v = np.asarray(v, np.float64)
    m = np.max(np.abs(v))
    if m == 0:
        return np.zeros(len(v), np.int8)
    return np.clip(np.rint((127.0 * v) / m), -127, 127).astype(np.int8)


# --- building stores ---------------------------------------------------------------------------


@contextlib.contextmanager
def segment_limit(records: int | None):
    """Make this process's writers start a new segment every `records` records.

    A real segment holds 262,144 records; multi-segment stores of that size are too slow for
    tests. The files written are valid for any reader (the manifest allows a non-full segment
    before the last); only this process's writer uses the smaller limit.
    """
    if records is None:
        yield
        return
    old = sg.MAX_RECORDS
    sg.MAX_RECORDS = records
    try:
        yield
    finally:
        sg.MAX_RECORDS = old


@dataclass
class Built:
    path: Path
    mems: list
    ids: list
    edges: dict = field(default_factory=dict)  # (src, dst, type) -> float32 weight (live graph)


def apply_edges(live: dict, src, dst, etype, weight=1.0, op=gf.UPSERT) -> None:
    """The live-graph rule of FORMAT.md 7.2 in plain Python (the expectation for tests)."""
    src, dst, etype, weight, op = np.broadcast_arrays(np.asarray(src, np.uint64),
                                                      np.asarray(dst, np.uint64), etype,
                                                      np.asarray(weight, np.float32), op)
    for s, d, t, w, o in zip(src.ravel(), dst.ravel(), etype.ravel(), weight.ravel(), op.ravel()):
        key = (int(s), int(d), int(t))
        if o == gf.UPSERT:
            live[key] = float(np.float32(w))
        else:
            live.pop(key, None)


def add_edges(w: StoreWriter, live: dict, src, dst, etype, weight=1.0, op=gf.UPSERT) -> None:
    w.add_edges(src, dst, etype, weight, op)
    apply_edges(live, src, dst, etype, weight, op)


def build_store(path, n: int, header_version: int = 3, seed: int = 0,
                max_segment_records: int | None = None) -> Built:
    """A store of `n` records (one append, one commit) with temporal, association and relation
    edges of varied weights and one remove."""
    path = Path(path)
    mems = make_memories(n, seed)
    rng = np.random.default_rng(seed + 1)
    live: dict = {}
    with segment_limit(max_segment_records):
        with StoreWriter.open(path, create=True, header_version=header_version) as w:
            ids = w.append(mems)
            if n >= 2:
                add_edges(w, live, ids[:-1], ids[1:], gf.TEMPORAL)
                k = max(1, n // 10)
                add_edges(w, live, rng.choice(ids, k), rng.choice(ids, k), gf.ASSOCIATION,
                          rng.uniform(0, 1, k).astype(np.float32))
                add_edges(w, live, ids[:2], ids[-2:], gf.RELATION, 0.5)
                add_edges(w, live, ids[0], ids[1], gf.TEMPORAL, 0.0, gf.REMOVE)
            w.commit()
    return Built(path, mems, ids, live)


def fold_graph(path) -> None:
    """Write graph.csr folding every committed edge-log entry and commit it in the manifest
    (holding the writer lock, as a writer would)."""
    from store_format.lock import WriterLock

    path = Path(path)
    with WriterLock(path, 10):
        m = mf.read_manifest(path)
        g = gf.live_graph(path, *m.graph)
        gf.CSRSnapshot(g, m.graph.log_entries).write(path / mf.CSR_NAME)
        m = dataclasses.replace(m, graph=mf.GraphRef(mf.CSR_NAME, m.graph.log,
                                                     m.graph.log_entries)).next_generation()
        mf.write_manifest(path, m)


# --- reading stores back -----------------------------------------------------------------------


def graph_dict(store: Store) -> dict:
    g = store.graph()
    rows = np.repeat(g.node_ids, np.diff(g.indptr.astype(np.int64)))
    dst = g.node_ids[g.indices.astype(np.intp)]
    return {(int(s), int(d), int(t)): float(w)
            for s, d, t, w in zip(rows, dst, g.types, g.weights)}


@dataclass
class State:
    """Everything a store holds, copied out of the maps (comparable after the store changes)."""

    manifest: mf.Manifest
    ids: np.ndarray
    fields: dict  # every data field of V3, defaults where the layout lacks it
    vectors: np.ndarray
    payload_offsets: np.ndarray
    payload_lengths: np.ndarray
    file_versions: list  # header version in each segment's file header
    edges: dict
    files: set


def read_state(path) -> State:
    with Store.open(path) as s:
        fields = {}
        for name in V1_FIELDS + V2_FIELDS:
            parts = []
            for seg in s.segments:
                if name in seg.headers.dtype.names:
                    parts.append(np.array(seg.headers[name]))
                else:
                    parts.append(np.full(seg.n, DEFAULTS[name]))
            fields[name] = np.concatenate(parts) if parts else np.zeros(0)
        cat = lambda xs, dt: np.concatenate([np.array(x) for x in xs]) if xs else np.zeros(0, dt)  # noqa: E731
        return State(
            manifest=s.manifest,
            ids=np.array(s.ids),
            fields=fields,
            vectors=cat([seg.vectors for seg in s.segments], np.int8),
            payload_offsets=cat([seg.payload_offsets for seg in s.segments], np.uint64),
            payload_lengths=cat([seg.payload_lengths for seg in s.segments], np.uint32),
            file_versions=[seg.header.header_version for seg in s.segments],
            edges=graph_dict(s),
            files=set(os.listdir(path)),
        )


def dir_digest(path) -> dict:
    """name -> (mode, size, sha256) of every entry: equal digests mean nothing changed."""
    out = {}
    for entry in sorted(os.scandir(path), key=lambda e: e.name):
        st = entry.stat(follow_symlinks=False)
        data = Path(entry.path).read_bytes() if entry.is_file(follow_symlinks=False) else b""
        out[entry.name] = (st.st_mode, st.st_size, hashlib.sha256(data).hexdigest())
    return out


def committed_lengths(path) -> dict:
    """File name -> committed length named by the manifest (FORMAT.md section 1)."""
    m = mf.read_manifest(path)
    out = {}
    for s in m.segments:
        with open(Path(path) / s.file, "rb") as f:
            version = f.read(11)[10]
        out[s.file] = 64 + s.records * (HEADER_BYTES[version] + m.dim + 24)
    out[m.payload.file] = m.payload.bytes
    out[m.graph.log] = 16 + 32 * m.graph.log_entries
    return out


def stray_files(path) -> list:
    return sorted(n for n in os.listdir(path) if not ALLOWED_FILE.fullmatch(n))


# --- the CLI -----------------------------------------------------------------------------------


def cli_env(store=None, **extra) -> dict:
    from synapse_cli.engine.config import SETTINGS

    settings_env = {s.env for s in SETTINGS}  # the user's tuning must not leak into tests
    env = {k: v for k, v in os.environ.items()
           if k not in ("SYNAPSE_HOME", "SYNAPSE_LOCK_TIMEOUT", "NO_COLOR", "FORCE_COLOR",
                        "XDG_DATA_HOME") and k not in settings_env}
    env["XDG_CONFIG_HOME"] = str(TESTS / "no-such-config-dir")  # nor their config file
    if store is not None:
        env["SYNAPSE_HOME"] = str(store)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_cli(args, store=None, *, env: dict | None = None, timeout: float = 120,
            stdin=subprocess.DEVNULL) -> subprocess.CompletedProcess:
    """Run `synapse ARGS` with SYNAPSE_HOME=store, stdin not a terminal; capture text output."""
    return subprocess.run([str(SYNAPSE), *map(str, args)], env=cli_env(store, **(env or {})),
                          stdin=stdin, capture_output=True, text=True, timeout=timeout)


def start_cli(args, store=None, *, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([str(SYNAPSE), *map(str, args)], env=cli_env(store, **(env or {})),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def assert_clean_failure(r, code: int | None = None) -> list[str]:
    """A failed command: a positive exit code (no signal), no traceback, one short message
    (`synapse: error: ...`, optionally a `hint:` line). Returns the stderr lines."""
    desc = f"rc={r.returncode} stdout={r.stdout[:300]!r} stderr={r.stderr[-2000:]!r}"
    assert r.returncode > 0, desc
    if code is not None:
        assert r.returncode == code, desc
    assert "Traceback" not in r.stderr, desc
    lines = r.stderr.strip().splitlines()
    assert 1 <= len(lines) <= 2, desc
    assert lines[0].startswith("synapse: error: "), desc
    assert len(lines) == 1 or lines[1].startswith("hint: "), desc
    assert all(len(line) < 400 for line in lines), desc
    return lines


def spawn_python(code: str, *args, **kw) -> subprocess.Popen:
    """A child Python (this venv) running `code`, which can `import conftest`."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(ROOT), env.get("PYTHONPATH", "")])
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], cwd=ROOT, env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def ingest_chat(path, turns, embedder, session: str = "c"):
    """A store at `path` holding `turns`, (speaker, ISO time, text) each, as one session of a
    chat, ingested through the API with `embedder`; returns `path`."""
    from synapse_cli import api

    api.ingest([{"speaker": s, "timestamp": t, "text": x, "session": session}
                for s, t, x in turns], store=str(path), embedder=embedder)
    return path


@pytest.fixture
def small_store(tmp_path) -> Built:
    return build_store(tmp_path / "store", 60)


def read_pty(master: int, timeout: float) -> bytes:
    """Everything a child wrote to the pseudo-terminal `master` until it closed it (or
    `timeout` seconds passed without output); closes `master`."""
    import select

    chunks = []
    while True:
        ready, _, _ = select.select([master], [], [], timeout)
        if not ready:
            break
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return b"".join(chunks)
