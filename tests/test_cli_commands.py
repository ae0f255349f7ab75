"""The command table ``shardplan --help`` lists without importing any command: each entry matches its command."""

from __future__ import annotations

import importlib
import subprocess
import sys

import typer

from shardplan.cli.app import COMMANDS, app


def test_every_listed_command_lives_in_its_module_and_is_helped_as_listed() -> None:
    for name, entry in COMMANDS.items():
        importlib.import_module(f"shardplan.cli.commands.{entry.module}")
        command = typer.main.get_group(app).commands.get(name)
        assert command is not None, f"{name} is not registered by shardplan.cli.commands.{entry.module}"
        own = " ".join((command.help or "").split())
        assert own.startswith(entry.help.rstrip(".")), f"{name}: the table says {entry.help!r}, the command {own!r}"


def test_help_imports_no_command_module() -> None:
    code = ("import sys; sys.argv = ['shardplan', '--help']\n"
            "from shardplan.cli.main import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.startswith('shardplan.') and m.count('.') >= 1))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = eval(out.strip().splitlines()[-1])  # noqa: S307  (our own subprocess prints a list literal)
    assert not any(m.startswith(("shardplan.cli.commands.", "shardplan.tools")) for m in loaded), loaded
