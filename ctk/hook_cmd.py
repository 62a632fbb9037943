"""`nvidia-ctk hook SUBCOMMAND ...`: NVIDIA's older CDI specs run their createContainer hooks as
`nvidia-ctk hook create-symlinks ...`, `nvidia-ctk hook update-ldcache ...`. That is nvidia-cdi-hook,
the C program inside the launcher, with the same subcommands and flags: the installed nvidia-ctk (a
copy of the launcher) runs it before any Python starts (launcher/launcher.c), so a hook never
imports click and never hands an image's environment to an interpreter. This command is only reached
when the CLI runs as a module (`python -m ctk.main hook ...`), and hands over the same way: exec.
"""
from __future__ import annotations

import os

import click

from ctk.errors import CliError


@click.command("hook", add_help_option=False,
               context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def hook(args: tuple[str, ...]) -> None:
    """Run a CDI hook: nvidia-cdi-hook's subcommands (create-symlinks, update-ldcache) and flags."""
    from cdi.discover import default_hook_path

    path = default_hook_path()
    try:
        os.execv(path, ["nvidia-cdi-hook", *args])
    except OSError as e:
        raise CliError(f"cannot run nvidia-cdi-hook: {e.strerror}", path) from None
