"""`nvidia-ctk cdi ...`: thin commands over cdi.generate, cdi.validate and cdi.registry.

Subcommands are listed in SUBCOMMANDS and imported only when run, so another module can add one
(e.g. `"generate": "ctk.cdi_generate:generate"`) without touching the others.
"""
from __future__ import annotations

import click

from ctk.errors import CliError
from ctk.group import LazyGroup

# subcommand name -> "module:attribute" of a click command
SUBCOMMANDS = {
    "validate": "ctk.cdi_cmd:validate",
    "list": "ctk.cdi_cmd:list_devices",
    "generate": "ctk.cdi_generate:generate",
    "transform": "ctk.cdi_transform:transform",
}


@click.group(cls=LazyGroup, lazy_commands=SUBCOMMANDS)
def cdi() -> None:
    """Container Device Interface (CDI) specs: generate, validate, list, transform."""


def _message(level: str, text: str) -> None:
    from cdi.errors import message_line

    click.echo(message_line(CliError.prog, level, text), err=True)


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
def validate(files: tuple[str, ...]) -> int:
    """Check CDI spec FILES against the strict schema; report every problem, one line each."""
    from cdi.spec_file import check_spec_file

    bad = 0
    for file in files:
        spec, problems = check_spec_file(file)
        for problem in problems:
            _message("error", str(problem))
        if problems:
            bad += 1
        else:
            click.echo(f"{file}: valid CDI spec (cdiVersion {spec.version}, kind {spec.kind}, "
                       f"{len(spec.devices)} device{'s' if len(spec.devices) != 1 else ''})")
    return 1 if bad else 0


def _configured_spec_dirs() -> tuple[str, ...]:
    from cdi.config import load_config
    from cdi.errors import ConfigError

    try:
        return load_config().cdi.spec_dirs
    except ConfigError as exc:
        raise CliError(exc.what, exc.where) from None


@click.command("list")
@click.option("--spec-dir", "spec_dirs", multiple=True, type=click.Path(file_okay=False),
              help="A directory to search for CDI specs, lowest priority first (repeatable). "
                   "Default: modes.cdi.spec-dirs of config.toml (/etc/cdi, /var/run/cdi).")
def list_devices(spec_dirs: tuple[str, ...]) -> int:
    """List every CDI device (vendor/class=name) with the spec file that defines it.

    Invalid spec files and conflicting devices are reported on stderr; they do not hide the others."""
    from cdi.registry import Registry

    registry = Registry(spec_dirs or _configured_spec_dirs())
    for problem in registry.problems:
        _message("warning", f"skipping invalid spec: {problem}")
    for conflict in registry.conflicts:
        _message("warning", f"conflict, skipped: {conflict}")
    for name in sorted(registry.devices):
        click.echo(f"{name}\t{registry.devices[name].path}")
    return 0
