"""Disk full: a write that fails with ENOSPC leaves the store exactly as it was before the
failing command (same MANIFEST, same committed bytes, no stray file), with one clear line and
exit 74; after space is freed the same command succeeds.

The store lives on a small tmpfs (we run as root in CI); where mounting is not permitted the
commands run under a wrapper that makes os.write/os.pwrite fail with ENOSPC after N bytes.
Each command is tried with several amounts of free space, so the failure lands at different
steps (first append, a later file, the manifest).
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import assert_clean_failure, cli_env, committed_lengths
from store_format import manifest as mf
from synapse_cli.engine.maintenance.verify import verify

# The CLI with os.write/os.pwrite failing (ENOSPC) once $ENOSPC_AFTER bytes were written.
INJECT = r"""
import errno, os, sys
left = [int(os.environ["ENOSPC_AFTER"])]
_w, _pw = os.write, os.pwrite
def _take(n):
    if left[0] <= 0:
        raise OSError(errno.ENOSPC, "No space left on device")
    n = min(n, left[0]); left[0] -= n
    return n
def write(fd, data):
    if fd <= 2:
        return _w(fd, data)
    return _w(fd, memoryview(data)[:_take(len(data))])
def pwrite(fd, data, offset):
    return _pw(fd, memoryview(data)[:_take(len(data))], offset)
os.write, os.pwrite = write, pwrite
sys.argv[0] = "synapse"
from synapse_cli.commands.main import run
run(sys.argv[1:])
"""


class Disk:
    """A small file system to fill (tmpfs), or the write-injection fallback."""

    def __init__(self, root: Path, mounted: bool):
        self.root, self.mounted, self.free = root, mounted, None

    def set_free(self, free: int | None) -> None:
        """Leave `free` bytes of space (None: all of it)."""
        self.free = free
        if not self.mounted:
            return
        filler = self.root / "filler"
        filler.unlink(missing_ok=True)
        if free is None:
            return
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            for chunk in (1 << 16, 1 << 12):
                try:
                    while True:
                        os.write(fd, b"\0" * chunk)
                except OSError:
                    pass
        finally:
            os.close(fd)
        os.truncate(filler, max(0, filler.stat().st_size - free))

    def run(self, args, store, stdin: bytes | None = None) -> subprocess.CompletedProcess:
        env = cli_env(store, HF_HUB_OFFLINE="1")
        if self.mounted or self.free is None:
            argv = [str(Path(sys.executable).with_name("synapse")), *map(str, args)]
        else:
            env["ENOSPC_AFTER"] = str(self.free)
            argv = [sys.executable, "-c", INJECT, *map(str, args)]
        return subprocess.run(argv, env=env, input=stdin or b"", capture_output=True,
                              timeout=300)


@pytest.fixture
def disk(tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs",
                              str(mnt)], capture_output=True).returncode == 0
    print(f"disk full via {'tmpfs' if mounted else 'write injection'}")
    try:
        yield Disk(mnt, mounted)
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def lines(n: int, tag: str, pad: int = 300) -> bytes:
    names = ["Caroline", "Melanie", "Oslo", "Berlin", "Maya", "Pixel"]
    return "".join(json.dumps({"text": f"{names[i % 6]} met {names[(i + 1) % 6]} about {tag} "
                                       f"number {i} " + "x" * pad,
                               "session": f"s{i % 3}", "speaker": names[i % 2]}) + "\n"
                   for i in range(n)).encode()


def snapshot(store: Path) -> dict:
    """MANIFEST bytes, SHA-256 of each committed prefix, and the files and their sizes (caches
    aside)."""
    m = mf.read_manifest(store)
    lengths = committed_lengths(store)
    if m.bm25:
        lengths[m.bm25["log"]], lengths[m.bm25["vocab"]] = m.bm25["log_bytes"], m.bm25["vocab_bytes"]
    if m.ingest:
        lengths[m.ingest["file"]] = 16 + 40 * m.ingest["entries"]
    if m.graph.csr:
        lengths[m.graph.csr] = (store / m.graph.csr).stat().st_size
    prefixes = {name: hashlib.sha256((store / name).read_bytes()[:n]).hexdigest()
                for name, n in lengths.items()}
    # with their sizes: a failed transaction gives back the space its tail took at once
    files = sorted((n, (store / n).stat().st_size) for n in os.listdir(store)
                   if not n.startswith("extract."))
    return {"manifest": (store / "MANIFEST").read_bytes(), "prefixes": prefixes, "files": files}


def expect_disk_full(disk: Disk, store: Path, args, stdin=None, frees=(0, 8192, 40960)):
    """Run `args` with each amount of free space: exit 74, one line, store unchanged."""
    before = snapshot(store)
    for free in frees:
        disk.set_free(free)
        r = disk.run(args, store, stdin)
        r = subprocess.CompletedProcess(r.args, r.returncode, r.stdout.decode(),
                                        r.stderr.decode())
        lines_ = assert_clean_failure(r, 74)
        assert "disk full" in lines_[0], lines_
        assert r.stdout == "", r.stdout  # nothing acknowledged
        disk.set_free(None)
        assert verify(store).ok, verify(store).as_dict()
        assert snapshot(store) == before, (free, lines_)
    disk.set_free(None)
    r = disk.run(args, store, stdin)  # with space again the same command works
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    assert verify(store).ok


def base_store(disk: Disk) -> Path:
    store = disk.root / "store"
    r = disk.run(["ingest"], store, lines(40, "base"))
    assert r.returncode == 0, r.stderr.decode()
    return store


def test_ingest_on_a_full_disk(disk):
    store = base_store(disk)
    expect_disk_full(disk, store, ["ingest"], lines(300, "more"), frees=(0, 8192, 65536, 163840))


def test_consolidate_on_a_full_disk(disk):
    """The real `synapse consolidate` (SmolLM2): the failure hits the model-hash cache, the
    extraction cache or the first window's commit."""
    store = base_store(disk)
    expect_disk_full(disk, store, ["consolidate", "--window", "20"], frees=(0, 4096))


def test_prune_compact_on_a_full_disk(disk):
    store = base_store(disk)
    r = disk.run(["prune", "--id", "3", "--id", "7", "--yes"], store)  # to the trash: in place
    assert r.returncode == 0, r.stderr.decode()
    expect_disk_full(disk, store, ["prune", "--compact", "--yes"], frees=(0, 16384, 40960))


def test_migrate_on_a_full_disk(disk):
    store = base_store(disk)
    expect_disk_full(disk, store, ["migrate", "--header", "v1", "--yes"], frees=(0, 8192))
    assert mf.read_manifest(store).header_version == 1
    assert not [n for n in os.listdir(store) if n.endswith((".migrating", ".tmp"))]
