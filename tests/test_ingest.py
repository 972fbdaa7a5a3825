"""`synapse ingest` end to end with the real embedder: input forms, dedup, gating, errors,
transactions, kill -9 and concurrent writers."""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from store_format import flags as fl
from synapse_cli.engine.inputs import chunk_document
from synapse_cli.engine.store import Store

SYNAPSE = str(Path(sys.executable).with_name("synapse"))
ROOT = Path(__file__).resolve().parents[1]


def run(store, *args, stdin: bytes | str = b"", check_rc: int | None = 0):
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    env.pop("NO_COLOR", None)
    data = stdin.encode() if isinstance(stdin, str) else stdin
    p = subprocess.run([SYNAPSE, "--store", str(store), *args], input=data,
                       capture_output=True, env=env, timeout=300)
    if check_rc is not None:
        assert p.returncode == check_rc, (p.returncode, p.stderr.decode())
    return p


def lines(p) -> list[dict]:
    return [json.loads(x) for x in p.stdout.decode().splitlines() if x.strip()]


def texts(store) -> list[str]:
    with Store.open(store) as s:
        return [s.body(int(i))["text"] for i in s.ids]


def test_ndjson_fields_reach_header_and_payload(tmp_path):
    store = tmp_path / "st"
    item = {"text": "Deploy failed at 3am", "timestamp": "2026-06-02T18:05:00Z", "speaker": "ops",
            "session": "incident-7", "source": "pager", "importance": 4.0, "valence": -0.5,
            "tags": ["prod"], "pinned": True, "resolved": False, "type": "procedural",
            "dia_id": "D1:1", "meta": {"host": "db1"}}
    out = lines(run(store, "ingest", stdin=json.dumps(item) + "\n"))
    assert out[0]["status"] == "stored" and out[0]["id"] == 1
    with Store.open(store) as s:
        h = s.header(1)
        body = s.body(1)
    assert h.timestamp_ms == 1780423500000
    assert h.importance == 4.0 and h.valence == round(-0.5 * 127)
    assert h.arousal == min(255, abs(h.valence) * 2)  # derived from valence (seed 004)
    assert fl.memory_type(h.flags) == fl.MemoryType.PROCEDURAL
    assert fl.is_pinned(h.flags) and not fl.is_resolved(h.flags)
    assert 0 < h.storage_strength <= 2.0  # utility u kept as 2u
    assert body["speaker"] == "ops" and body["session"] == "incident-7"
    assert body["dia_id"] == "D1:1" and body["meta"] == {"host": "db1"}
    assert len(body["md5"]) == 32
    from store_format.tags import contains, encode_tags
    assert contains(h.synaptic_tags, encode_tags(["prod", "speaker:ops", "session:incident-7"]))


def test_duplicates_and_temporal_edges_across_invocations(tmp_path):
    store = tmp_path / "st"
    demo = (ROOT / "fixtures" / "demo.ndjson").read_bytes()
    first = lines(run(store, "ingest", stdin=demo))
    assert [o["status"] for o in first] == ["stored"] * 12
    again = lines(run(store, "ingest", stdin=demo))
    assert [o["status"] for o in again] == ["duplicate"] * 12
    assert [o["id"] for o in again] == [o["id"] for o in first]
    # Whitespace and case do not make a new memory (same speaker and session, no time given:
    # any time).
    same = {"text": "  MAYA finished the Berlin   marathon in 3 hours 52 minutes. ",
            "speaker": "Caroline", "session": "s3"}
    assert lines(run(store, "ingest", stdin=json.dumps(same)))[0]["status"] == "duplicate"
    # A new turn of session s3 links to the last one stored by the earlier invocation.
    new = lines(run(store, "ingest", stdin=json.dumps({"text": "Pixel learned to sit.",
                                                        "session": "s3"})))
    with Store.open(store) as s:
        g = s.graph()
        assert s.count == 13
    rows = np.repeat(g.node_ids, np.diff(g.indptr.astype(np.int64)))
    pairs = set(zip(rows.tolist(), g.node_ids[g.indices.astype(np.int64)].tolist()))
    assert (12, new[0]["id"]) in pairs and (new[0]["id"], 12) in pairs
    assert (1, 2) in pairs and (5, 6) not in pairs  # sessions s1 and s2 are not chained


