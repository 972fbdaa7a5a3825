"""bench/quality/locomo_noise.py: the injection schedule, the distractor pools, and a deterministic run
end to end (real MiniLM) on a small LoCoMo-format data set written here."""
from __future__ import annotations

import json
import subprocess
import sys

from conftest import ROOT, SHARED_DATA, needs_shared_data

sys.path.insert(0, str(ROOT / "bench" / "quality"))

import locomo_noise as ln  # noqa: E402
from synapse_cli.engine.inputs import Item  # noqa: E402
from synapse_cli.models.fake import FakeEmbedder  # noqa: E402


def _items(n):
    return [Item(text=f"turn {i}", where=f"t{i}", timestamp_ms=1000 * (i // 3),
                 speaker="AB"[i % 2], session=f"s{i // 3}", dia_id=f"D1:{i}") for i in range(n)]


def test_schedule_copies_the_write_policy_of_the_turn_before():
    out, used = ln.noisy_stream(_items(5), ["x", "y"], every=2, m=3)
    assert [it.text for it in out] == ["turn 0", "turn 1", "x", "y", "x", "turn 2", "turn 3",
                                       "y", "x", "y", "turn 4"]
    assert used == 6
    for j in (2, 3, 4):
        assert (out[j].speaker, out[j].session, out[j].timestamp_ms) == ("B", "s0", 0)
        assert out[j].dia_id is None and out[j].where.startswith("noise:")
    assert ln.noisy_stream(_items(5), ["x"], every=1, m=0) == (_items(5), 0)


@needs_shared_data(("hotpotqa", "hotpotqa_dev100_corpus.json"), ("locomo", "locomo_dev.json"))
def test_pools_are_fixed():
    data = SHARED_DATA
    a = ln.hotpot_pool(data, 0, "conv-26")
    assert a == ln.hotpot_pool(data, 0, "conv-26") and len(a) > 900
    assert a != ln.hotpot_pool(data, 1, "conv-26") and a != ln.hotpot_pool(data, 0, "conv-30")
    convs = json.loads((data / "locomo" / "locomo_dev.json").read_text())
    first = convs[1]["conversation"]["session_1"][0]["text"]
    assert ln.conv_pool(convs, 0)[0].startswith(first)


def test_cached_embedder_embeds_each_text_once():
    class Counting(FakeEmbedder):
        calls: list = []

        def encode(self, texts):
            self.calls.append(list(texts))
            return super().encode(texts)

    inner = Counting()
    e = ln.CachedEmbedder(inner)
    v1 = e.encode(["a", "b", "a"])
    v2 = e.encode(["b", "c"])
    assert inner.calls == [["a", "b"], ["c"]]
    assert (v1[0] == v1[2]).all() and (v1[1] == v2[0]).all()


def _tiny_data(tmp_path):
    turns = ["I adopted a puppy named Biscuit last week!", "So cute, what breed is Biscuit?",
             "A golden retriever, he loves the beach.", "I started pottery classes on Monday.",
             "My sister is getting married in June.", "Congrats to her! Where is the wedding?",
             "In Lisbon, by the river.", "I finished a marathon in Berlin."]
    conv = lambda sid, names: {  # noqa: E731
        "sample_id": sid,
        "conversation": {"speaker_a": names[0], "speaker_b": names[1],
                         "session_1_date_time": "1:56 pm on 8 May, 2023",
                         "session_1": [{"speaker": names[i % 2], "dia_id": f"D1:{i + 1}",
                                        "text": t} for i, t in enumerate(turns)]},
        "qa": [{"question": f"What is the name of {names[0]}'s puppy?", "answer": "Biscuit",
                "evidence": ["D1:1"], "category": 4},
               {"question": f"Where is {names[0]}'s sister's wedding?", "answer": "Lisbon",
                "evidence": ["D1:5", "D1:7"], "category": 1},
               {"question": f"What did {names[1]} say about skiing?", "category": 5,
                "adversarial_answer": "x"}]}
    (tmp_path / "locomo").mkdir()
    (tmp_path / "locomo" / "locomo_dev.json").write_text(json.dumps(
        [conv("c-1", ["Ana", "Ben"]), conv("c-2", ["Cy", "Di"])]))
    (tmp_path / "hotpotqa").mkdir()
    (tmp_path / "hotpotqa" / "hotpotqa_dev100_corpus.json").write_text(json.dumps({
        f"Title {i}": [f"The {w} is a river in central Europe.", f" It is {i} km long."]
        for i, w in enumerate(["Vltava", "Morava", "Drava", "Sava", "Mura", "Inn"])}))
    return tmp_path


def test_run_end_to_end_is_deterministic(tmp_path):
    data = _tiny_data(tmp_path)
    cmd = [sys.executable, str(ROOT / "bench" / "quality" / "locomo_noise.py"), "--data", str(data),
           "--every", "2", "--m", "2"]
    runs = [json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True,
                                      timeout=300).stdout) for _ in range(2)]
    a, b = runs
    assert a["modes"] == b["modes"] and a["ingest"] == b["ingest"]
    # 4 injections of 2 per conversation from 6 passages: the pool wraps, ingest deduplicates
    assert a["ingest"]["noisy-hotpot"] == {"turn_stored": 16, "distractor_stored": 12,
                                           "distractor_duplicate": 4}
    assert set(a["modes"]) == set(ln.MODES)
    for mode, by_goal in a["modes"].items():
        for g in ("no_goal", "goal"):
            clean = by_goal[g]["clean"]
            assert clean["distractors_in_top10_per_query"] == 0
            for cond in ("noisy-hotpot", "noisy-conv"):
                drop = a["noise_drop"][mode][g][cond]
                assert drop == round(clean["recall@10_all_1_4"]
                                     - by_goal[g][cond]["recall@10_all_1_4"], 2)
    t = a["target_synapse_goal_drop_at_most_half_of_vector"]["noisy-hotpot"]
    assert t["met"] == (t["synapse_with_goal_drop"] <= t["vector_drop"] / 2)
