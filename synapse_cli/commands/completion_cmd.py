"""`synapse completion SHELL`: print a tab-completion script; never edits shell files."""
from __future__ import annotations

import typer

from . import output
from .common import JSON_OPTION, QUIET_OPTION, complete
from .exits import USAGE, UserError

SHELLS = ("bash", "zsh", "fish")


def register(app: typer.Typer) -> None:
    app.command("completion")(completion)


def completion(
    shell: str = typer.Argument(..., metavar="bash|zsh|fish", help="The shell to complete for.",
                                autocompletion=complete(*SHELLS)),
    json: bool = JSON_OPTION,
    quiet: bool = QUIET_OPTION,
) -> None:
    """Print the tab-completion script for SHELL on stdout; it changes no file.

    Load it for the current shell with eval, or add that line to your shell's startup file
    yourself (bash: ~/.bashrc, zsh: ~/.zshrc; fish: save it as
    ~/.config/fish/completions/synapse.fish).

    With --json: {"shell": SHELL, "script": ...}.

    Example: eval "$(synapse completion bash)"
    """
    from typer.completion import get_completion_script

    if shell not in SHELLS:
        raise UserError(f"completion {shell!r}: expected one of {', '.join(SHELLS)}", code=USAGE)
    script = get_completion_script(prog_name="synapse", complete_var="_SYNAPSE_COMPLETE",
                                   shell=shell)
    if output.Out.json:
        output.emit({"shell": shell, "script": script})
    else:
        output.text(script + "\n")
