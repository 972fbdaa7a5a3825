"""The deterministic half of extraction: candidate spans, typing rules, speaker entities, the
answer grammar; the salience filter with the real MiniLM embedder; one real-model extraction.
(Quality is measured by bench/quality/extract_quality.py; consolidation with the real model is tested in
test_consolidate.py.)"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from synapse_cli.models.extractor import (MODEL_TYPES, LlamaExtractor, candidate_spans,
                                          clean_result, grammar_for, known_types, rule_type,
                                          speaker_entities, speakers, window_text)
from synapse_cli.models.salience import MIN_SALIENCE, keep_salient, salience, turn_bodies

ROOT = Path(__file__).resolve().parents[1]


def cands(*turns: str, limit: int = 20) -> list[str]:
    return candidate_spans(window_text(list(turns)), limit=limit)


def test_speakers_and_their_short_forms_are_not_candidates():
    c = cands("Caroline: Hey Mel! I saw Oliver at the park.", "Melanie: Hi Caroline!")
    assert "Oliver" in c
    assert not {"Caroline", "Melanie", "Mel"} & set(c)
    assert speakers(["Caroline: a", "Melanie: b", "Caroline: c"]) == ["Caroline", "Melanie"]


def test_sentence_initial_words_are_not_names_unless_they_recur_or_are_possessive():
    c = cands("Tim: Thanks! Visiting castles is my dream. Oliver's hilarious.",
              "John: Yoga is great. I do yoga daily.")
    assert "Thanks" not in c and "Visiting" not in c
    assert "Oliver" in c           # possessive at sentence start: a name
    assert "Yoga" not in c         # written lower case elsewhere: a common noun


def test_proper_names_titles_and_connectors():
    c = cands('Tim: "The Name of the Wind" is great. I read Becoming Nicole by Amy Ellis Nutt.',
              "John: We explored the Pacific Northwest and saw the Minnesota Wolves play.",
              "Tim: I loved 'Becoming Nicole' too.")
    assert {"The Name of the Wind", "Amy Ellis Nutt", "Pacific Northwest",
            "Minnesota Wolves", "Becoming Nicole"} <= set(c)
    assert "Name" not in c and "Wind" not in c  # inside the quoted title


def test_names_joined_by_an_ampersand_and_without_a_leading_verb():
    """Found on the agent-use wedding chat: "Smoke & Salt" became the two nodes "Smoke" and
    "Salt", "Booked Hollins Barn!!" the person "Booked Hollins Barn"."""
    c = cands("Carmen: Smoke & Salt are doing the food. Booked Hollins Barn!!",
              "Aisha: Finally Dunmore Hall rang back, and Hettie at Bloom & Bramble",
              "Rob: me & Aisha went with Olu & Aisha's mum")
    assert {"Smoke & Salt", "Hollins Barn", "Dunmore Hall", "Bloom & Bramble"} <= set(c)
    assert not {"Booked Hollins Barn", "Finally Dunmore Hall", "Smoke", "Salt"} & set(c)
    assert not any("Aisha" in x for x in c)  # a speaker is never joined into a name
    # "&" joins a shop's name of common words, not two people or two shops; the cut leaves
    # two words at least and never a first name or a title
    c = cands("Ana: Jess & Tom went to Lidl & Aldi. Drew Barrymore was in it. Kill Bill is on")
    assert {"Jess", "Tom", "Lidl", "Aldi", "Drew Barrymore", "Kill Bill"} <= set(c)


def test_chat_shouting_and_filler_are_no_candidates():
    """The five-a-side chat's nodes included "AAAAAAAA WIN", "yep" and "league tbh"."""
    c = cands("Mikey: AAAAAAAA WIN!! cheers lads, yep the league tbh is a joke",
              "Jonno: RSVP to the BBC by Friday")
    assert not {"AAAAAAAA WIN", "AAAAAAAA", "WIN", "yep", "tbh", "league tbh", "cheers",
                "lads"} & set(c)
    assert {"RSVP", "BBC"} <= set(c)  # acronyms the lexicon does not know are names
    assert "US" in cands("Ana: I moved to the US last year")  # a short one too


def test_names_beyond_ascii_and_two_names_joined_by_and():
    """A review found that a token had to start with an ASCII letter: "Élodie" was never a
    candidate and "ÉCOLE" became "COLE"."""
    c = cands("Ana: I met Élodie and Zoë at the École des Beaux-Arts. Łukasz lives in Kraków.",
              "Ben: reading Pride and Prejudice from Marks and Spencer")
    assert {"Élodie", "Zoë", "École des Beaux-Arts", "Łukasz", "Kraków",
            "Pride and Prejudice", "Marks and Spencer"} <= set(c)
    assert "Élodie and Zoë" not in c  # two people, not one name


