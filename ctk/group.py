"""nvidia-ctk's click group (the program starts in ctk.main).

Each command group lives in its own module and is imported only when it is run, so that
`nvidia-ctk cdi list` does not pay for what `nvidia-ctk simulate` imports.
"""
from __future__ import annotations

import importlib

import click

from ctk.program import configure_logging

# command name -> "module:attribute" of a click command or group
COMMANDS = {
    "cdi": "ctk.cdi_cmd:cdi",
    "config": "ctk.config_cmd:config",
    "hook": "ctk.hook_cmd:hook",
    "info": "ctk.info_cmd:info",
    "mps": "ctk.mps_cmd:mps",
    "simulate": "ctk.simulate_cmd:simulate",
    "runtime": "ctk.runtime_cmd:runtime",
    "system": "ctk.system_cmd:system",
}


class LazyGroup(click.Group):
    """A group whose commands are named in `lazy_commands` (name -> "module:attribute") and imported
    only when run; the table is read at each lookup, so an entry added later is seen."""

    def __init__(self, *args, lazy_commands: dict[str, str], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands = lazy_commands

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(self.lazy_commands)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = self.lazy_commands.get(name)
        if target is None:
            return None
        module, _, attr = target.partition(":")
        return getattr(importlib.import_module(module), attr)


def _print_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    # looked up only when asked: importlib.metadata costs ~20 ms on every other command
    if value and not ctx.resilient_parsing:
        from cdi.version import version_line

        click.echo(version_line("nvidia-ctk"))
        ctx.exit()


@click.group(cls=LazyGroup, lazy_commands=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show the version and exit.")
@click.option("-d", "--debug", is_flag=True, help="Log debug messages to stderr.")
@click.option("-q", "--quiet", is_flag=True, help="Errors only: no warnings, no news lines (overrides --debug).")
def cli(debug: bool, quiet: bool) -> None:
    """NVIDIA Container Toolkit admin CLI (gpu-container-toolkit)."""
    configure_logging(debug, quiet)
