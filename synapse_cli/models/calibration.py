"""A small labelled set, written for this purpose (no benchmark text), on which the extractor
measures how well a model tells the things a chat is about from words said in passing, once per
model: the weight its judgement gets over the rules' (selection.py) grows with that measure, so a
model that cannot tell them apart moves nothing and the rules stay the floor.

Each chat lists spans that are worth remembering (a topic, a hobby, a person, a thing someone
owns or wants) and spans that occur in it but are not (asides, filler, evaluations); all occur
verbatim.
"""
from __future__ import annotations

CHATS = [
    (["Ben: I finally signed up for a ceramics course at the community college, first class is "
      "on Monday.",
      "Lia: That's great! I spent the whole morning fixing the fence, what a day.",
      "Ben: Ha, the teacher said we'll make mugs first. I need a new apron though."],
     ["ceramics course", "community college", "mugs", "apron", "fence"],
     ["morning", "day", "teacher said", "class", "whole"]),
    (["Rosa: My brother Tom just got back from Peru, he hiked the Inca Trail!",
      "Kim: Wow, what an adventure. I mostly stayed in and watched the rain.",
      "Rosa: He brought me an alpaca scarf, it's so soft. Maybe next year I'll go with him."],
     ["Peru", "Inca Trail", "alpaca scarf", "Tom"],
     ["rain", "adventure", "next year", "Wow"]),
    (["Sam: I've been learning to play the violin, my neighbor gives me lessons on weekends.",
      "Ada: Nice! I'm stuck with my thesis on urban beekeeping, the deadline is scary.",
      "Sam: You'll do it. Honestly the hardest part for me is reading sheet music."],
     ["violin", "thesis", "urban beekeeping", "sheet music", "neighbor"],
     ["part", "weekends", "deadline", "Nice"]),
    (["Joe: We adopted a kitten from the animal shelter, we named her Pepper.",
      "Eva: So cute! I've been volunteering at the food bank every Friday.",
      "Joe: That's kind of you. Pepper keeps chewing the cables, it's a whole thing."],
     ["kitten", "animal shelter", "Pepper", "food bank", "volunteering"],
     ["cables", "thing", "Friday", "kind"]),
]
