"""Parse what `ingest` reads into validated items (README "Input schema").

Three forms: NDJSON objects (`json`), plain text lines (`text`), documents (`doc`, split into
1,200-character chunks with 200 overlap as seed 002 does). Every problem is an `InputError`
naming the source and line, so the command can reject the whole input before storing anything.
"""
from __future__ import annotations

import codecs
import datetime as dt
import io
import json
import math
import unicodedata
from dataclasses import dataclass, field
from typing import BinaryIO, Iterable, Iterator

import orjson

from store_format.flags import MemoryType

MAX_TEXT = 100_000  # characters per item; larger inputs belong in --format doc
CHUNK, OVERLAP = 1200, 200
TYPES = {"episodic": MemoryType.EPISODIC, "working": MemoryType.WORKING,
         "procedural": MemoryType.PROCEDURAL}
FIELDS = {"text", "timestamp", "speaker", "session", "source", "importance", "valence",
          "arousal", "tags", "pinned", "resolved", "type", "dia_id", "meta"}
# Objects and arrays inside `meta` nest at most this deep. Every part of the tool can then
# write and show the record: orjson's encoder stops at 254 levels and the payload's stdlib
# JSON at Python's recursion limit (~990), which deeper input used to reach.
MAX_META_DEPTH = 32
# Bytes of `meta` as JSON: with the text and tags a record's body stays far below the payload
# log's 16 MiB per entry (store_format/payload.py), so no line that passed the input check can
# fail when its batch is written.
MAX_META_BYTES = 1_000_000
MAX_TAG = 1000  # characters per tag, as for speaker, session and source
MAX_TAGS = 64  # tags per item


class InputError(ValueError):
    def __init__(self, where: str, reason: str):
        super().__init__(f"{where}: {reason}")
        self.where, self.reason = where, reason


@dataclass
class Item:
    """One memory to ingest, validated; `where` is "file:line" for messages."""

    text: str
    where: str
    timestamp_ms: int | None = None
    speaker: str | None = None
    session: str | None = None
    source: str | None = None
    importance: float | None = None
    valence: float = 0.0          # -1 .. 1
    arousal: float | None = None  # 0 .. 1; None: derived from valence (seed 004)
    tags: list[str] = field(default_factory=list)
    pinned: bool = False
    resolved: bool = True
    memory_type: int = MemoryType.EPISODIC
    dia_id: str | None = None
    chunk: tuple[int, int] | None = None
    meta: dict = field(default_factory=dict)


def normalize_text(text: str) -> str:
    """The form that MD5 deduplication hashes: NFC, whitespace collapsed, case folded."""
    return " ".join(unicodedata.normalize("NFC", text).casefold().split())


# The last millisecond a datetime can show (9999-12-31T23:59:59.999Z): a later time could be
# stored but not printed, by list or recall, in ISO 8601.
MAX_TIMESTAMP_MS = 253_402_300_799_999


def utc_datetime(ms: int) -> dt.datetime | None:
    """The UTC datetime of epoch ms, None when it is outside 1970 .. 9999 (a store written by
    an older synapse may hold one)."""
    if not 0 <= ms <= MAX_TIMESTAMP_MS:
        return None
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def _iso(value: str, where: str) -> dt.datetime:
    """ISO 8601 text -> an aware datetime (naive means UTC)."""
    try:
        # RFC 3339 allows a lowercase t and z ("2026-01-01t00:00:00z")
        t = dt.datetime.fromisoformat(value.strip().upper().replace("Z", "+00:00"))
    except ValueError:
        raise InputError(where, f"timestamp {value!r} is not ISO 8601 "
                                "(e.g. 2026-06-02T18:05:00Z)") from None
    return t if t.tzinfo is not None else t.replace(tzinfo=dt.timezone.utc)


def _epoch_ms(t: dt.datetime) -> int:
    """Epoch ms of an aware datetime, rounded down, in integers: `t.timestamp() * 1000` goes
    through a float and came out a millisecond early for about 0.6% of times with a fraction of
    a second (see legacy_ms)."""
    return (t - _EPOCH) // dt.timedelta(milliseconds=1)


def legacy_ms(ms: int) -> int:
    """The time synapse stored for an ISO time of whole millisecond `ms` before _epoch_ms
    (through a float): `ms` or, for about 0.6% of times with a fraction of a second, `ms - 1`.
    Deduplication accepts it as the same time, so that a log ingested again is not stored
    twice."""
    return int(ms * 1000 / 10**6 * 1000)


