"""Where the store and the config file live: flag > environment > XDG default."""
from __future__ import annotations

import os
from pathlib import Path


def default_store() -> Path:
    if os.environ.get("SYNAPSE_HOME"):
        return Path(os.environ["SYNAPSE_HOME"])
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "synapse"


def resolve_store(flag: str | os.PathLike | None) -> Path:
    return Path(flag) if flag else default_store()


def config_file() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "synapse" / "config.toml"
