"""An error that the settings and the store paths both raise (their own module, so that
config.py and paths.py do not import each other)."""
from __future__ import annotations


class ConfigError(ValueError):
    """A setting that cannot be used: bad TOML, unknown key, wrong type or range.

    `usage` is true when the value came from a command-line flag (exit 2, not 78)."""

    def __init__(self, message: str, hint: str | None = None, usage: bool = False):
        super().__init__(message)
        self.hint = hint
        self.usage = usage