def parse_timestamp(value, where: str) -> int:
    """ISO 8601 (naive means UTC) or epoch milliseconds -> epoch ms, 1970 .. 9999."""
    if isinstance(value, bool):
        raise InputError(where, "timestamp must be ISO 8601 text or epoch milliseconds")
    if isinstance(value, (int, float)):
        if not math.isfinite(value) or not 0 <= value <= MAX_TIMESTAMP_MS:
            raise InputError(where, f"timestamp {value!r} is not a valid epoch-ms value "
                                    "(1970 .. 9999)")
        if 0 < value < 100_000_000_000:  # before 1973 in ms, but 1973-5138 in seconds
            raise InputError(where, f"timestamp {value!r} looks like epoch seconds; epoch "
                                    f"milliseconds ({int(value) * 1000}) or ISO 8601 expected")
        return int(value)
    if isinstance(value, str):
        t = _iso(value, where)
        ms = _epoch_ms(t)
        if not 0 <= ms <= MAX_TIMESTAMP_MS:
            raise InputError(where, f"timestamp {value!r} is outside 1970 .. 9999 (UTC)")
        return ms
    raise InputError(where, "timestamp must be ISO 8601 text or epoch milliseconds")


def parse_window_start(value, where: str) -> int:
    """parse_timestamp for the start of a time window (--since): a time between two
    milliseconds is rounded up, not down, so that a record of the millisecond before it is not
    let through ("18:05:00.0001Z" must not admit a record of 18:05:00.000)."""
    ms = parse_timestamp(value, where)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value != int(value):
        return ms + 1
    if isinstance(value, str) and (_iso(value, where) - _EPOCH) % dt.timedelta(milliseconds=1):
        return ms + 1  # of the instant, not the local time: an offset may hold microseconds
    return ms


def parse_window_end(value, where: str) -> int:
    """parse_timestamp for the end of a time window (--until, --as-of): a bare date
    ("2026-06-02") is its last millisecond (UTC), so that a window from and to one date is
    that whole day, not an empty one."""
    ms = parse_timestamp(value, where)
    if isinstance(value, str):
        try:
            dt.date.fromisoformat(value.strip())  # a date without a time of day
        except ValueError:
            return ms
        ms += 86_400_000 - 1
    return ms


