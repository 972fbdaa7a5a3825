"""Embedders: the torch-free numpy MiniLM against sentence-transformers itself (real models,
no fakes), the Protocol, the import discipline, model-directory resolution, FakeEmbedder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from synapse_cli.models.embedder import (
    EMBED_MODEL_DIR_ENV,
    Embedder,
    MiniLMEmbedder,
    SentenceTransformerEmbedder,
    get_embedder,
    resolve_model_dir,
)
from synapse_cli.models.fake import FakeEmbedder

REPO = Path(__file__).resolve().parents[1]

TEXTS = [
    "",
    " ",
    "\n\t  \n",
    "a",
    "Hello world",
    "hello world",
    "HELLO WORLD!!!",
    "Hey Mel! Good to see you! How have you been?",
    "What did Caroline research after the LGBTQ support group on 7 May 2023?",
    "I went to a support group yesterday and it was really powerful.",
    "The quick brown fox jumps over the lazy dog.",
    "Café naïve résumé façade coöperate",
    "Straße, Größe, Übermaß",
    "東京は日本の首都です。",
    "我喜欢吃苹果和香蕉",
    "서울은 한국의 수도입니다",
    "Москва — столица России.",
    "Αθήνα είναι η πρωτεύουσα της Ελλάδας",
    "مرحبا بالعالم",
    "שלום עולם",
    "नमस्ते दुनिया",
    "😀😃😄😁 🎉🎊 👍🏽 ❤️",
    "I love pizza 🍕 and sushi 🍣!!",
    "👨‍👩‍👧‍👦 family emoji with ZWJ",
    "email me at someone@example.com or visit https://example.org/path?q=1&r=2",
    "def f(x):\n    return x ** 2  # python code",
    "SELECT * FROM users WHERE id = 42;",
    "3.14159 2.71828 1.41421 1e-12 -7 +8 100%",
    "2023-05-07T13:45:00Z",
    "(((nested))) [[brackets]] {{braces}} <<angles>>",
    "!!!???...,,,;;;:::",
    "ok",
    "no",
    "Melanie painted a sunrise over the lake last weekend.",
    "Caroline is thinking about adoption agencies.",
    "The concert was amazing; we danced until 2am.",
    "unbelievably antidisestablishmentarianism supercalifragilisticexpialidocious",
    "tokenization of hyphenated-words and under_scores and CamelCaseWords",
    "\u00a0non-breaking\u00a0spaces\u2003em space\u200bzero width",
    "control\x00chars\x07here\x1b",
    "multiple\n\nparagraphs\n\nof text\n",
    "repeat " * 20,
    "a b c d e f g h i j k l m n o p q r s t u v w x y z",
    "Is it raining in Paris today?",
    "What's the capital of Australia? Canberra, not Sydney.",
    # beyond 256 tokens: truncated exactly as sentence-transformers does
    "word " * 400,
    " ".join(f"token{i}" for i in range(600)),
    ("Long conversational turn about hiking, cooking, and painting. " * 60).strip(),
    "é" * 3000,
    "🙂" * 500,
]


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    return MiniLMEmbedder()


@pytest.fixture(scope="module")
def reference() -> SentenceTransformerEmbedder:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return SentenceTransformerEmbedder()


def _cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.einsum("ij,ij->i", a.astype(np.float64), b.astype(np.float64)) / (
        np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    )


@pytest.mark.slow
def test_minilm_matches_sentence_transformers(minilm, reference):
    assert len(TEXTS) >= 50
    a = minilm.encode(TEXTS)
    b = reference.encode(TEXTS)
    cos = _cos(a, b)
    worst = int(np.argmin(cos))
    assert cos.min() >= 0.9999, (cos.min(), TEXTS[worst][:80])


@pytest.mark.slow
def test_minilm_matches_reference_one_at_a_time(minilm, reference):
    """The single-query path (no padding, one batch) agrees too."""
    for text in ("", "What did Caroline do?", "😀", "word " * 400):
        cos = _cos(minilm.encode([text]), reference.encode([text]))
        assert cos[0] >= 0.9999, text[:40]


@pytest.mark.slow
def test_max_seq_length_matches_reference(minilm, reference):
    assert minilm.max_seq_length == reference.max_seq_length == 256
    assert len(minilm.tokenize(["word " * 400])[0]) == 256
    assert minilm.tokenize([""])[0] == [101, 102]  # [CLS] [SEP]


def test_shape_dtype_normalisation(minilm):
    out = minilm.encode(TEXTS)
    assert out.shape == (len(TEXTS), 384)
    assert out.dtype == np.float32
    assert out.flags.c_contiguous
    assert np.all(np.isfinite(out))
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    assert minilm.dim == 384 and minilm.name == "all-MiniLM-L6-v2"
    empty = minilm.encode([])
    assert empty.shape == (0, 384) and empty.dtype == np.float32


def test_batch_order_and_workers_do_not_change_results(minilm):
    texts = TEXTS[:30]
    whole = minilm.encode(texts)
    single = np.vstack([minilm.encode([t]) for t in texts])
    rev = minilm.encode(texts[::-1])[::-1]
    one_worker = MiniLMEmbedder(workers=1, max_tokens_per_batch=64).encode(texts)
    for other in (single, rev, one_worker):
        assert _cos(whole, other).min() >= 0.99999


def test_encode_rejects_bare_string(minilm):
    with pytest.raises(TypeError):
        minilm.encode("not a list")  # type: ignore[arg-type]


def test_protocol_and_factory(minilm):
    assert isinstance(minilm, Embedder)
    assert isinstance(get_embedder(), MiniLMEmbedder)
    assert isinstance(get_embedder("minilm"), MiniLMEmbedder)
    with pytest.raises(ValueError):
        get_embedder("no-such-kind")


@pytest.mark.slow
def test_reference_obeys_protocol(reference):
    assert isinstance(reference, Embedder)
    out = reference.encode(["a", "b"])
    assert out.shape == (2, reference.dim) and out.dtype == np.float32
    assert reference.encode([]).shape == (0, reference.dim)


def test_model_dir_argument_and_env(monkeypatch, tmp_path):
    default = resolve_model_dir()
    assert (default / "model.safetensors").is_file()
    monkeypatch.setenv(EMBED_MODEL_DIR_ENV, str(default))
    assert resolve_model_dir() == default
    monkeypatch.setenv(EMBED_MODEL_DIR_ENV, str(tmp_path))
    with pytest.raises(FileNotFoundError):
        resolve_model_dir()
    with pytest.raises(FileNotFoundError):
        MiniLMEmbedder()
    # an explicit argument wins over the environment
    assert resolve_model_dir(default) == default
    # a copy elsewhere is used, and it is the same model (the name follows the files)
    copy = tmp_path / "my-minilm"
    copy.mkdir()
    for f in default.rglob("*"):
        if f.is_file():
            dst = copy / f.relative_to(default)
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.symlink_to(f)
    monkeypatch.setenv(EMBED_MODEL_DIR_ENV, str(copy))
    emb = MiniLMEmbedder()
    assert emb.model_dir == copy and emb.name == "all-MiniLM-L6-v2"
    assert emb.encode(["x"]).shape == (1, 384)


def test_a_foreign_model_in_a_directory_called_model_is_not_minilm(tmp_path):
    """Models were named by their directory: another 384-dim model in a directory called
    "model" passed for the packaged MiniLM, and a store took its vectors beside MiniLM's
    without a word (hostile pass). The name now carries a fingerprint of the files."""
    from safetensors.numpy import load_file, save_file

    from synapse_cli import api
    from synapse_cli.engine.errors import ConfigError
    from synapse_cli.models.embedder import model_name, same_model

    default = resolve_model_dir()
    foreign = tmp_path / "elsewhere" / "model"
    for f in default.rglob("*"):
        if f.is_file() and f.name != "model.safetensors":
            dst = foreign / f.relative_to(default)
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.symlink_to(f)
    weights = load_file(str(default / "model.safetensors"))
    save_file({k: (-v if v.dtype.kind == "f" else v) for k, v in weights.items()},
              str(foreign / "model.safetensors"))
    name = MiniLMEmbedder(model_dir=foreign).name
    assert name.startswith("model@") and name != model_name(default) == "all-MiniLM-L6-v2"
    store = tmp_path / "st"
    api.ingest(["Ana moved to Porto"], store=store, embedder=MiniLMEmbedder())
    with pytest.raises(ConfigError, match="all-MiniLM-L6-v2"):
        api.ingest(["Bruno moved to Braga"], store=store,
                   embedder=MiniLMEmbedder(model_dir=foreign))
    # a store made before names had a fingerprint records the bare directory name, but
    # all-MiniLM-L6-v2 is the packaged model's files, whatever a directory is called
    assert same_model("my-model", "my-model@0123456789ab")
    assert not same_model("all-MiniLM-L6-v2", "all-MiniLM-L6-v2@0123456789ab")
    assert not same_model("my-model@0123456789ab", "my-model@ba9876543210")
    assert not same_model("all-MiniLM-L6-v2", name)
    # a symlink's own name, as before (Hugging Face's cache links a name to snapshots/<hash>)
    link = tmp_path / "my-finetune"
    link.symlink_to(foreign)
    assert model_name(link) == "my-finetune@" + name.partition("@")[2]


def _run(code: str) -> dict:
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO))
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_module_import_is_light():
    got = _run(
        "import sys, json\n"
        "import synapse_cli.models.embedder\n"
        "print(json.dumps({m: m in sys.modules for m in "
        "['torch', 'sentence_transformers', 'transformers', 'tokenizers', 'safetensors', 'scipy']}))"
    )
    assert not any(got.values()), got


def test_minilm_path_never_imports_torch():
    got = _run(
        "import sys, json\n"
        "from synapse_cli.models.embedder import get_embedder\n"
        "e = get_embedder()\n"
        "v = e.encode(['hello there', 'a second, longer text to make two batches'] * 40)\n"
        "assert v.shape == (80, 384)\n"
        "print(json.dumps({m: m in sys.modules for m in "
        "['torch', 'sentence_transformers', 'transformers', 'scipy']}))"
    )
    assert not any(got.values()), got


def test_fake_embedder_obeys_protocol():
    fake = FakeEmbedder()
    assert isinstance(fake, Embedder)
    texts = ["alpha beta", "alpha beta", "alpha gamma", "zeta", "", "😀"]
    out = fake.encode(texts)
    assert out.shape == (len(texts), 384) and out.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(out[0], out[1])
    assert np.array_equal(out, FakeEmbedder().encode(texts))  # deterministic across instances
    assert out[0] @ out[2] > out[0] @ out[3]  # shared words -> closer
    assert fake.encode([]).shape == (0, 384)
    assert FakeEmbedder(dim=8).encode(["x"]).shape == (1, 8)


def test_mmap_weights_bitwise_equal_to_safetensors(minilm):
    from safetensors.numpy import load_file

    from synapse_cli.models.embedder import _mmap_safetensors

    path = resolve_model_dir() / "model.safetensors"
    ref = load_file(str(path))
    mm = _mmap_safetensors(path)
    assert ref.keys() == mm.keys()
    for k in ref:
        assert ref[k].dtype == mm[k].dtype and ref[k].shape == mm[k].shape, k
        assert np.array_equal(ref[k], mm[k]), k
    texts = TEXTS[:20]
    assert np.array_equal(MiniLMEmbedder(weights="mmap").encode(texts), minilm.encode(texts))
    with pytest.raises(ValueError):
        MiniLMEmbedder(weights="pickle")
