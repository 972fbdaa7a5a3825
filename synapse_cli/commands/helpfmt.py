"""How `--help` reads: paragraphs the terminal wraps, and flags without a value placeholder.

Docstrings are wrapped at 100 columns in the source, and rich help keeps their line breaks: at
any other width a sentence breaks in the middle. `tidy` makes each paragraph one line (an
"Example:" line stays a line of its own) and lets the terminal wrap it.
"""
from __future__ import annotations

import inspect

import typer


def unwrap(doc: str | None) -> str | None:
    """`doc` with the line breaks inside each paragraph removed, "Example:" lines kept."""
    if not doc:
        return doc
    paragraphs = []
    for para in inspect.cleandoc(doc).split("\n\n"):
        lines: list[str] = []
        for line in para.splitlines():
            line = line.strip()
            if lines and not line.startswith("Example:"):
                lines[-1] += " " + line
            else:
                lines.append(line)
        paragraphs.append("\n".join(lines))
    return "\n\n".join(paragraphs)


def tidy(app: typer.Typer) -> None:
    """Unwrap the help of `app`, its commands and its sub-apps; drop `<bool>` from flags."""
    if isinstance(app.info.help, str):
        app.info.help = unwrap(app.info.help)
    infos = [*app.registered_commands, *app.registered_groups]
    if app.registered_callback is not None:
        infos.append(app.registered_callback)
    for info in infos:
        if isinstance(getattr(info, "help", None), str):
            info.help = unwrap(info.help)
        callback = getattr(info, "callback", None)
        if callback is not None and callback.__doc__:
            callback.__doc__ = unwrap(callback.__doc__)
        if isinstance(getattr(info, "typer_instance", None), typer.Typer):
            tidy(info.typer_instance)
    _no_flag_type()


def _no_flag_type() -> None:
    """typer >= 0.20 shows a flag's type, `--quiet -q <bool>`, as if it took a value; show
    none for flags (older typer shows none already and lacks this method)."""
    try:
        from typer.core import TyperOption
    except ImportError:  # pragma: no cover - every typer this project supports has it
        return
    original = getattr(TyperOption, "display_type_rich", None)
    if original is None or getattr(original, "synapse_flags", False):
        return

    def display_type_rich(self, ctx):
        return None if self.is_flag else original(self, ctx)

    display_type_rich.synapse_flags = True
    TyperOption.display_type_rich = display_type_rich
