"""Where the store and the config file live: flag > environment > XDG default."""
from __future__ import annotations

import os
from pathlib import Path

from .errors import ConfigError


def default_store() -> Path:
    home = os.environ.get("SYNAPSE_HOME")
    if home is not None:
        if not home.strip():
            # `SYNAPSE_HOME="$DIR"` with $DIR unset must not send writes to the default store
            raise ConfigError("SYNAPSE_HOME is set but empty",
                              hint="unset it to use the default store, or name a directory")
        return Path(home).expanduser()  # cron, systemd and .env files pass "~" unexpanded
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "synapse"


def resolve_store(flag: str | os.PathLike | None) -> Path:
    if flag is None:
        return default_store()
    if not isinstance(flag, (str, os.PathLike)):
        raise ConfigError(f"store={flag!r}: expected a path", usage=True)
    if not str(flag).strip():
        raise ConfigError("--store: empty path", usage=True,
                          hint="leave --store out to use $SYNAPSE_HOME or the default store")
    return Path(flag).expanduser()


def config_file() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "synapse" / "config.toml"
