"""Word lists and token patterns of the candidate-span and typing rules (candidates.py,
entity_types.py): chat English, written for LoCoMo-like conversation (bench/README_extract.md)."""
from __future__ import annotations

import re

_STOP = frozenset("""a an the and or but if then so of to in on at by for with from into over
about as is are was were be been being have has had do does did will would can could should may
might must i me my we our you your he him his she her it its they them their this that these
those there here what which who whom whose when where why how not no yes just also very really
too all any some each every one more most much many such only own same other than up down out
off again once well said says say told tell asked ask mentioned agreed got get going go went
like liked know knew think thought want wanted yeah oh hey hi hello thanks thank okay ok sure
lot lots thing things something anything nothing time way day really pretty great good nice
i'm i've i'll i'd you're you've you'll it's that's there's what's he's she's we're we've
they're they've let's don't doesn't didn't can't won't isn't wasn't aren't haven't couldn't
wouldn't shouldn't gonna wanna gotta y'all ya u im ive dont cant wont
doesnt didnt isnt wasnt werent arent havent hasnt hadnt couldnt wouldnt shouldnt aint mustnt
neednt shant
""".split())
# Given names that are also everyday words: in lower case they are the word ("rob a bank",
# "mark it", "the dev server"), so a mention of such a speaker is only found capitalised.
_NAME_WORDS = frozenset("""
will may rob mark bill pat sue grace hope joy faith jack frank art don bob june april august
rose lily ivy max ray drew gene guy miles chase hunter summer autumn dawn eve sky river penny
ruby amber holly heather iris daisy violet sandy rusty buck cliff dale glen lance grant rich
sonny storm wade dev chuck rod van nick dash bud
""".split())
# Words that open or close no noun phrase in chat: evaluative adjectives, adverbs, common verbs,
# prepositions, interjections.
_NOT_NOUN = frozenset("""
wow cool awesome amazing great good nice super fun funny cute silly sweet lovely beautiful
glad happy sad excited exciting stoked thrilled proud grateful thankful sorry bummer congrats
congratulations woohoo yay aww awww hmm haha lol btw omg definitely totally absolutely exactly
indeed maybe probably actually basically seriously honestly literally certainly surely
always never ever often sometimes usually still already even almost quite rather enough
anyway though although because since until while during after before through across around
inspiring inspired interesting incredible awesome fantastic wonderful perfect special
important different difficult hard easy tough rough crazy wild huge tiny little big small
whole real true new old young younger youngest older best better worse worst favorite fave
own sure ready able nervous anxious scary powerful meaningful rewarding challenging
satisfying calming peaceful breathtaking stunning gorgeous delicious tasty yummy sick rad
top high low full empty free open close last next first second third few several
fab fabulous brilliant lucky positive negative strong weak busy swamped overwhelmed
impressed inspiring moving touching heartfelt precious unique creative expressive graceful
love loved loves loving enjoy enjoyed enjoys enjoying hope hoped hopes hoping feel feels felt
feeling make makes made making take takes took taking give gives gave giving keep keeps kept
keeping see sees saw seen seeing look looks looked looking find finds found finding try tries
tried trying need needs needed start starts started starting help helps helped helping
work works worked working share shares shared sharing learn learned learning show shows
showed showing mean means meant bring brings brought bringing remind reminds reminded
come comes came coming put puts use used using call called stay stayed stick check
glad appreciate appreciated believe believed remember remembered imagine imagined wish
thinking doing being having getting saying telling talking hearing knowing wanting seems
seem seemed sounds sound sounded becomes become became let lets letting happen happened
happens happening bet guess reckon mind matter matters
self yourself myself himself herself ourselves themselves
near like towards toward behind beside between among along past via per around
broke went came took gave made got felt left ran saw told brought bought thought taught found
kept met paid sent spent won lost wrote built hit sucks sucked
coolest latest initial upcoming extra specific possible successful another recent
together
now throughout afterwards afterward soon lately recently later earlier anymore yet meanwhile
nowadays
tbh yep yup nope imo imho idk lmao ngl fyi asap cheers right
""".split())
# Nouns too generic or too abstract to be worth a node alone ("kids", "support"); they may
# still modify a head noun ("support group", "morning workout").
_GENERIC = frozenset("""
kids kid stuff life lives people person thing things moment moments times day days week
lads lad mate mates
weeks month months year years today tomorrow yesterday tonight morning evening night
lot bit kind sort part way ways place places idea ideas world everyone someone anyone
everybody somebody nobody guy guys folks pic pics picture pictures photo photos image
step steps chance chances words word news question questions answer answers reason
reasons point points side end start beginning rest while hand hands fam mems
support advice encouragement journey potential passion passions joy difference impact goal
goals dream dreams vision future experience experiences challenge challenges effort reminder
success thrill sense opportunity opportunities setback setbacks home love care hope faith
deal offer response assistance energy power kindness smiles smile faces face worth middle
sight list suggestion story stories alive trouble troubles positivity plunge outlook
enthusiasm sources source expression values responsibility compassion feelings emotions
connections memories creations outlet outlets blast ton total win progress direction reality
form pick go-to spot styles piece pieces design grit lessons lesson details ones solution
strain break sucker bits screen ride fingers
""".split())
_MONTHS = ("january february march april may june july august september october november "
           "december").split()