def _text(value, where: str, name: str = "text") -> str:
    if not isinstance(value, str):
        raise InputError(where, f"`{name}` must be a string")
    if "\x00" in value:
        raise InputError(where, f"`{name}` contains a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (reachable from the Python API)
        raise InputError(where, f"`{name}` is not valid Unicode (a lone surrogate)") from None
    return value


def _number(obj: dict, key: str, lo: float, hi: float, where: str) -> float | None:
    if key not in obj or obj[key] is None:
        return None
    v = obj[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise InputError(where, f"`{key}` must be a finite number")
    if not lo <= v <= hi:
        raise InputError(where, f"`{key}` {v} is outside {lo} .. {hi}")
    return float(v)


def _bool(obj: dict, key: str, default: bool, where: str) -> bool:
    v = obj.get(key, default)
    if not isinstance(v, bool):
        raise InputError(where, f"`{key}` must be true or false")
    return v


def _opt_str(obj: dict, key: str, where: str) -> str | None:
    v = obj.get(key)
    if v is None:
        return None
    if isinstance(v, float) and abs(v) >= 2**53:  # the JSON reader made it a float already
        raise InputError(where, f"`{key}` {v:g} is a number too large to keep exactly: "
                                "write it as a string")
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        v = str(v)  # session numbers are common
    s = _text(v, where, key).strip()
    if len(s) > 1000:
        raise InputError(where, f"`{key}` is longer than 1000 characters")
    return s or None


# Tags that ingest derives from the `speaker`, `session` and `source` fields: `--tag
# speaker:alice` must find alice's turns only, and `prune --tag speaker:alice` forget only them.
RESERVED_TAG_PREFIXES = ("speaker:", "session:", "source:")


# Characters that show as nothing or as a blank: besides the control and format categories and
# every space but U+0020, the default-ignorable marks and the fillers that are letters by
# category (Unicode's Default_Ignorable_Code_Point, which unicodedata does not expose).
_BLANK = frozenset([0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x180B, 0x180C, 0x180D, 0x180E,
                    0x180F, 0x2800, 0x3164, 0xFFA0, *range(0xFE00, 0xFE10),
                    *range(0xE0100, 0xE01F0)])


def invisible_char(tag: str) -> str | None:
    """The first character of `tag` that shows as nothing or as a blank ("\\n", a zero-width
    space U+200B, a variation selector, a no-break space, the Hangul filler U+3164), as
    U+XXXX, else None: `user:ana` and `user:ana` + U+200B look alike and are two users, so a
    tag may hold none (an ordinary space inside a tag stays allowed)."""
    for ch in tag:
        if (unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp")
                or (unicodedata.category(ch) == "Zs" and ch != " ") or ord(ch) in _BLANK):
            return f"U+{ord(ch):04X}"
    return None


def check_tag(tag: str, where: str, reserved: bool = False) -> None:
    """InputError unless `tag` is a string that is not empty, holds no invisible character,
    is at most MAX_TAG long and, unless `reserved` (import: an export holds the tags ingest
    derived), does not start with speaker:, session: or source:."""
    from store_format.tags import normalize_tag

    norm = normalize_tag(_text(tag, where, "tags"))
    if not norm:
        raise InputError(where, "`tags` holds an empty tag")
    if bad := invisible_char(tag):
        raise InputError(where, f"tag {tag!r} holds an invisible character ({bad}): a tag "
                                "that looks like another must not be another")
    if len(tag) > MAX_TAG:
        raise InputError(where, f"a tag is longer than {MAX_TAG} characters")
    if not reserved and norm.startswith(RESERVED_TAG_PREFIXES):
        raise InputError(where, f"tag {tag!r} is reserved: ingest sets the speaker:, session: "
                                "and source: tags from the `speaker`, `session` and `source` "
                                "fields")


def item_from_object(obj, where: str) -> Item:
    if not isinstance(obj, dict):
        raise InputError(where, "expected a JSON object with a `text` field")
    unknown = set(obj) - FIELDS
    if unknown:
        raise InputError(where, f"unknown field(s) {', '.join(sorted(unknown))} "
                                "(put extra data under `meta`)")
    if "text" not in obj:
        raise InputError(where, "missing required field `text`")
    text = _text(obj["text"], where)
    if not text.strip():
        raise InputError(where, "`text` is empty")
    if len(text) > MAX_TEXT:
        raise InputError(where, f"`text` is longer than {MAX_TEXT} characters "
                                "(use --format doc for documents)")
    tags = obj.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags) \
            or len(tags) > MAX_TAGS:
        raise InputError(where, f"`tags` must be a list of at most {MAX_TAGS} strings")
    for tag in tags:
        check_tag(tag, where)
    from store_format.tags import normalize_tag

    # one spelling per tag: "A" and "a" are one tag (FORMAT.md 4.2), so the first is kept
    first: dict[str, str] = {}
    for tag in tags:
        first.setdefault(normalize_tag(tag), tag)
    tags = list(first.values())
    kind = obj.get("type", "episodic")
    if not isinstance(kind, str) or kind not in TYPES:  # a dict or list is unhashable
        raise InputError(where, f"`type` {kind!r} must be one of {', '.join(TYPES)}")
    meta = obj.get("meta", {})
    if not isinstance(meta, dict):
        raise InputError(where, "`meta` must be an object")
    if nesting_depth(meta) > MAX_META_DEPTH:
        raise InputError(where, f"`meta` nests objects or arrays more than {MAX_META_DEPTH} "
                                "levels deep")
    try:
        meta_bytes = len(orjson.dumps(meta)) if meta else 0
        json.dumps(meta, allow_nan=False)  # orjson writes NaN as null; the payload refuses it
    except orjson.JSONEncodeError as exc:  # from the Python API: a key that is not a string...
        raise InputError(where, f"`meta` is not JSON ({exc})") from None
    except ValueError:
        raise InputError(where, "`meta` holds NaN or Infinity, which JSON does not have") \
            from None
    if meta_bytes > MAX_META_BYTES:
        raise InputError(where, f"`meta` is larger than {MAX_META_BYTES:,} bytes as JSON")
    ts = obj.get("timestamp")
    return Item(
        text=text, where=where,
        timestamp_ms=None if ts is None else parse_timestamp(ts, where),
        speaker=_opt_str(obj, "speaker", where), session=_opt_str(obj, "session", where),
        source=_opt_str(obj, "source", where), dia_id=_opt_str(obj, "dia_id", where),
        importance=_number(obj, "importance", 0.05, 10.0, where),
        valence=_number(obj, "valence", -1.0, 1.0, where) or 0.0,
        arousal=_number(obj, "arousal", 0.0, 1.0, where),
        tags=tags, pinned=_bool(obj, "pinned", False, where),
        resolved=_bool(obj, "resolved", True, where), memory_type=TYPES[kind], meta=meta,
    )


def nesting_depth(value) -> int:
    """Levels of objects and arrays in a parsed JSON value (a scalar is 0), without recursion."""
    depth, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            v = v.values()
        elif not isinstance(v, list):
            continue
        depth = max(depth, d)
        stack.extend((x, d + 1) for x in v if isinstance(x, (dict, list)))
    return depth


class _DuplicateKey(ValueError):
    pass


def _no_duplicates(pairs: list) -> dict:
    seen = {}
    for key, value in pairs:
        if key in seen:
            raise _DuplicateKey(key)
        seen[key] = value
    return seen


def duplicate_key(raw: bytes) -> str | None:
    """The first key that appears twice in one object of `raw` (valid JSON), or None. orjson,
    like most parsers, keeps the last value silently; input that says two things is refused."""
    import json

    try:
        json.loads(raw, object_pairs_hook=_no_duplicates)
    except _DuplicateKey as exc:
        return str(exc.args[0])
    return None


BOM = b"\xef\xbb\xbf"  # a UTF-8 byte-order mark some editors write: not part of the text
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")  # Windows tools write UTF-16 with one of these
UTF16 = ("the input is UTF-16 (it starts with a UTF-16 byte-order mark); convert it to "
         "UTF-8, e.g. iconv -f UTF-16 -t UTF-8")


def parse_ndjson(lines: Iterable[bytes], name: str) -> Iterator[Item | InputError]:
    """Yield an Item or an InputError per non-blank line (the caller decides what to do)."""
    for n, raw in enumerate(lines, 1):
        where = f"{name}:{n}"
        if isinstance(raw, LongLine):  # before any slice, which makes it plain bytes
            yield InputError(where, f"line is longer than {MAX_LINE_BYTES:,} bytes")
            continue
        if n == 1 and raw.startswith(BOM):
            raw = raw[len(BOM):]
        if n == 1 and raw.startswith(UTF16_BOMS):
            yield InputError(where, UTF16)
            return
        if not raw.strip():
            continue
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            reason = exc.args[0].split(':')[0]
            if "depth" in reason:
                reason += f"; `meta` may nest at most {MAX_META_DEPTH} levels"
            yield InputError(where, f"invalid JSON ({reason})")
            continue
        try:
            item = item_from_object(obj, where)
        except InputError as exc:
            yield exc
            continue
        key = duplicate_key(raw)  # after the depth check: the stdlib parser recurses
        yield item if key is None else InputError(
            where, f"key {key!r} appears twice in one object (which one is meant?)")


def parse_text(lines: Iterable[bytes], name: str) -> Iterator[Item | InputError]:
    for n, raw in enumerate(lines, 1):
        where = f"{name}:{n}"
        if isinstance(raw, LongLine):  # before any slice, which makes it plain bytes
            yield InputError(where, f"line is longer than {MAX_LINE_BYTES:,} bytes "
                                    "(use --format doc for documents)")
            continue
        shift = len(BOM) if n == 1 and raw.startswith(BOM) else 0
        raw = raw[shift:]
        if n == 1 and raw.startswith(UTF16_BOMS):
            yield InputError(where, UTF16)
            return
        try:
            line = raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError as exc:
            yield InputError(where, f"invalid UTF-8 at byte {exc.start + shift}")
            continue
        if not line.strip():
            continue
        if "\x00" in line:
            yield InputError(where, "line contains a NUL character")
            continue
        if len(line) > MAX_TEXT:  # a 50 MB line once took 3 GB and ended in an internal error
            yield InputError(where, f"line is longer than {MAX_TEXT} characters "
                                    "(use --format doc for documents)")
            continue
        yield Item(text=line, where=where, source=None if name == "-" else name)


def chunk_document(text: str, size: int = CHUNK, overlap: int = OVERLAP) -> list[tuple[int, int]]:
    """[start, end) character spans of `size` with `overlap` (seed 002's 1200/200 chunking)."""
    if not text:
        return []
    step = size - overlap
    spans, start = [], 0
    while True:
        end = min(start + size, len(text))
        spans.append((start, end))
        if end == len(text):
            return spans
        start += step


READ_BLOCK = 1 << 20  # bytes read at a time: a document's memory is this plus one chunk


# No valid line is longer: 100,000 characters of text as JSON escapes, 1 MB of meta, the rest.
MAX_LINE_BYTES = 4 << 20


class LongLine(bytes):
    """What iter_lines yields for a line over MAX_LINE_BYTES: the line is not kept (a 200 MB
    line without a newline, a binary file given by mistake, took 1 GB before its error)."""


def iter_lines(fh: BinaryIO, block: int = READ_BLOCK,
               max_line: int = MAX_LINE_BYTES) -> Iterator[bytes]:
    """The lines of a binary file, read a block at a time, split as `bytes.splitlines` splits
    (at \n, \r\n and a lone \r) and without their line ends; a line over `max_line` bytes is
    one LongLine() and is skipped as it is read."""
    rest, skipping, after_cr = b"", False, False
    while True:
        data = fh.read(block)
        if not data:
            if rest:
                yield LongLine() if len(rest) > max_line else rest
            return
        if after_cr:  # a \r ended the last block: a \n now is the rest of its \r\n
            data, after_cr = data.removeprefix(b"\n"), False
        if skipping and data:  # drop the rest of a long line, up to its end
            ends = [i for i in (data.find(b"\n"), data.find(b"\r")) if i >= 0]
            if not ends:
                continue
            end = min(ends)
            if data[end:end + 2] == b"\r\n":
                end += 1
            after_cr = end == len(data) - 1 and data.endswith(b"\r")
            data, skipping = data[end + 1:], False
        if not data:
            continue
        data = rest + data
        cut = max(data.rfind(b"\n"), data.rfind(b"\r"))
        if cut < 0:
            rest = data
            if len(rest) > max_line:
                yield LongLine()
                rest, skipping = b"", True
            continue
        after_cr = cut == len(data) - 1 and data.endswith(b"\r")
        yield from (LongLine() if len(x) > max_line else x
                    for x in data[:cut + 1].splitlines())
        rest = data[cut + 1:]


def parse_document(data: bytes, name: str) -> Iterator[Item | InputError]:
    return parse_document_stream(io.BytesIO(data), name)


def parse_document_stream(fh: BinaryIO, name: str, block: int = READ_BLOCK
                          ) -> Iterator[Item | InputError]:
    """The chunks of a UTF-8 document read `block` bytes at a time: memory stays bounded by
    the block, not the file. Chunk spans are the ones `chunk_document` gives for the whole
    text (offsets count characters after a byte-order mark); a bad byte ends the document
    with an InputError naming its offset in the file."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    buf, base = "", 0          # buf holds the text from character `base` on
    start, k, read = 0, 0, 0   # next chunk's start; its number; bytes read so far
    step = CHUNK - OVERLAP
    while True:
        data = fh.read(block)
        shift = len(BOM) if read == 0 and data.startswith(BOM) else 0
        if read == 0 and data.startswith(UTF16_BOMS):
            yield InputError(f"{name}:byte 0", UTF16)
            return
        nul = data.find(b"\0")
        if nul >= 0:  # as in the other formats: binary, not a document
            yield InputError(f"{name}:byte {read + nul}", "contains a NUL character")
            return
        try:
            buf += decoder.decode(data[shift:], final=not data)
        except UnicodeDecodeError as exc:  # exc.start counts from the bytes still pending
            pending = len(decoder.getstate()[0])
            yield InputError(f"{name}:byte {read + shift + exc.start - pending}", "invalid UTF-8")
            return
        read += len(data)
        end_of_text = not data
        # a chunk is final only once the text is known to end with it (as chunk_document)
        while start + CHUNK < base + len(buf) or (end_of_text and start < base + len(buf)):
            a, b = start, min(start + CHUNK, base + len(buf))
            chunk = buf[a - base:b - base]
            if chunk.strip():
                yield Item(text=chunk, where=f"{name}:chunk {k}", source=name, chunk=(a, b))
            k += 1
            if b == base + len(buf) and end_of_text:
                return
            start += step
        buf, base = buf[start - base:], start
        if end_of_text:
            return
