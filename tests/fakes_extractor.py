"""A deterministic stand-in for the LLM extractor (no model): capitalised candidate spans become
entities, consecutive ones are related. Counts its calls so tests can see cache hits."""
from __future__ import annotations

from synapse_cli.models.extractor import candidate_spans, clean_result, window_text


class FakeExtractor:
    cache_id = "fake\nf1"

    def __init__(self, max_entities: int = 4):
        self.calls = 0
        self.max_entities = max_entities

    def extract(self, window_texts: list[str]) -> dict:
        self.calls += 1
        cands = candidate_spans(window_text(window_texts))
        names = [c for c in cands if c[:1].isupper()][: self.max_entities]
        raw = {"entities": [[n, "concept"] for n in names],
               "relations": [[a, "mentioned with", b, 0.7] for a, b in zip(names, names[1:])]}
        return clean_result({"entities": raw["entities"], "relations": raw["relations"]},
                            window_texts, cands)