def test_text_and_doc_formats(tmp_path):
    store = tmp_path / "st"
    out = lines(run(store, "ingest", "--format", "text", stdin="first line\n\nsecond line\n"))
    assert [o["status"] for o in out] == ["stored", "stored"]
    doc = tmp_path / "notes.txt"
    body = ("The quick brown fox jumps over the lazy dog. " * 80)[:3000]
    doc.write_text(body)
    out = lines(run(store, "ingest", "--format", "doc", str(doc)))
    spans = chunk_document(body)
    assert spans == [(0, 1200), (1000, 2200), (2000, 3000)]
    assert len(out) == 3
    with Store.open(store) as s:
        for o, (a, b) in zip(out, spans):
            if o["status"] == "stored":
                assert s.body(o["id"])["chunk"] == [a, b]
                assert s.body(o["id"])["text"] == body[a:b]
    hit = lines(run(store, "recall", "quick brown fox", "--k", "1"))[0]["results"][0]
    assert hit["source"] == str(doc) and hit["chunk"] in [list(x) for x in spans]


def test_malformed_line_rejects_whole_input(tmp_path):
    store = tmp_path / "st"
    run(store, "ingest", stdin='{"text": "kept from before"}\n')
    bad = '{"text": "a"}\n{"text": "b", "valence": 7}\n{"text": "c"}\n'
    p = run(store, "ingest", stdin=bad, check_rc=65)
    err = p.stderr.decode()
    assert "-:2" in err and "valence" in err and "Traceback" not in err
    assert p.stdout == b""
    assert texts(store) == ["kept from before"]
    for broken, needle in [('{"text": 5}', "string"), ("not json", "invalid JSON"),
                           ('{"txt": "x"}', "unknown field"), ('{"text": "x", "timestamp": "May"}', "ISO 8601"),
                           ('{"text": "   "}', "empty"), ("[1, 2]", "JSON object"),
                           ('{"text": "x", "tags": "a"}', "tags"), ('{"text": NaN}', "invalid JSON"),
                           # ingest alone sets the speaker:/session:/source: tags
                           ('{"text": "x", "speaker": "bob", "tags": ["Speaker:Alice"]}',
                            "reserved"),
                           ('{"text": "x", "tags": ["session:s1"]}', "reserved"),
                           ('{"text": "x", "tags": [" "]}', "empty tag"),
                           # a session beyond 2^64 became the float 1e+20, so two sessions
                           # were one and a line was dropped as a duplicate (helper)
                           ('{"text": "x", "session": 100000000000000000001}', "too large")]:
        p = run(store, "ingest", stdin=broken + "\n", check_rc=65)
        assert needle in p.stderr.decode(), (broken, p.stderr.decode())
    assert texts(store) == ["kept from before"]


def test_an_item_without_a_time_repeats_one_at_any_time_within_a_batch_too(tmp_path):
    """Across two runs the second line was a duplicate, in one run it was stored (helper)."""
    store = tmp_path / "st"
    p = run(store, "ingest", stdin='{"text": "hello there", "timestamp": "2026-01-01T00:00:00Z"}\n'
                                   '{"text": "hello there"}\n'
                                   '{"text": "hello there", "timestamp": "2026-01-02T00:00:00Z"}\n')
    assert [(o["status"], o.get("id")) for o in lines(p)] == [("stored", 1), ("duplicate", 1),
                                                             ("stored", 2)]


def test_skip_invalid_stores_good_lines(tmp_path):
    store = tmp_path / "st"
    p = run(store, "ingest", "--skip-invalid", stdin='{"text": "a1"}\n{"oops": 1}\n{"text": "b2"}\n')
    out = lines(p)
    assert [o["status"] for o in out] == ["stored", "invalid", "stored"]  # input order
    assert [o["where"] for o in out] == ["-:1", "-:2", "-:3"]
    assert texts(store) == ["a1", "b2"]


def test_goal_gating(tmp_path):
    store = tmp_path / "st"
    items = [{"text": "The database migration to Postgres 16 failed on the orders table."},
             {"text": "My cat likes to sleep on the warm laptop keyboard."}]
    out = lines(run(store, "ingest", "--goal", "database operations and outages",
                    stdin="\n".join(json.dumps(i) for i in items)))
    assert out[0]["status"] == "stored" and out[1]["status"] == "gated"
    assert out[0]["goal_similarity"] > out[1]["goal_similarity"]
    assert texts(store) == [items[0]["text"]]


def test_missing_file_and_bad_format(tmp_path):
    p = run(tmp_path / "st", "ingest", str(tmp_path / "nope.ndjson"), check_rc=66)
    assert "no such file" in p.stderr.decode()
    run(tmp_path / "st", "ingest", "--format", "xml", check_rc=2)


