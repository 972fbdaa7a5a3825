"""Big inputs: documents read a block at a time, input checked whole before anything is
stored, then stored in batches that each commit, so an interrupted ingest keeps every batch
it printed and a rerun stores only the rest (real embedder, real signals)."""
from __future__ import annotations

import io
import json
import random
import signal
import subprocess

import pytest

from conftest import SYNAPSE, assert_clean_failure, cli_env, graph_dict, run_cli
from synapse_cli.engine.inputs import (BOM, InputError, chunk_document, iter_lines,
                                       parse_document_stream)
from synapse_cli.engine.store import Store


def test_streamed_document_chunks_as_the_whole_text_would():
    rnd = random.Random(1)
    alphabet = "abc déf 柯基 🔥\n "
    for trial in range(150):
        n = rnd.choice([0, 1, 1199, 1200, 1201, 2199, 2200, 2201, rnd.randrange(9000)])
        text = "".join(rnd.choice(alphabet) for _ in range(n))
        data = (BOM if trial % 3 == 0 else b"") + text.encode()
        want = [((a, b), text[a:b]) for a, b in chunk_document(text) if text[a:b].strip()]
        for block in (3, 7, 1000, 1 << 20):  # block edges inside characters and chunks
            got = [(x.chunk, x.text) for x in parse_document_stream(io.BytesIO(data), "d", block)]
            assert got == want, (n, block)
        if n > 10:  # a bad byte is named by its offset in the file, whatever the block
            pos = rnd.randrange(len(data))
            bad = data[:pos] + b"\xff" + data[pos:]
            with pytest.raises(UnicodeDecodeError) as exc:
                bad.decode()
            for block in (3, 7, 1 << 20):
                errors = [x for x in parse_document_stream(io.BytesIO(bad), "d", block)
                          if isinstance(x, InputError)]
                assert [e.where for e in errors] == [f"d:byte {exc.value.start}"]


def test_lines_read_in_blocks_split_as_splitlines():
    rnd = random.Random(2)
    for _ in range(300):
        data = bytes(rnd.choice(b"ab\r\n") for _ in range(rnd.randrange(50)))
        for block in (1, 2, 3, 100):  # a \r\n split across two blocks is one line end
            assert list(iter_lines(io.BytesIO(data), block)) == data.splitlines(), (data, block)


def _items(n: int) -> str:
    return "".join(json.dumps({"text": f"note {i}: the {w} shipment left dock {i % 7}",
                               "session": "s1", "speaker": "ana"}) + "\n"
                   for i, w in zip(range(n), ["blue", "red", "green", "amber"] * n))


def test_batches_store_what_one_transaction_stores(tmp_path):
    first = _items(11).splitlines(keepends=True)[0]
    data = _items(11) + first  # a repeat of line 1 in the last batch, after earlier commits
    stores = []
    for batch in (3, 256):
        store = tmp_path / f"b{batch}"
        r = _ingest(store, data, "--batch", str(batch))
        assert r.returncode == 0, r.stderr
        out = [json.loads(x) for x in r.stdout.splitlines()]
        assert [x["id"] for x in out] == list(range(1, 12)) + [1]
        assert out[-1]["status"] == "duplicate"
        stores.append(store)
    with Store.open(stores[0]) as a, Store.open(stores[1]) as b:
        assert [a.body(i)["text"] for i in a.ids] == [b.body(i)["text"] for i in b.ids]
        assert graph_dict(a) == graph_dict(b)  # the session's temporal chain crosses batches
        assert len(graph_dict(a)) == 2 * 10


def _ingest(store, data: str, *args):
    return subprocess.run([str(SYNAPSE), "ingest", *args], input=data, text=True,
                          capture_output=True, env=cli_env(store), timeout=300)


def test_piped_input_is_checked_whole_before_a_batch_is_stored(tmp_path):
    """A bad last line of a pipe: nothing stored, even though earlier batches were valid."""
    store = tmp_path / "st"
    r = _ingest(store, _items(9) + '{"text": 5}\n', "--batch", "2")
    assert "-:10" in assert_clean_failure(r, 65)[0]
    assert r.stdout == "" and not (store / "MANIFEST").exists()


