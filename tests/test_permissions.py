"""Permissions: every file any command creates is 0600 in a 0700 directory (whatever the
umask); a store or file owned by another user, or a symlink planted where a file will be
created, is refused with one line and exit 77, changing nothing.
(test_cli_basics covers symlinks replacing the store's existing files.)
"""
from __future__ import annotations

import json
import os
import stat
import subprocess

import pytest

from conftest import SYNAPSE, assert_clean_failure, cli_env, dir_digest

NOBODY = 65534
ROWS = "".join(json.dumps({"text": f"Caroline met Melanie in Oslo, visit {i}", "session": "s1",
                           "speaker": "Caroline"}) + "\n" for i in range(6)).encode()


def run(args, store, data: bytes = b"", umask: int | None = None):
    p = subprocess.run([str(SYNAPSE), *map(str, args)], input=data, capture_output=True,
                       env=cli_env(store, HF_HUB_OFFLINE="1"), timeout=600,
                       preexec_fn=(lambda: os.umask(umask)) if umask is not None else None)
    return subprocess.CompletedProcess(p.args, p.returncode, p.stdout.decode(),
                                       p.stderr.decode())


def run_all(argvs, store, data: bytes = b"") -> list[subprocess.CompletedProcess]:
    procs = [subprocess.Popen([str(SYNAPSE), *map(str, a)], env=cli_env(store, HF_HUB_OFFLINE="1"),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) for a in argvs]
    out = []
    for p in procs:
        o, e = p.communicate(data, timeout=300)
        out.append(subprocess.CompletedProcess(p.args, p.returncode, o.decode(), e.decode()))
    return out


def test_every_file_of_every_command_is_0600_in_a_0700_directory(tmp_path):
    store = tmp_path / "store"
    for args, data in ((["ingest"], ROWS), (["consolidate"], b""),
                       (["prune", "--id", "2", "--compact", "--yes"], b""),
                       (["migrate", "--header", "v1", "--yes"], b""),
                       (["recall", "Oslo", "--k", "2"], b"")):
        r = run(args, store, data, umask=0)
        assert r.returncode == 0, (args, r.stderr)
    names = set(os.listdir(store))
    # BM25, ingest index, extraction caches, compaction generations and migration backups.
    for pattern in ("bm25", "ingest", "extract.cache", "extract.models", "payload-", ".bak"):
        assert any(pattern in n for n in names), (pattern, names)
    assert stat.S_IMODE(os.stat(store).st_mode) == 0o700
    for name in names:
        st = os.lstat(store / name)
        assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600, name


WRITERS = [["ingest"], ["consolidate"], ["prune", "--id", "1", "--yes"],
           ["prune", "--compact", "--yes"], ["migrate", "--header", "v2", "--yes"],
           ["mark", "1", "--pin"]]
READERS = [["recall", "--no-touch", "Oslo"], ["inspect"], ["inspect", "verify"],
           ["inspect", "record", "1"]]


@pytest.mark.parametrize("what", ["directory", "one-file"])
def test_a_store_owned_by_another_user_is_refused_with_77(tmp_path, what):
    store = tmp_path / "store"
    assert run(["ingest"], store, ROWS).returncode == 0
    if what == "directory":
        for p in [store, *store.iterdir()]:
            os.chown(p, NOBODY, NOBODY)
    else:
        os.chown(store / "payload.log", NOBODY, NOBODY)
    before = dir_digest(store)
    for args, r in zip(WRITERS + READERS, run_all(WRITERS + READERS, store, ROWS)):
        lines = assert_clean_failure(r, 77)
        assert "owned by uid 65534" in lines[0], (args, lines)
    assert dir_digest(store) == before


@pytest.mark.parametrize("name", ["extract.cache", "extract.models", "MANIFEST.tmp",
                                  "seg-000002.dat"])
def test_a_symlink_planted_where_a_file_will_be_created_is_refused(tmp_path, name):
    store = tmp_path / "store"
    assert run(["ingest"], store, ROWS).returncode == 0
    target = tmp_path / "victim"
    target.write_bytes(b"precious")
    os.symlink(target, store / name)
    before = dir_digest(store)
    argvs = [["ingest"], ["consolidate"], ["prune", "--compact", "--yes"]]
    for args, r in zip(argvs, run_all(argvs, store, ROWS)):
        lines = assert_clean_failure(r, 77)
        assert "symlink" in lines[0], (args, lines)
    assert target.read_bytes() == b"precious"
    assert dir_digest(store) == before


def test_a_segment_the_os_will_not_let_us_rewrite_is_named_not_a_raw_errno(tmp_path,
                                                                          monkeypatch):
    """`mark` and `prune --id` rewrite flag bytes in place; a read-only segment file (chmod 400
    under a writable directory) gave a bare "[Errno 13] Permission denied". The refusal is
    simulated: as root, chmod alone does not refuse."""
    import errno

    from synapse_cli import api
    from synapse_cli.engine import store as store_mod
    from synapse_cli.models.fake import FakeEmbedder

    path = tmp_path / "s"
    api.ingest(["one note", "another note"], store=path, embedder=FakeEmbedder(384))
    real_open = os.open

    def refuse(p, flags, *a, **k):
        if str(p).endswith(".dat") and flags & os.O_RDWR:
            raise PermissionError(errno.EACCES, "Permission denied", str(p))
        return real_open(p, flags, *a, **k)
    monkeypatch.setattr(store_mod.os, "open", refuse)
    with pytest.raises(api.StoreError) as info:
        api.mark([1], store=path, pin=True)
    assert "cannot rewrite records in place: Permission denied" in str(info.value)
    assert "seg-000001.dat" in str(info.value) and info.value.hint
