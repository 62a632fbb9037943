"""`nvidia-ctk cdi generate`: a CDI spec for this host's GPUs (thin layer over cdi.generate)."""
from __future__ import annotations

import os
import sys

import click

from ctk.errors import CliError
from ctk.files import make_parent_dirs

FORMATS = ("yaml", "json")


def _format_for(output: str | None, fmt: str | None) -> str:
    """--format, else the output's extension, else YAML (as NVIDIA's tool). A format that contradicts
    the extension is refused: CDI consumers parse by extension."""
    by_extension = None
    if output and output != "-":
        if output.endswith(".json"):
            by_extension = "json"
        elif output.endswith((".yaml", ".yml")):
            by_extension = "yaml"
    if fmt and by_extension and fmt != by_extension:
        raise CliError(f"--format {fmt} does not match the file's extension", output)
    return fmt or by_extension or "yaml"


@click.command()
@click.option("--driver-root", help="Driver root (default: $NVIDIA_CTK_DRIVER_ROOT, else config.toml "
                                    "[nvidia-container-cli] root, else /).")
@click.option("--output", "-o", help="File to write (atomically, mode 0644; missing folders are made, mode 0755); '-' or none: "
                   "stdout.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), help="Output format (default: by the "
              "output's extension, else yaml).")
@click.option("--device-name-strategy", "strategies", multiple=True,
              type=click.Choice(["index", "uuid", "type-index"]),
              help="How devices are named: index (0, 1:0), uuid (GPU-.., MIG-..), type-index (gpu0, "
                   "mig1:0). Repeatable; default: index and uuid.")
@click.option("--vendor", default="nvidia.com", show_default=True, help="CDI vendor of the kind.")
@click.option("--class", "cls", default="gpu", show_default=True, help="CDI class of the kind.")
@click.option("--no-all-device", is_flag=True, help="Do not add the 'all' device.")
@click.option("--device-id", "device_ids", multiple=True,
              help="Describe only this GPU or MIG device (0, 1:0, GPU-.., MIG-.., PCI bus id). Repeatable.")
@click.option("--nvidia-cdi-hook-path", "hook_path",
              help="nvidia-cdi-hook the spec runs (default: the one next to nvidia-ctk, else "
                   "/usr/bin/nvidia-cdi-hook).")
def generate(driver_root, output, fmt, strategies, vendor, cls, no_all_device, device_ids, hook_path) -> None:
    """Generate a CDI spec for the GPUs and MIG devices of this host (or of a driver root)."""
    from cdi.config import load_config
    from cdi.discover import default_hook_path
    from cdi.driver_root import resolve_driver_root
    from cdi.errors import CdiError
    from cdi.generate import generate_spec
    from cdi.nvml import load_inventory
    from cdi.spec import render_spec, write_spec

    yaml_format = _format_for(output, fmt) == "yaml"
    if hook_path is not None and not os.path.isabs(hook_path):
        raise CliError("the hook path must be absolute", "--nvidia-cdi-hook-path")
    try:
        config = load_config()
        cli = config.nvidia_container_cli
        ldconfig = config.host_ldconfig()
        if not cli.ldconfig.startswith("@"):  # allowed for the prestart path, not for a spec's hook
            raise CliError(f"ldconfig {cli.ldconfig!r} is a container path; nvidia-cdi-hook runs only the "
                           "host's ('@/path')", "nvidia-container-cli.ldconfig")
        root = resolve_driver_root(driver_root, cli.root)
        inventory = load_inventory(root)
        spec = generate_spec(root, inventory, vendor=vendor, cls=cls, strategies=strategies,
                             all_device=not no_all_device, device_ids=device_ids,
                             hook_path=hook_path or default_hook_path(), ldconfig=ldconfig,
                             ld_cache=cli.ldcache)
        if output and output != "-":
            make_parent_dirs(output)
            write_spec(spec, output, yaml_format=yaml_format)
        else:
            sys.stdout.write(render_spec(spec, "stdout", yaml_format))
    except CdiError as e:
        raise CliError(e.what, e.where) from None
    except OSError as e:  # the temp file's name would only confuse: name the file asked for
        raise CliError(f"cannot write the spec: {e.strerror or e}", output or "stdout") from None