def test_noun_phrases_after_determiners_drop_adjectives_and_generic_words():
    c = cands("Caroline: I went to a LGBTQ support group yesterday.",
              "Maria: I started volunteering at a local dog shelter once a month.",
              "John: The donations even helped get a brand new fire truck! Such a great time.")
    assert "LGBTQ support group" in c
    assert "local dog shelter" in c
    assert "fire truck" in c or "new fire truck" in c
    assert "great time" not in c and "time" not in c  # generic


def test_activities_and_coordination():
    c = cands("Melanie: I just took my fam camping in the mountains last week.",
              "Joanna: Cooking and baking are my creative outlets.",
              "Melanie: I found my muses: painting and pottery.",
              "Caroline: I used to go horseback riding with my dad.")
    assert {"camping", "Cooking", "baking", "horseback riding"} <= set(c)
    assert "pottery" in c  # coordinated with the activity "painting"
    kinds = known_types(["Melanie: I just took my fam camping in the mountains last week."])
    assert kinds["camping"] == "preference"


def test_times_only_when_absolute():
    c = cands("Jon: The fair was last Friday; the show is in September 2023 at 10am.")
    assert {"September", "2023", "10am"} <= set(c)
    assert "Friday" not in c
    kinds = known_types(["Jon: The fair was in September 2023 at 10am."])
    assert kinds["september"] == kinds["2023"] == kinds["10am"] == "time"


def test_common_noun_inside_a_longer_candidate_is_dropped():
    c = cands("Gina: My online clothing store is going well. The store needs work.")
    assert "online clothing store" in c and "store" not in c


def test_noun_phrases_stop_before_adverbs_and_verbs():
    c = cands("Nate: I finished the script now. The tournament afterwards was fun.",
              "Joanna: The eagle symbolizes freedom to me. My dance classes are fun.")
    assert "script" in c and "script now" not in c
    assert "tournament" in c and "tournament afterwards" not in c
    assert "eagle" in c and not any("symbolizes" in x for x in c)
    assert "dance classes" in c  # a plural head noun stays: the next word is a verb


def test_a_preposition_after_an_article_starts_a_compound_and_place_adverbs_end_one():
    c = cands("Caroline: Next year I want to climb a via ferrata.",
              "Melanie: I started a job at the LGBTQ center downtown. The after party was great.")
    assert "via ferrata" in c and "ferrata" not in c
    assert "after party" in c
    assert "LGBTQ center" in c and not any("downtown" in x for x in c)


def test_candidates_occur_verbatim_and_respect_the_limit():
    rows = [json.loads(line) for line in (ROOT / "fixtures" / "demo.ndjson").open()]
    text = window_text([f"{r['speaker']}: {r['text']}" for r in rows])
    c = candidate_spans(text, limit=6)
    assert 0 < len(c) <= 6 and all(x in text for x in c)
    assert len({x.casefold() for x in c}) == len(c)


@pytest.mark.parametrize("name,text,kind", [
    ("Becoming Nicole", 'I loved "Becoming Nicole" so much.', "object"),
    ("UK", "castles in the UK", "place"),
    ("Pacific Northwest", "the coast up in the Pacific Northwest", "place"),
    ("Cindy", "One of the residents, Cindy, wrote it.", "person"),
    # a name after "the" is no person's: a place (a team is typed wrong, but not as a person)
    ("Minnesota Wolves", "I signed with the Minnesota Wolves.", "place"),
    ("Dolomites", "hiking the Dolomites with her sister Maya", "place"),
    ("Maya", "hiking the Dolomites with her sister Maya", "person"),
    ("dance class", "Let's go to a dance class.", "event"),
    ("local dog shelter", "at a local dog shelter", "organization"),
    ("national parks", "hit some cool national parks", "place"),
    ("volunteers", "the volunteers came", "person"),
    ("transition", "during my transition", "concept"),
    ("hoodie", "This hoodie isn't for sale", None),
    ("Yoga", "Yoga's been great. I love yoga.", None),
    # the place after "at the" is the center; the name that modifies it is left to the model
    ("LGBTQ", "a job at the LGBTQ center downtown", None),
])
def test_rule_types(name, text, kind):
    assert rule_type(name, text) == kind