_DAYS = ("monday tuesday wednesday thursday friday saturday sunday mon tue tues wed thu thur "
         "thurs fri sat").split()
_CONNECT = {"di", "de", "da", "del", "des", "du", "la", "le", "van", "von", "of", "the", "and",
            "&"}
_DET = {"a", "an", "the", "my", "her", "his", "our", "their", "your", "its", "this", "these",
        "those", "some", "any", "that", "another"}
_GERUND_CUE = {"love", "loves", "loved", "enjoy", "enjoys", "enjoyed", "into", "went", "go",
               "goes", "started", "start", "tried", "trying", "doing", "like", "likes", "liked",
               "try", "took"}
_VERB_ING = frozenset("""going doing being having getting making taking trying looking thinking
feeling saying working coming seeing giving keeping telling talking knowing wanting finding
putting helping loving hoping starting sharing learning showing bringing reminding letting
amazing inspiring interesting exciting rewarding something anything nothing everything morning
evening during bring king thing string spring wing ring sing nothing outstanding
understanding challenging satisfying calming touching moving breathtaking stunning
wondering happening asking checking playing hanging using following leading paying pushing
captivating motivating figuring""".split())
# a word starts with any letter ("Élodie", "Łukasz"), not only an ASCII one
_TOKEN = re.compile(r"[^\W\d_][\w'’-]*[\w]|[^\W\d_]|\d[\d:.,/-]*(?:am|pm|st|nd|rd|th|s)?",
                    re.UNICODE)
_QUOTED = re.compile(r'"([^"\n]{2,60})"|“([^”\n]{2,60})”|(?<!\w)\'([A-Z][^\'\n]{1,59})\'(?!\w)')
_SENT_END = re.compile(r"[.!?]\s*$|^\s*$|[:\-–—(]\s*$")
_SPEAKER = re.compile(r"^([A-Z][\w'’.-]*(?: [A-Z][\w'’.-]*)?): ")
_YEAR = re.compile(r"^(?:19|20)\d\d$")
_CLOCK = re.compile(r"^\d{1,2}(?::\d\d)?(?:am|pm)$", re.I)

_BE = {"is", "are", "was", "were", "been", "be", "being", "am", "i'm", "it's", "you're",
       "we're", "they're", "that's", "keep", "keeps", "kept", "stop", "stopped", "start", "i",
       "you", "we", "they", "he", "she", "it", "to", "not", "just", "really", "so"}

_HEAD_TYPES = {
    "event": """class classes comp competition contest tournament tournemant fair show concert
        festival party wedding trip interview interviews audition exam test presentation campaign
        workout workouts shower game match race marathon hike meeting conference ceremony
        graduation birthday celebration event session marathon lesson workshop workshops signing
        rehearsal recital performance parade vacation holiday rejection""",
    "place": """studio school park parks mountain mountains coast beach city town country lake
        river forest museum cafe restaurant library church hospital house apartment gym office
        kitchen set subway garden island castle castles memorial street village campus center
        centre""",
    "organization": """company agency store shop group team club shelter business organization
        charity band firm startup university college league""",
    "person": """dad mom mother father sister brother friend friends mentor volunteer volunteers
        actor actors leader leaders resident residents teacher coach son daughter husband wife
        partner grandma grandpa boss""",
}
_HEAD_TYPE = {w: k for k, ws in _HEAD_TYPES.items() for w in ws.split()}
_PLACE_CUE = {"in", "at", "from", "to", "visit", "visiting", "visited", "near", "across", "around"}
_CONCEPT_SUFFIX = ("tion", "ment", "ness", "ity", "ism", "ship", "ance", "ence")
