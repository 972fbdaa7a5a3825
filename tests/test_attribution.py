"""The gate's attribution check (engine/recall/attribution.py): its rules, and recall with the real
embedder refusing a question about the wrong person while answering the right one."""
from __future__ import annotations

import numpy as np
import pytest

from synapse_cli.engine.recall import attribution as at
from test_recall import demo, run  # noqa: F401  (the demo store fixture, the CLI runner)


def test_named_speaker_needs_exactly_one_whole_word_name():
    speakers = {"Caroline", "Melanie", "Mel"}
    assert at.named_speaker("What did Caroline say?", speakers) == "Caroline"
    assert at.named_speaker("Where is Caroline's bowl from?", speakers) == "Caroline"
    assert at.named_speaker("What did Caroline and Melanie do?", speakers) is None
    assert at.named_speaker("What did Melanie say?", speakers) == "Melanie"  # not "Mel" too
    assert at.named_speaker("what did caroline say?", speakers) is None  # names are cased
    assert at.named_speaker("Who went hiking?", speakers) is None
    assert at.without_name("Where is Caroline's bowl from?", "Caroline").split() == [
        "Where", "is", "bowl", "from?"]


def test_questions_and_empty_texts_are_not_statements():
    assert at.is_statement("I ran a charity race last week.")
    assert not at.is_statement("Wow, that looks great! What made you pick it?")
    assert not at.is_statement("Where was that taken? [shares a photo of a lake]")
    assert at.is_statement("Here it is! [shares a photo of a lake]")
    assert not at.is_statement("") and not at.is_statement(None)
    assert not at.is_statement("Done?  [a photo] ") and at.is_statement("a [b] c? d]")
    # long runs of spaces or brackets (read by hand now: the regex anchored at the end took
    # seconds on them, a 60,000-space memory cost a recall 8 s)
    assert at.is_statement("moved to 10:00" + " " * 60_000 + "x")
    assert not at.is_statement("[" * 60_000 + "x?" + " " * 60_000)


def test_margin_cases():
    spk = ["Ann", "Bob", "Bob", "Ann"]
    texts = ["Nice race! How did it go?", "I ran the race.", "It was fun.", "Good for you."]
    # Ann's only matching statement scores 1, Bob's best 4: (4 - 1) / 4
    assert at.margin("Ann", spk, texts, np.array([9.0, 4.0, 2.0, 1.0])) == pytest.approx(0.75)
    # the question turn (9.0) counts for nobody; Ann's statement is the best match
    assert at.margin("Ann", spk, texts, np.array([9.0, 1.0, 0.0, 3.0])) == pytest.approx(-2 / 3)
    assert at.margin("Carl", spk, texts, np.array([0.0, 1.0, 0.0, 0.0])) == 1.0  # none of his
    assert at.margin("Bob", spk[:3], texts[:3], np.array([0.0, 2.0, 1.0])) == -1.0  # only his
    assert at.margin("Ann", spk, texts, np.zeros(4)) is None  # nothing matches: no verdict
    # a note without a speaker (or a semantic node) is nobody's word against Ann's
    assert at.margin("Ann", [None, "Ann"], ["Ann swims on Sundays.", "I swim."],
                     np.array([5.0, 1.0])) == -1.0


def test_verdict_reads_only_the_top_depth_results():
    """Whatever k the caller asked for: a speaker named only below `depth` gets no check."""
    bodies = [{"speaker": "Bob", "text": f"I swim {i}."} for i in range(10)]
    bodies.append({"speaker": "Ann", "text": "I ran."})
    content = lambda q: (["swim"], np.ones((1, 10)))  # noqa: E731
    assert at.check("When did Ann swim?", bodies, content, 10, 0.25) is None
    assert at.check("When did Ann swim?", bodies[:10], content, 10, 0.25) is None
    assert at.check("When did Bob swim?", bodies, content, 10, 0.25).margin == -1.0
    assert at.without_name("Where is Caroline\u2019s bowl?", "Caroline").split() == [
        "Where", "is", "bowl?"]


def test_check_skips_queries_without_a_named_speaker():
    bodies = [{"speaker": "Ann", "text": "I ran."}, {"speaker": "Bob", "text": "I swim."}]
    calls = []
    assert at.check("Who swam?", bodies, calls.append, 10, 0.25) is None and calls == []
    v = at.check("What did Ann swim?", bodies, lambda q: (["swim"], np.array([[0.0, 2.0]])), 10,
                 0.25)
    assert v.name == "Ann" and v.margin == 1.0 and not v.passed
    assert v.as_dict() == {"name": "Ann", "margin": 1.0, "threshold": 0.25, "passed": False}