def test_kill_9_during_large_ingest(tmp_path):
    """What ingest reported stored is present; the store verifies; nothing half-written."""
    store = tmp_path / "st"
    rng = random.Random(7)
    acknowledged: list[str] = []
    for trial in range(4):
        batch = [json.dumps({"text": f"trial {trial} event {i} {rng.random()}"}) for i in range(300)]
        env = dict(os.environ, HF_HUB_OFFLINE="1")
        proc = subprocess.Popen([SYNAPSE, "--store", str(store), "ingest", "--batch", "100"],
                                stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        proc.stdin.write("\n".join(batch).encode())
        proc.stdin.close()
        time.sleep(rng.uniform(0.3, 4.0))
        proc.send_signal(signal.SIGKILL)
        out = proc.stdout.read()
        proc.wait()
        reported = [json.loads(x) for x in out.decode().splitlines() if x.strip()]
        if reported:
            acknowledged += [json.loads(batch[int(o["where"].split(":")[1]) - 1])["text"]
                             for o in reported if o["status"] == "stored"]
        verify = run(store, "inspect", "verify", check_rc=None) if (store / "MANIFEST").exists() else None
        if verify is not None:
            assert verify.returncode == 0, verify.stderr.decode()
            stored = texts(store)
            assert len(stored) == len(set(stored))
            assert set(acknowledged) <= set(stored)
            # All or nothing per batch: each trial's input is stored as whole batches of 100.
            for t in range(trial + 1):
                n = sum(1 for x in stored if x.startswith(f"trial {t} "))
                assert n in (0, 100, 200, 300)


def test_two_concurrent_ingests(tmp_path):
    store = tmp_path / "st"
    run(store, "ingest", stdin='{"text": "seed"}\n')
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    procs = []
    for w in range(2):
        data = "\n".join(json.dumps({"text": f"writer {w} item {i}"}) for i in range(40))
        procs.append(subprocess.Popen([SYNAPSE, "--store", str(store), "--lock-timeout", "120",
                                       "ingest"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, env=env))
        procs[-1].stdin.write(data.encode())
        procs[-1].stdin.close()
    for p in procs:
        assert p.wait(timeout=300) == 0, p.stderr.read().decode()
    stored = texts(store)
    assert len(stored) == 81 and len(set(stored)) == 81
    run(store, "inspect", "verify")


def test_one_users_statement_is_never_a_duplicate_of_anothers(tmp_path):
    """Tags, session and source are part of what a duplicate is: the same words from another
    user (tag) or another session are stored for them, so a recall filtered to that user finds
    them; the same item again is still a duplicate, and in one batch too."""
    store = tmp_path / "st"
    pin = {"text": "My bank PIN is 4821.", "speaker": "user", "tags": ["user:ana"]}
    rows = [pin, dict(pin, tags=["user:bob"]), dict(pin, session="s2"), dict(pin, tags=["USER:ANA"]),
            dict(pin, tags=["user:bob"])]
    out = lines(run(store, "ingest", stdin="\n".join(json.dumps(r) for r in rows)))
    assert [o["status"] for o in out] == ["stored", "stored", "stored", "duplicate", "duplicate"]
    assert out[3]["id"] == out[0]["id"] and out[4]["id"] == out[1]["id"]
    bob = json.loads(run(store, "recall", "What is my bank PIN?", "--tag", "user:bob",
                         "--no-touch", "--json").stdout)
    assert [r["id"] for r in bob["results"]] == [out[1]["id"]]


def test_a_statement_made_again_after_prune_is_stored_again(tmp_path):
    """A record in the trash holds nothing: the same item after `prune` is a new record, not a
    "duplicate" of the trashed one (which recall never returns)."""
    store = tmp_path / "st"
    item = json.dumps({"text": "My favourite colour is green.", "speaker": "user"})
    first = lines(run(store, "ingest", stdin=item))[0]
    run(store, "prune", "--id", str(first["id"]), "--yes")
    again = lines(run(store, "ingest", stdin=item))[0]
    assert again["status"] == "stored" and again["id"] != first["id"]
    res = json.loads(run(store, "recall", "What is my favourite colour?", "--no-touch",
                         "--json").stdout)
    assert [r["id"] for r in res["results"]] == [again["id"]]


def test_a_restatement_by_someone_else_or_later_is_its_own_record(tmp_path):
    """Dedup keeps time: only the same text from the same speaker at the same time (or with no
    time given) is a duplicate; a batch may still collapse identical lines of one speaker."""
    store = tmp_path / "st"
    first = {"text": "standup is at 9:30", "speaker": "Priya", "timestamp": "2026-09-01T09:00:00Z"}
    rows = [first,
            dict(first, speaker="Jonah", timestamp="2026-11-01T09:00:00Z"),  # another speaker
            dict(first, timestamp="2026-11-02T09:00:00Z"),                   # later
            {"text": "ok", "speaker": "Jonah", "timestamp": "2026-11-03T09:00:00Z"},
            {"text": "OK ", "speaker": "Priya", "timestamp": "2026-11-03T09:01:00Z"},
            {"text": "ok", "speaker": "Jonah", "timestamp": "2026-11-03T09:00:00Z"}]  # same
    out = lines(run(store, "ingest", stdin="\n".join(json.dumps(r) for r in rows)))
    assert [o["status"] for o in out] == ["stored"] * 5 + ["duplicate"]
    again = lines(run(store, "ingest", stdin="\n".join(json.dumps(r) for r in rows)))
    assert [o["status"] for o in again] == ["duplicate"] * 6
    assert [o["id"] for o in again][:5] == [o["id"] for o in out][:5]


def test_two_spellings_of_one_tag_are_one_tag(tmp_path):
    """["a", "A"] were both kept in the body though they are one tag (helper)."""
    from synapse_cli.engine.inputs import item_from_object

    assert item_from_object({"text": "x", "tags": ["a", "B", "A", "b ", "c"]}, "w").tags == \
        ["a", "B", "c"]


def test_rfc3339_lowercase_t_and_z(tmp_path):
    """RFC 3339 allows "t" and "z"; they were "not ISO 8601" (helper)."""
    from synapse_cli.engine.inputs import parse_timestamp

    assert parse_timestamp("2026-01-01t00:00:00z", "w") == \
        parse_timestamp("2026-01-01T00:00:00Z", "w") == 1767225600000


def test_iso_times_are_exact_and_a_log_stored_a_millisecond_early_is_still_a_duplicate(tmp_path):
    """ISO times went through a float: "2004-03-15T07:55:47.472Z" was stored as .471 (about
    0.6% of times with a fraction of a second). They are exact now, and a line that an older
    synapse stored a millisecond early is a duplicate of the same line ingested again, not a
    second record."""
    import datetime as dt

    from synapse_cli.engine.inputs import legacy_ms, parse_timestamp

    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    rng = random.Random(7)
    for ms in [1079337347472, *(rng.randrange(0, 253402300799999) for _ in range(2000))]:
        iso = (epoch + dt.timedelta(milliseconds=ms)).isoformat()
        assert parse_timestamp(iso, "w") == ms, iso
        assert legacy_ms(ms) == int(dt.datetime.fromisoformat(iso).timestamp() * 1000)
    assert legacy_ms(1079337347472) == 1079337347471  # what the older synapse stored

    store = tmp_path / "st"
    line = {"text": "The boiler was serviced.", "speaker": "Ana"}
    old = lines(run(store, "ingest", stdin=json.dumps({**line, "timestamp": 1079337347471})))[0]
    again = lines(run(store, "ingest", stdin=json.dumps(
        {**line, "timestamp": "2004-03-15T07:55:47.472Z"})))[0]
    assert (again["status"], again["id"]) == ("duplicate", old["id"])
    later = lines(run(store, "ingest", stdin=json.dumps(
        {**line, "timestamp": "2004-03-15T07:55:47.473Z"})))[0]
    assert later["status"] == "stored"  # another time is still another statement


@pytest.mark.parametrize("before, after", [("\n\n", '{"text": "x"}'),
                                           ('{"text": "fine"}\n', '{"text": broken')])
def test_input_that_changes_between_the_check_and_the_store_pass_exits_65(tmp_path, before,
                                                                           after):
    """The input is read twice: a file rewritten in place after the check crashed ingest
    (nothing valid at the check, then items: AttributeError, exit 70) or was stored in part
    with "invalid" lines and exit 0 without --skip-invalid (hostile pass)."""
    src = tmp_path / "in.ndjson"
    src.write_text(before)
    hook = (f"import sys\nfrom synapse_cli.commands import ingest_cmd, main\n"
            f"orig = ingest_cmd._check_all\n"
            f"def hooked(*a):\n    n = orig(*a)\n    open({str(src)!r}, 'w').write({after!r})\n"
            f"    return n\n"
            f"ingest_cmd._check_all = hooked\nsys.argv = ['synapse', '--store', "
            f"{str(tmp_path / 'st')!r}, 'ingest', {str(src)!r}]\nsys.exit(main.run())\n")
    p = subprocess.run([sys.executable, "-c", hook], capture_output=True, text=True,
                       env=dict(os.environ, HF_HUB_OFFLINE="1"), timeout=300)
    assert p.returncode == 65, p.stderr
    assert "changed while being ingested" in p.stderr and "Traceback" not in p.stderr
