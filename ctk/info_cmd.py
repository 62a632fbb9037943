"""`nvidia-ctk info`: the driver, GPUs and MIG devices that NVML reports for a driver root."""
from __future__ import annotations

import csv
import json
import sys

import click

from ctk.errors import CliError

_CSV_FIELDS = ("kind", "gpu", "mig", "minor", "model", "brand", "uuid", "pci_bus_id", "architecture",
               "compute_capability", "mig_mode", "gi", "ci", "profile", "gi_cap_minor", "ci_cap_minor",
               "memory_total")


def _config_root(driver_root: str | None) -> str | None:
    """config.toml's driver root, read only when neither the flag nor the environment gives one
    (a broken config file must not stop `info --driver-root DIR`)."""
    import os

    from cdi.config import load_config
    from cdi.driver_root import DRIVER_ROOT_ENV

    if driver_root or os.environ.get(DRIVER_ROOT_ENV):
        return None
    return load_config().nvidia_container_cli.root or None


@click.command()
@click.option("--driver-root", metavar="DIR",
              help="Driver root (default: $NVIDIA_CTK_DRIVER_ROOT, config [nvidia-container-cli] root, /).")
@click.option("--format", "output_format", type=click.Choice(["table", "json", "csv"]), default="table",
              show_default=True)
def info(driver_root: str | None, output_format: str) -> None:
    """Show the driver and CUDA versions, every GPU and every MIG device."""
    from cdi.driver_root import resolve_driver_root
    from cdi.errors import CdiError
    from cdi.nvml import load_inventory
    from cdi.record import asdict

    try:
        root = resolve_driver_root(driver_root, _config_root(driver_root))
        inventory = load_inventory(root)
    except CdiError as e:
        raise CliError(e.what, e.where) from None
    simulated = root.is_simulated
    if output_format == "json":
        click.echo(json.dumps({"driver_root": root.path, "simulated": simulated, **asdict(inventory)}, indent=2))
    elif output_format == "csv":
        _write_csv(inventory)
    else:
        _write_table(inventory, root.path, simulated)


def _write_csv(inventory) -> None:
    out = csv.DictWriter(sys.stdout, fieldnames=_CSV_FIELDS, lineterminator="\n")
    out.writeheader()
    for g in inventory.gpus:
        out.writerow({"kind": "gpu", "gpu": g.index, "minor": g.minor, "model": g.name, "brand": g.brand,
                      "uuid": g.uuid, "pci_bus_id": g.pci_bus_id, "architecture": g.architecture,
                      "compute_capability": g.compute_capability,
                      "mig_mode": "enabled" if g.mig_enabled else "disabled", "memory_total": g.memory_total})
        for m in g.mig_devices:
            out.writerow({"kind": "mig", "gpu": g.index, "mig": m.index, "minor": g.minor, "model": g.name,
                          "uuid": m.uuid, "pci_bus_id": g.pci_bus_id, "gi": m.gi, "ci": m.ci,
                          "profile": m.profile, "gi_cap_minor": m.gi_cap_minor, "ci_cap_minor": m.ci_cap_minor,
                          "memory_total": m.memory_total})


def _columns(rows: list[tuple], header: tuple) -> list[str]:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    return ["  ".join(str(v).ljust(w) for v, w in zip(r, widths)).rstrip() for r in [header, *rows]]


def _write_table(inventory, root: str, simulated: bool) -> None:
    kind = " (simulated host)" if simulated else ""
    click.echo(f"Driver root:    {root}{kind}")
    click.echo(f"Driver version: {inventory.driver_version}")
    click.echo(f"CUDA version:   {inventory.cuda_version}")
    click.echo(f"GPUs:           {len(inventory.gpus)}\n")
    if inventory.gpus:
        rows = [(g.index, g.minor, g.name, g.brand, g.uuid, g.pci_bus_id, g.architecture,
                 "Enabled" if g.mig_enabled else "Disabled") for g in inventory.gpus]
        for line in _columns(rows, ("GPU", "MINOR", "MODEL", "BRAND", "UUID", "BUS ID", "ARCH", "MIG")):
            click.echo(line)
    migs = inventory.mig_devices()
    if migs:
        click.echo("")
        rows = [(f"{m.parent_index}:{m.index}", m.gi, m.ci, m.profile, m.uuid, f"{m.gi_cap_minor}/{m.ci_cap_minor}")
                for m in migs]
        for line in _columns(rows, ("MIG", "GI", "CI", "PROFILE", "UUID", "CAP MINORS (GI/CI)")):
            click.echo(line)
