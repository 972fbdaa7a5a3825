"""The man pages and the README's option reference are generated from the command
definitions; these tests fail when either is stale or a command/option is undocumented."""
from __future__ import annotations

import subprocess
from pathlib import Path

import typer

from synapse_cli.commands import manpages
from synapse_cli.commands.exits import EXIT_CODES
from synapse_cli.commands.main import app

ROOT = Path(__file__).resolve().parents[1]
HINT = "regenerate with: .venv/bin/python -m synapse_cli.commands.manpages man/"


def test_man_pages_are_current():
    pages = manpages.generate()
    on_disk = {p.name: p.read_text() for p in (ROOT / "man").glob("*.1")}
    assert set(on_disk) == set(pages), HINT
    for name, text in pages.items():
        assert on_disk[name] == text, f"man/{name} is stale; {HINT}"


def test_every_command_and_option_is_in_readme_and_man():
    readme = (ROOT / "README.md").read_text()
    assert manpages.readme_reference() in readme, f"README option reference is stale; {HINT}"
    group = typer.main.get_command(app)
    for name, cmd in group.commands.items():
        page = (ROOT / "man" / f"synapse-{name}.1").read_text()
        assert f"synapse {name}" in readme
        cmds = [cmd, *getattr(cmd, "commands", {}).values()]
        for c in cmds:
            for p in c.params:
                if p.param_type_name == "option" and not getattr(p, "hidden", False):
                    assert p.opts[0] in readme, (name, p.opts[0])
                    assert p.opts[0].replace("-", "\\-") in page, (name, p.opts[0])


def test_exit_code_table_in_readme_matches_code():
    readme = (ROOT / "README.md").read_text()
    for code, text in EXIT_CODES.items():
        assert f"| {code} | {text} |" in readme, code


def test_man_renders_every_page_without_warnings():
    for page in sorted((ROOT / "man").glob("*.1")):
        p = subprocess.run(["man", "--warnings=w", "-l", str(page)], capture_output=True,
                           env={"MANWIDTH": "80", "PATH": "/usr/bin:/bin", "MAN_KEEP_FORMATTING": ""})
        assert p.returncode == 0, p.stderr.decode()
        assert p.stderr.decode().strip() == "", (page.name, p.stderr.decode())
        assert b"SYNOPSIS" in p.stdout


def test_wheel_ships_every_man_page(tmp_path):
    """`man synapse recall` works after `pip install`: the pages are data files of the wheel."""
    import sys
    import zipfile

    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path), str(ROOT)], check=True, capture_output=True)
    wheel, = tmp_path.glob("*.whl")
    names = {Path(n).name for n in zipfile.ZipFile(wheel).namelist() if "/share/man/man1/" in n}
    assert names == {p.name for p in (ROOT / "man").glob("*.1")}