def test_recall_refuses_the_wrong_person_and_answers_the_right_one(demo):  # noqa: F811
    right = run(demo, "recall", "What is the name of Melanie's rescue dog?", "--no-touch")[0]
    assert right["rejected"] is False and right["attribution"]["passed"] is True
    assert "Pixel" in right["results"][0]["text"]
    wrong = run(demo, "recall", "What is the name of Caroline's rescue dog?", "--no-touch")[0]
    assert wrong["rejected"] is True and wrong["results"] == []
    assert wrong["attribution"]["name"] == "Caroline" and wrong["attribution"]["passed"] is False
    assert wrong["attribution"]["margin"] > wrong["attribution"]["threshold"]
    off = run(demo, "recall", "What is the name of Caroline's rescue dog?", "--no-touch",
              "--no-attribution")[0]
    assert off["rejected"] is False and "attribution" not in off
    assert "Pixel" in off["results"][0]["text"]
    # the other rejection stage is unchanged: no named speaker, nothing related
    assert "attribution" not in run(demo, "recall", "Where did anyone go hiking?",
                                    "--no-touch")[0]


def test_only_words_outside_questions_count_as_stated():
    assert at.stated_words("They're adorable! What are their names? Pets bring joy!") == {
        "they", "re", "adorable", "pets", "bring", "joy"}
    assert at.stated_words("Where was that taken? [shares a photo of a lake]") == {
        "shares", "a", "photo", "of", "lake"}
    assert at.stated_words("What other classes have you done?") == set()
    assert at.stated_words(None) == set()


def test_content_is_the_bm25_of_the_stated_query_words():
    """BM25 is a sum over query words: each text keeps the words it states."""
    texts = ["What are their names? Pets bring joy!", "Luna and Oliver are their names."]
    words, per_word = ["are", "names", "pets"], np.array([[1.0, 1.0], [5.0, 4.0], [3.0, 0.0]])
    got = at.stated_content(words, per_word, texts)
    assert got.tolist() == [3.0, 5.0]  # text 0 asks for names, states pets; text 1 the names
    assert at.stated_content([], np.zeros((0, 2)), texts).tolist() == [0.0, 0.0]


def test_a_restatement_counts_for_whoever_said_it_first():
    """An assistant's "Noted: vegetarian." repeats the user's fact: it counts for the user."""
    spk = ["Dana", "assistant"]
    texts = ["oh and i'm vegetarian, so keep that in mind", "Noted: vegetarian."]
    words, per_word = ["is", "vegetarian"], np.array([[0.0, 0.0], [2.0, 5.0]])
    matched = at.matched_topics(words, per_word, texts)
    assert matched == [frozenset({"vegetarian"}), frozenset({"vegetarian"})]
    order = [(1, 1), (2, 2)]
    assert at.credited("Dana", spk, texts, matched, order) == ["Dana", "Dana"]
    # said first by the assistant, then by Dana: the assistant's stays the assistant's
    assert at.credited("Dana", spk, texts, matched, [(2, 1), (1, 2)]) == ["Dana", "assistant"]
    # a statement that adds a word the earlier one did not state is not a restatement
    more = [frozenset({"vegetarian"}), frozenset({"vegetarian", "pescatarian"})]
    assert at.credited("Dana", spk, texts, more, order) == ["Dana", "assistant"]
    # a reply that repeats Melanie's words counts for Melanie when she is asked about, but it
    # is never taken away from the person asked about: the rule only adds evidence for them
    race = (["Melanie", "Caroline"], ["I ran a race.", "Great race!"], [frozenset({"race"})] * 2)
    assert at.credited("Melanie", *race, order) == ["Melanie", "Melanie"]
    assert at.credited("Caroline", *race, order) == ["Melanie", "Caroline"]
    bodies = [{"speaker": s, "text": t} for s, t in zip(spk, texts)]
    v = at.check("Is Dana vegetarian?", bodies, lambda q: (words, per_word), 10, 0.25, order)
    assert v.margin == -1.0 and v.passed  # both count for Dana
    off = at.check("Is Dana vegetarian?", bodies, lambda q: (words, per_word), 10, 0.25, order,
                   restatements=False, scoring="bm25")
    assert off.margin == pytest.approx(0.6) and not off.passed


def test_a_possessive_mention_counts_for_the_person_named():
    spk = ["Ayesha", "Mei"]
    texts = ["also it's Mei's birthday tomorrow (the 27th)", "this cake is incredible"]
    assert at.credited("Mei", spk, texts) == ["Mei", "Mei"]
    assert at.credited("Ayesha", spk, texts) == ["Ayesha", "Mei"]
    assert at.credited("Mei", spk, ["Thanks, Mei! I ran a race.", "ok"]) == ["Ayesha", "Mei"]


def test_coverage_ignores_length_and_repetition():
    texts = ["Noted: vegetarian.", "oh and i'm vegetarian, vegetarian for years, keep in mind"]
    words, per_word = ["vegetarian", "years"], np.array([[5.0, 3.0], [0.0, 4.0]])
    assert at.stated_coverage(words, per_word, texts).tolist() == [5.0, 9.0]
    assert at.stated_coverage([], np.zeros((0, 2)), texts).tolist() == [0.0, 0.0]
