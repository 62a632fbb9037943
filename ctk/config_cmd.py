"""`nvidia-ctk config`: print config.toml, or change keys in it keeping its comments (thin layer over
cdi.config_edit). NVIDIA's rootless docker step is `nvidia-ctk config --set
nvidia-container-cli.no-cgroups --in-place`."""
from __future__ import annotations

import sys

import click

from ctk.errors import CliError


@click.group("config", invoke_without_command=True)
@click.option("--config-file", "--config", "-c", "config_file", metavar="FILE",
              help="The config.toml to read [$NVIDIA_CTK_CONFIG_FILE_PATH, else "
                   "${XDG_CONFIG_HOME:-/etc}/nvidia-container-runtime/config.toml]; missing: an empty one.")
@click.option("--set", "settings", multiple=True, metavar="KEY[=VALUE]",
              help="Set a key, e.g. nvidia-container-runtime.mode=cdi; a bare KEY sets a boolean to true. "
                   "Repeatable.")
@click.option("--set-list-separator", default=",", show_default=True, help="Splits the value of a list key.")
@click.option("--in-place", "-i", is_flag=True, help="Write the result back to the config file (atomically, "
              "keeping its mode and owner).")
@click.option("--output", "-o", metavar="FILE", help="Write the result to FILE [stdout].")
@click.pass_context
def config(ctx, config_file, settings, set_list_separator, in_place, output) -> None:
    """Print the config file with the --set keys changed, or write it (--in-place, --output).
    `config default` prints the built-in defaults."""
    if ctx.invoked_subcommand is not None:
        if config_file or settings or in_place or output:
            raise CliError(f"config's own options do not apply to `config {ctx.invoked_subcommand}`",
                           ctx.invoked_subcommand)
        return
    from cdi.config import config_path
    from cdi.config_edit import check_document, parse_document, parse_setting, render_document, set_key
    from cdi.errors import ConfigError
    from ctk.files import make_parent_dirs
    from runtime_shim.engine_config.common import EngineConfigError, read_config_text, write_atomically

    if in_place and output:
        raise CliError("--in-place and --output cannot be used together", "--output")
    if not set_list_separator:
        raise CliError("the list separator must not be empty", "--set-list-separator")
    source = config_file or config_path()
    try:
        text = read_config_text(source) or ""
        document = parse_document(text, source)
        for setting in settings:
            set_key(document, *parse_setting(setting, set_list_separator), source)
        check_document(document, source)
        result = render_document(document)
        target = source if in_place else output
        if target and target != "-":
            make_parent_dirs(target)
            write_atomically(target, result)
        else:
            sys.stdout.write(result)
    except (ConfigError, EngineConfigError) as exc:
        raise CliError(exc.what, exc.where) from None
    except OSError as exc:
        raise CliError(f"cannot write the config: {exc.strerror or exc}", target) from None


@config.command("default")
@click.option("--output", "-o", metavar="FILE", help="Write the defaults to FILE [stdout].")
def default(output) -> None:
    """Print every key of config.toml with its built-in default (a starting point for a config file)."""
    from cdi.config_edit import default_config_text
    from ctk.files import make_parent_dirs
    from runtime_shim.engine_config.common import write_atomically

    text = default_config_text()
    if output and output != "-":
        try:
            make_parent_dirs(output)
            write_atomically(output, text)
        except OSError as exc:
            raise CliError(f"cannot write the config: {exc.strerror or exc}", output) from None
    else:
        sys.stdout.write(text)