def _document(path, n_chunks: int) -> None:
    rnd = random.Random(5)
    words = ["harbor", "ledger", "violet", "engine", "cedar", "meadow", "signal", "copper",
             "lantern", "orbit", "quartz", "saddle", "tunnel", "walnut", "zephyr", "bramble"]
    path.write_text(" ".join(f"{rnd.choice(words)}{rnd.randrange(1000)}"
                             for _ in range(n_chunks * 1000 // 10)))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["SIGINT", "kill-9"])
def test_interrupted_document_keeps_its_printed_batches(tmp_path, sig):
    doc, store = tmp_path / "big.txt", tmp_path / "st"
    _document(doc, 200)  # long enough that the signal lands mid-ingest on an idle machine
    n_chunks = len(chunk_document(doc.read_text()))
    # SIGINT as a terminal sends it: a shell's background job (CI run with `&`) starts with it
    # ignored, and Python keeps an ignored SIGINT ignored
    proc = subprocess.Popen([str(SYNAPSE), "ingest", "--format", "doc", "--batch", "4", str(doc)],
                            env=cli_env(store), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    printed = []
    while len(printed) < 8:  # two batches acknowledged
        line = proc.stdout.readline()
        assert line, proc.stderr.read()
        printed.append(json.loads(line))
    proc.send_signal(sig)
    rest, err = proc.communicate(timeout=120)
    printed += [json.loads(x) for x in rest.splitlines()]
    if sig == signal.SIGINT:
        assert proc.returncode == 130, err
        assert "interrupted" in err and "Traceback" not in err and "run the same command" in err
    else:
        assert proc.returncode == -signal.SIGKILL
    assert len(printed) % 4 == 0 and len(printed) < n_chunks  # whole batches, not all of them
    assert run_cli(["inspect", "verify"], store).returncode == 0
    with Store.open(store) as s:
        for row in printed:  # every acknowledged chunk is stored, whole
            assert row["status"] == "stored" and s.body(row["id"])["chunk"] is not None
        kept = s.count  # a batch committed just before the signal may not have been printed
    assert kept % 4 == 0 and len(printed) <= kept < n_chunks
    again = run_cli(["ingest", "--format", "doc", "--batch", "4", doc], store, timeout=900)
    assert again.returncode == 0, again.stderr
    rows = [json.loads(x) for x in again.stdout.splitlines()]
    assert [r["status"] for r in rows[:kept]] == ["duplicate"] * kept
    assert [r["id"] for r in rows[:len(printed)]] == [r["id"] for r in printed]
    assert {r["status"] for r in rows[kept:]} == {"stored"}
    with Store.open(store) as s:
        assert s.count == n_chunks


def test_a_reader_that_stops_early_does_not_stop_the_ingest(tmp_path):
    """`synapse ingest big.ndjson | head -1`: the batches after the reader left are stored too
    (their lines are dropped), exit 0; `> /dev/full`: everything stored, then exit 74."""
    store = tmp_path / "st"
    proc = subprocess.Popen([str(SYNAPSE), "ingest", "--batch", "3"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env(store))
    proc.stdin.write(_items(12).encode())
    proc.stdin.close()
    assert json.loads(proc.stdout.readline())["id"] == 1
    proc.stdout.close()
    assert proc.wait(timeout=300) == 0, proc.stderr.read()
    with Store.open(store) as s:
        assert s.count == 12
    with open("/dev/full", "w") as full:
        r = subprocess.run([str(SYNAPSE), "ingest", "--batch", "3"], input=_items(15), text=True,
                           stdout=full, stderr=subprocess.PIPE, env=cli_env(tmp_path / "b"))
    assert r.returncode == 74 and "only the output was lost" in r.stderr, r.stderr
    with Store.open(tmp_path / "b") as s:
        assert s.count == 15