def test_speaker_entities_adds_people_and_mentions():
    texts = ["Caroline: I love pottery.", "Melanie: Pottery? Oliver too."]
    base = {"entities": [{"name": "pottery", "type": "preference", "description": "x"},
                         {"name": "Oliver", "type": "person", "description": "y"}],
            "relations": []}
    r = speaker_entities(texts, base)
    assert [e["name"] for e in r["entities"][:2]] == ["Caroline", "Melanie"]
    assert all(e["type"] == "person" for e in r["entities"][:2])
    pairs = {(x["src"], x["dst"]) for x in r["relations"]}
    assert pairs == {("Caroline", "pottery"), ("Melanie", "Oliver")}  # case-sensitive mention
    assert speaker_entities(["no speaker here"], base) == base


def test_grammar_has_one_type_word_per_candidate():
    g = grammar_for(3)
    assert g.startswith("root ::= t t t\n")
    assert all(f'" {k}"' in g for k in MODEL_TYPES) and '" none"' not in g
    assert '" none"' in grammar_for(2, skip=True)


def test_clean_result_applies_rules_over_the_model():
    texts = ["Jon: I danced in September."]
    r = clean_result({"entities": [["September", "object"]], "relations": []}, texts,
                     candidate_spans(window_text(texts)))
    assert r["entities"][0]["type"] == "time"


def test_one_candidate_per_thing():
    c = cands("Tim: I love this book. Books are my escape; I read three books a week.",
              "Caroline: We had such moments together at the pride event.",
              "Caroline: The LGBT pride event was great.",
              "Maria: I spent time at the shelter volunteering at the front desk.")
    assert sum(x.casefold().startswith("book") for x in c) == 1  # singular and plural: one
    assert "pride event" not in c and "LGBT pride event" in c    # a phrase inside a longer one
    assert "moments together" not in c                            # an adverb ends no phrase
    assert "shelter volunteering" not in c                        # "the shelter" is its own phrase


def test_keep_salient_keeps_names_and_salient_common_nouns_in_order():
    cs = ["Paris", "hoodie", "wallet", "2023", "dance class"]
    assert keep_salient(cs, [0.0, 0.6, 0.1, 0.0, 0.35]) == ["Paris", "hoodie", "2023",
                                                            "dance class"]
    assert keep_salient(cs, [0.0, 0.6, 0.1, 0.0, 0.35], limit=2) == ["Paris", "hoodie"]
    assert turn_bodies(["Gina: Hi  there", "no speaker"]) == ["Hi there", "no speaker"]


@pytest.fixture(scope="module")
def minilm():
    from synapse_cli.models.embedder import get_embedder

    return get_embedder()


def test_salience_with_the_real_embedder_separates_a_topic_from_an_aside(minilm):
    texts = ["Gina: I finally launched my new hoodie line, the hoodies sold out in a day!",
             "Jon: Wow! I lost my wallet on the way, but congrats on the hoodie line!"]
    topic, aside, absent = salience(["hoodie line", "wallet", "Paris"], texts, minilm)
    assert topic >= MIN_SALIENCE > aside and topic - aside > 0.2
    assert absent == 0.0  # not in any turn
    assert salience([], texts, minilm) == []


@pytest.mark.slow
def test_real_extractor_keeps_window_spans_and_drops_asides(minilm):
    texts = ["Gina: I finally launched my new hoodie line, the hoodies sold out in a day!",
             "Jon: Wow! I lost my wallet on the way, but congrats on the hoodie line!"]
    x = LlamaExtractor(embedder=minilm, use_salience=True)
    r = x.extract(texts)
    names = [e["name"] for e in r["entities"]]
    assert "hoodie line" in names and "wallet" not in names
    assert all(n in window_text(texts) for n in names)
    assert "salience" in x.cache_id
    plain = LlamaExtractor(embedder=minilm, use_salience=False)
    assert plain.cache_id != x.cache_id
    assert "wallet" in [e["name"] for e in plain.extract(texts)["entities"]]


def test_prototype_typer_picks_the_type_whose_examples_share_words():
    """With the fake embedder (word overlap) a span that is one of a type's example words gets
    that type: the typer's mechanics, not MiniLM's quality (measured in README_extract.md)."""
    from synapse_cli.models.fake import FakeEmbedder
    from synapse_cli.models.type_prototypes import PROTO_TYPES, PrototypeTyper

    t = PrototypeTyper(FakeEmbedder())
    assert t.types(["painting", "a gadget", "a social issue"]) == ["preference", "object",
                                                                   "concept"]
    assert t.scores([]).shape == (0, len(PROTO_TYPES))


def test_prototype_typer_with_minilm(minilm):
    from synapse_cli.models.type_prototypes import PrototypeTyper

    assert PrototypeTyper(minilm).types(["hoodie", "pottery", "gender identity"]) == [
        "object", "preference", "concept"]


