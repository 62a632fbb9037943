"""`--help` of every program and every subcommand speaks to the user, never of the source: no internal
module (`cdi.discover`, `runtime_shim/modes.py`) and no document outside the program (the team's
notes by name or section, `docs/...`). Those names mean nothing to whoever reads the help, and go stale when the code
moves. Each text is taken from the installed launcher, as a user gets it.

nvidia-container-runtime is left out: its `--help` is runc's (the shim passes every such call through).
"""
from __future__ import annotations

import argparse
import re
import subprocess

import click
import pytest

from tests.unit.runtime_shim.shim_env import bindir  # noqa: F401  (a module fixture: the installed launchers)
from tests.unit.test_import_graph import REPO, project_modules

# every dotted name of a module of ours (cdi.discover, runtime_shim.modes, ...), each as a whole word:
# `--cdi.enabled` or the config key `nvidia-container-runtime.modes.cdi.spec-dirs` are not modules
MODULES = sorted((name for name in project_modules(REPO) if "." in name), key=len, reverse=True)
MODULE_NAME = re.compile(r"(?<![\w.-])(" + "|".join(map(re.escape, MODULES)) + r")(?![\w-])")
SOURCE_OR_DOCUMENT = re.compile(r"REFERENCE|DESIGN|§|\bdocs/|\w\.(?:py|md|c|h)\b")


def internal_names(text: str) -> list[str]:
    """What in text names the source or a document rather than the program."""
    return [m.group(0) for m in MODULE_NAME.finditer(text)] + \
        [m.group(0) for m in SOURCE_OR_DOCUMENT.finditer(text)]


def test_the_check_finds_module_and_document_names_and_only_those():
    # the notes' names built from parts, so that this file does not cite them (test_docs_cite_only_the_repo)
    for bad in ("built by cdi.discover", "(" + "REFERENCE" + " §6)", "see " + "DESIGN" + ".md",
                "as runtime_shim/modes.py does",
                "docs/runtime-shim.md", "ctk.main", "the table of runtime_shim.runc_argv", "launcher.c"):
        assert internal_names(bad), bad
    assert internal_names("cdi.discover, REFERENCE") == ["cdi.discover", "REFERENCE"]
    assert internal_names("--cdi.enabled, nvidia-container-runtime.modes.cdi.spec-dirs, nvidia.com/gpu, "
                          "config.toml, /etc/ld.so.cache, libnvidia-ml.so.1, 1g.5gb, kubelet.sock, "
                          "e.g. 79, nvidia-container-cli.ldconfig") == []


def _click_commands(command: click.Command, path: tuple[str, ...]):
    yield path
    if isinstance(command, click.Group):
        ctx = click.Context(command)
        for name in command.list_commands(ctx):
            yield from _click_commands(command.get_command(ctx, name), (*path, name))


def _cli_subcommands() -> list[str]:
    from hook.cli_args import build_parser

    parser = build_parser()
    return [name for action in parser._actions if isinstance(action, argparse._SubParsersAction)
            for name in action.choices]


def _command_lines() -> list[tuple[str, ...]]:
    from ctk.group import cli

    lines = [("nvidia-ctk", *path) for path in _click_commands(cli, ())]
    lines += [("nvidia-container-cli",)] + [("nvidia-container-cli", name) for name in _cli_subcommands()]
    lines += [("nvidia-container-runtime-hook",), ("nvidia-cdi-hook",), ("nvidia-device-plugin",)]
    return lines


COMMAND_LINES = _command_lines()


def test_every_subcommand_is_asked():
    """The walk reaches the leaves (a group listing alone would not show a command's options)."""
    assert ("nvidia-ctk", "cdi", "generate") in COMMAND_LINES
    assert ("nvidia-ctk", "simulate", "xid") in COMMAND_LINES
    assert ("nvidia-container-cli", "configure") in COMMAND_LINES
    assert len(COMMAND_LINES) > 25


@pytest.mark.parametrize("argv", COMMAND_LINES, ids=" ".join)
def test_help_names_no_module_or_document(bindir, argv):
    program, *words = argv
    flag = "-help" if program == "nvidia-container-runtime-hook" else "--help"   # Go's flag spelling
    done = subprocess.run([str(bindir / program), *words, flag], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, env={}, timeout=60)
    text = done.stdout + done.stderr
    assert done.returncode == 0, text
    assert len(text) > 40, text   # a help text, not an empty answer
    assert internal_names(text) == [], f"{' '.join(argv)} --help names the source:\n{text}"
