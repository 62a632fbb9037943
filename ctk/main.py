"""nvidia-ctk: the admin CLI.

Each command group lives in its own module and is imported only when it is run, so that
`nvidia-ctk cdi list` does not pay for what `nvidia-ctk simulate` imports.
"""
from __future__ import annotations

import importlib
import sys

import click

from ctk.errors import run_cli

# command name -> "module:attribute" of a click command or group
COMMANDS = {
    "cdi": "ctk.cdi_cmd:cdi",
    "config": "ctk.config_cmd:config",
    "hook": "ctk.hook_cmd:hook",
    "info": "ctk.info_cmd:info",
    "simulate": "ctk.simulate_cmd:simulate",
    "runtime": "ctk.runtime_cmd:runtime",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = COMMANDS.get(name)
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


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show the version and exit.")
@click.option("--debug", is_flag=True, help="Log debug messages to stderr.")
def cli(debug: bool) -> None:
    """NVIDIA Container Toolkit admin CLI (gpu-container-toolkit)."""
    from cdi import log

    def configure_logging() -> None:
        import logging

        handler = logging.StreamHandler()
        handler.setFormatter(log.one_line_formatter("nvidia-ctk: %(levelname)s: %(message)s"))
        logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING, handlers=[handler])

    if debug:
        configure_logging()
    else:  # logging is imported (~3 ms) only if a warning is to be shown: every message goes through cdi.log
        log.configure_on_first_use(configure_logging)


def main(argv: list[str] | None = None) -> int:
    return run_cli(cli, "nvidia-ctk", argv)


if __name__ == "__main__":
    sys.exit(main())