def test_a_capitalised_gerund_alone_is_not_a_name():
    from synapse_cli.models.salience import is_name_like

    assert not is_name_like("Connecting") and not is_name_like("hoodie")
    assert is_name_like("Paris") and is_name_like("2023") and is_name_like("Beijing")
    assert is_name_like("Becoming Nicole")  # a title of several words stays a name


def test_extractor_types_common_nouns_by_prototype_without_the_model(minilm, monkeypatch):
    """Types never come from the model: with its naming scores off it is not even loaded."""
    x = LlamaExtractor(embedder=minilm, use_salience=True, skip=False, use_model=False)
    monkeypatch.setattr(x, "load", lambda: (_ for _ in ()).throw(AssertionError("loaded")))
    r = x.extract(["Gina: I finally launched my new hoodie line, the hoodies sold out in a day!",
                   "Jon: I love pottery, my pottery class is the best part of my week."])
    types = {e["name"]: e["type"] for e in r["entities"]}
    assert types.get("pottery class") == "event" and types.get("hoodie line") == "object"
    assert "x8" in x.cache_id


@pytest.mark.slow
def test_real_smollm2_may_only_drop_candidates_with_skip(minilm):
    """With `skip` the packaged SmolLM2 answers one word per candidate under the grammar; what it
    keeps is a subset of the rules' selection, typed by the rules and prototypes, never new."""
    texts = ["Gina: I finally launched my new hoodie line, the hoodies sold out in a day!",
             "Jon: I love pottery, my pottery class in Paris is the best part of my week."]
    base = LlamaExtractor(embedder=minilm, use_salience=True, skip=False).extract(texts)
    x = LlamaExtractor(embedder=minilm, use_salience=True, skip=True)
    r = x.extract(texts)
    assert x.llm is not None and x.last_usage.get("completion_tokens", 0) >= 1
    kept = {e["name"]: e["type"] for e in base["entities"]}
    assert all(kept.get(e["name"]) == e["type"] for e in r["entities"])
    assert "skip" in x.cache_id


def test_naming_scores_move_the_selection_in_proportion_to_the_weight(minilm, monkeypatch):
    """A fake scorer behind NamingScorer's interface: with weight 0 the rules decide; with a
    weight, a candidate the model names readily crosses the salience threshold and one it does
    not name falls under it. Names stay whatever the model says."""
    texts = ["Gina: I finally launched my new hoodie line, the hoodies sold out in a day!",
             "Jon: Wow! I lost my wallet on the way, but congrats on the hoodie line!"]

    class Fake:
        tokens_evaluated = 0

        def scores(self, window, spans):
            return [5.0 if s == "wallet" else -5.0 if s == "hoodie line" else 0.0 for s in spans]

    def run(weight):
        x = LlamaExtractor(embedder=minilm, use_salience=True, skip=False, use_model=True)
        x.model_weight, x._scorer = weight, Fake()
        monkeypatch.setattr(x, "load", lambda: None)
        return [e["name"] for e in x.extract(texts)["entities"]]

    assert "hoodie line" in run(0.0) and "wallet" not in run(0.0)
    moved = run(0.5)
    assert "wallet" in moved and "hoodie line" not in moved
    assert "naming" in LlamaExtractor(use_model=True).cache_id
    assert "naming" not in LlamaExtractor(use_model=False).cache_id


@pytest.mark.slow
def test_real_smollm2_naming_scores_are_cached_and_calibrated():
    """The packaged SmolLM2: scores from the window's KV cache equal a fresh evaluation, the
    calibration AUC is a probability, and the extractor's weight follows from it."""
    from synapse_cli.models.extractor import MAX_MODEL_WEIGHT, TRUST_FLOOR
    from synapse_cli.models.naming import NamingScorer, zscore

    x = LlamaExtractor(use_model=True)
    x.load()
    sc = NamingScorer(x.llm)
    w = "Tim: I started pottery classes and bought a new apron.\nAna: Nice, how is the weather?"
    a = sc.scores(w, ["pottery classes", "apron", "weather"])
    b = sc.scores(w, ["weather"])  # the window's prefix is reused from the cache
    sc.scores("Bo: something else entirely", ["else"])
    c = sc.scores(w, ["pottery classes", "apron", "weather"])  # re-evaluated
    assert all(v < 0 for v in a) and b[0] == pytest.approx(a[2], abs=1e-3)
    assert c == pytest.approx(a, abs=1e-3)
    assert abs(sum(zscore(a))) < 1e-9 and zscore([1.0]) == [0.0]
    auc = sc.trust()
    assert 0.0 <= auc <= 1.0
    x._weight()
    share = min(1.0, max(0.0, (x.trust - TRUST_FLOOR) / (1 - TRUST_FLOOR)))
    assert x.model_weight == pytest.approx(MAX_MODEL_WEIGHT * share)
