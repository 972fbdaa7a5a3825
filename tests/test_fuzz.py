"""Hostile files: every reader of store_format/ and the recall path over a damaged store raise
a typed StoreError, never anything else, never crash, hang or grow without bound.

bench/reliability/fuzz.py holds the targets. Here: every saved finding (tests/fuzz_regressions/) and a
fixed corpus of mutations of real files are replayed in-process, then a short coverage-guided
atheris run over all targets at once (bench/reliability/fuzz.py --seconds N for the long runs).
"""
from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench" / "reliability"))
import fuzz  # noqa: E402

REGRESSIONS = Path(__file__).resolve().parent / "fuzz_regressions"


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    w = tmp_path_factory.mktemp("fuzz")
    fuzz.setup(w)
    return w


def mutations(seed: bytes, rnd: random.Random, n: int) -> list[bytes]:
    """Truncations, bit flips, overwritten u32/u64 fields and inserted bytes of `seed`."""
    out = []
    for _ in range(n):
        b = bytearray(seed)
        kind = rnd.randrange(4)
        if kind == 0 and len(b) > 1:
            del b[rnd.randrange(1, len(b)):]
        elif kind == 1 and len(b) > 1:
            for _ in range(rnd.randint(1, 4)):
                i = rnd.randrange(1, len(b))
                b[i] ^= 1 << rnd.randrange(8)
        elif kind == 2 and len(b) > 9:
            i = rnd.randrange(1, len(b) - 8)
            b[i:i + 8] = rnd.choice([b"\xff" * 8, b"\0" * 8, (2**31).to_bytes(8, "little"),
                                     rnd.randbytes(8)])
        else:
            i = rnd.randrange(1, len(b) + 1)
            b[i:i] = rnd.randbytes(rnd.randint(1, 64))
        out.append(bytes(b))
    return out


def test_saved_findings_replay(work):
    files = sorted(REGRESSIONS.glob("*.bin"))
    res = fuzz.replay(files)
    assert not {k: v for k, v in res.items() if v}, res


@pytest.mark.parametrize("target", list(fuzz.TARGETS))
def test_mutated_real_files_give_typed_errors(work, target):
    rnd = random.Random(target)
    n = 60 if target == "store" else 300
    for s in fuzz.seeds(target):
        fuzz.check(target, s)  # the valid file reads
        for data in mutations(s, rnd, n // max(1, len(fuzz.seeds(target)) // 4 + 1)):
            fuzz.check(target, data)


def test_coverage_guided_run_finds_nothing(tmp_path):
    res = fuzz.fuzz("all", 20, tmp_path, save=REGRESSIONS)  # a finding stays as a regression
    print({k: v for k, v in res.items() if k != "log_tail"})
    assert res["rc"] == 0 and not res["findings"], res["log_tail"]
    assert res.get("execs", 0) > 200, res
