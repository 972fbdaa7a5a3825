"""The writer lock (docs/FORMAT.md section 8), exercised with real processes."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from store_format import errors
from store_format.lock import WriterLock

ROOT = Path(__file__).resolve().parent.parent

# A child process that tries to take the lock and prints what happened as one JSON line.
CONTENDER = textwrap.dedent("""
    import json, sys, time
    from store_format import errors
    from store_format.lock import WriterLock
    t0 = time.monotonic()
    try:
        with WriterLock(sys.argv[1], float(sys.argv[2])) as lock:
            out = {"ok": True, "waited": lock.waited_seconds}
    except errors.LockTimeout as exc:
        out = {"ok": False, "waited": exc.waited_seconds, "message": str(exc), "path": exc.path}
    out["elapsed"] = time.monotonic() - t0
    print(json.dumps(out))
""")

# A child process that holds the lock until its stdin closes.
HOLDER = textwrap.dedent("""
    import sys
    from store_format.lock import WriterLock
    with WriterLock(sys.argv[1], 5):
        print("locked", flush=True)
        sys.stdin.read()
""")


def run(script: str, *args, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", script, *map(str, args)], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True, **kw)


def contend(store, timeout) -> dict:
    p = run(CONTENDER, store, timeout)
    out, _ = p.communicate(timeout=30)
    return json.loads(out)


def test_second_process_times_out_then_gets_lock(tmp_path):
    with WriterLock(tmp_path, 1) as held:
        assert held.waited_seconds < 0.5
        assert stat.S_IMODE(os.stat(tmp_path / "LOCK").st_mode) == 0o600
        r = contend(tmp_path, 0.5)
        assert r["ok"] is False
        assert 0.5 <= r["waited"] <= 0.5 + 0.3
        assert r["path"] == str(tmp_path / "LOCK")
        assert "--lock-timeout" in r["message"]
        if os.path.exists("/proc/locks"):
            assert f"pid {os.getpid()}" in r["message"]  # says whom to wait for
    r = contend(tmp_path, 0.5)
    assert r["ok"] is True and r["waited"] < 0.3


def test_waiter_acquires_when_holder_releases(tmp_path):
    holder = run(HOLDER, tmp_path, stdin=subprocess.PIPE)
    try:
        assert holder.stdout.readline().strip() == "locked"
        waiter = run(CONTENDER, tmp_path, 10)
        time.sleep(0.4)
        holder.stdin.close()  # holder exits, the kernel drops its flock
        out, _ = waiter.communicate(timeout=30)
        r = json.loads(out)
        assert r["ok"] is True
        assert 0.2 <= r["waited"] < 5
    finally:
        holder.kill()
        holder.wait()


def test_killed_holder_releases(tmp_path):
    holder = run(HOLDER, tmp_path, stdin=subprocess.PIPE)
    assert holder.stdout.readline().strip() == "locked"
    with pytest.raises(errors.LockTimeout) as exc:
        WriterLock(tmp_path, 0).acquire()
    assert exc.value.waited_seconds < 0.3
    holder.kill()  # SIGKILL: no cleanup code runs, the lock still goes away
    holder.wait()
    with WriterLock(tmp_path, 2) as lock:
        assert lock.waited_seconds < 1


def test_lock_symlink_refused(tmp_path):
    os.symlink(tmp_path / "elsewhere", tmp_path / "LOCK")
    with pytest.raises(errors.UnsafeStore):
        WriterLock(tmp_path, 0).acquire()
    assert not (tmp_path / "elsewhere").exists()


def test_missing_store(tmp_path):
    with pytest.raises(errors.StoreNotFound):
        WriterLock(tmp_path / "nope", 0).acquire()


def test_release_is_idempotent(tmp_path):
    lock = WriterLock(tmp_path, 0).acquire()
    lock.release()
    lock.release()
    with WriterLock(tmp_path, 0):
        pass


@pytest.mark.parametrize("dir_writable", [True, False])
def test_a_read_only_lock_file_is_named_in_the_hint(tmp_path, monkeypatch, dir_writable):
    # a LOCK file without write access in a writable directory: the hint said the directory
    # needed write access. The refusal is simulated (root ignores file modes).
    import errno

    (tmp_path / "LOCK").write_text("")
    real_open = os.open

    def refuse(path, *a, **k):
        if str(path).endswith("LOCK"):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, *a, **k)
    monkeypatch.setattr(os, "open", refuse)
    if not dir_writable:
        monkeypatch.setattr(os, "access", lambda p, mode: False)
    with pytest.raises(errors.StoreIOError) as info:
        WriterLock(tmp_path, 0).acquire()
    if not dir_writable:
        assert "write access to its directory" in info.value.hint
    else:
        assert "write access to its LOCK file (chmod u+w LOCK)" in info.value.hint
