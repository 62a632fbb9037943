"""`nvidia-ctk cdi generate`: a CDI spec for this host's GPUs (thin layer over cdi.generate). The options
and the body live in ctk.cdi_generate_run, which ctk.fast_path also runs without click."""
from __future__ import annotations

import click

from ctk import cdi_generate_run as run


def _click_option(option: run.Option):
    names = [option.name, *option.aliases, *([option.short] if option.short else [])]
    kwargs = {"help": option.help}
    if option.flag:
        kwargs["is_flag"] = True
    if option.multiple:
        kwargs["multiple"] = True
    if option.choices:
        kwargs["type"] = click.Choice(option.choices)
    if option.default is not None:
        kwargs["default"] = option.default
        kwargs["show_default"] = option.show_default
    return click.option(*names, option.dest, **kwargs)


def _command(function):
    for option in reversed(run.OPTIONS):
        function = _click_option(option)(function)
    return click.command("generate", help=run.HELP)(function)


@_command
def generate(**params) -> None:
    run.generate(**params)
