"""The extraction cache `extract.cache` and model-hash file `extract.models` (FORMAT.md 13).

Not committed data: a damaged line is skipped (and its window extracted again), never an error.
Only the holder of the writer lock writes here.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from store_format.crc32c import crc32c
from store_format import fileio

CACHE_NAME = "extract.cache"
MODELS_NAME = "extract.models"


def cache_key(cache_id: str, window_text: str) -> str:
    """SHA-256 of `model_sha256 \\n prompt_version \\n window_text` (cache_id holds the first two)."""
    return hashlib.sha256(f"{cache_id}\n{window_text}".encode("utf-8")).hexdigest()


def _valid_result(v) -> bool:
    """The shape consolidate reads; a line from an older prompt or a bug is a cache miss."""
    if not (isinstance(v, dict) and isinstance(v.get("entities"), list)
            and isinstance(v.get("relations"), list)):
        return False
    entities_ok = all(isinstance(e, dict) and isinstance(e.get("name"), str)
                      and isinstance(e.get("type"), str) and isinstance(e.get("description"), str)
                      for e in v["entities"])
    relations_ok = all(isinstance(r, dict) and isinstance(r.get("src"), str)
                       and isinstance(r.get("dst"), str) and isinstance(r.get("rel"), str)
                       and isinstance(r.get("weight"), (int, float)) for r in v["relations"])
    return entities_ok and relations_ok


class ExtractCache:
    """Append-only NDJSON with a CRC per line; loaded whole at open (it is small: one line per
    window of five turns)."""

    def __init__(self, store_dir: os.PathLike | str):
        self.path = Path(store_dir) / CACHE_NAME
        self.entries: dict[str, dict] = {}
        self.skipped = 0
        self._good_end = 0  # byte length up to the last complete line
        if self.path.exists():
            self._load(fileio.read_bytes(self.path))  # a directory: exit 74 naming it

    def _load(self, data: bytes) -> None:
        pos = 0
        while True:
            nl = data.find(b"\n", pos)
            if nl < 0:
                break  # a torn last line (no LF) is dropped before the next append
            line, pos = data[pos:nl], nl + 1
            self._good_end = pos
            body, tab, crc = line.rpartition(b"\t")
            try:
                if not tab or int(crc, 16) != crc32c(body) or len(crc) != 8:
                    raise ValueError
                obj = json.loads(body)
                if not (isinstance(obj, dict) and isinstance(obj.get("k"), str)
                        and len(obj["k"]) == 64 and _valid_result(obj.get("v"))):
                    raise ValueError
            except (ValueError, RecursionError):  # RecursionError: JSON nested too deep
                self.skipped += 1
                continue
            self.entries[obj["k"]] = obj["v"]

    def get(self, key: str) -> dict | None:
        return self.entries.get(key)

    def put(self, key: str, result: dict) -> None:
        """Append one line (flushed to the OS: a `kill -9` loses nothing; power loss at worst a
        tail that the next load drops)."""
        body = json.dumps({"k": key, "v": result}, ensure_ascii=False,
                          separators=(",", ":")).encode("utf-8")
        line = body + b"\t" + f"{crc32c(body):08x}".encode() + b"\n"
        fd = fileio.open_for_append(self.path, create=True)  # OSError -> StoreIOError (exit 74)
        try:
            fileio.truncate(fd, self._good_end, self.path)
            fileio.pwrite_all(fd, line, self._good_end, self.path)
        finally:
            os.close(fd)
        self._good_end += len(line)
        self.entries[key] = result


def model_sha256(store_dir: os.PathLike | str, model_path: os.PathLike | str) -> str:
    """SHA-256 of a model file, remembered in `extract.models` by (path, size, mtime_ns)."""
    from ...models.extractor import file_sha256

    path = str(Path(model_path).resolve())
    st = os.stat(path)
    table_path = Path(store_dir) / MODELS_NAME
    try:
        table = json.loads(table_path.read_text("utf-8"))
        if not isinstance(table, dict):
            table = {}
    except (OSError, ValueError, RecursionError):
        table = {}
    hit = table.get(path)
    if isinstance(hit, dict) and hit.get("size") == st.st_size \
            and hit.get("mtime_ns") == st.st_mtime_ns and isinstance(hit.get("sha256"), str):
        return hit["sha256"]
    digest = file_sha256(path)
    table[path] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest}
    # A full disk gives StoreIOError (exit 74) and leaves no extract.models.tmp behind.
    fileio.atomic_replace(table_path, json.dumps(table, separators=(",", ":")).encode("utf-8"))
    return digest
