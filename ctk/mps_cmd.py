"""`nvidia-ctk mps start|stop|status`: one MPS control daemon per shared GPU or MIG device, with the
limits of its shares as the daemon's defaults (cdi.mps, cdi.mps_daemon; docs/mps.md)."""
from __future__ import annotations

import json

import click

from ctk.errors import CliError

_ROOT_OPTION = click.option("--mps-root", default="/run/nvidia/mps", show_default=True, metavar="DIR",
                            help="Where the daemons' pipe, log and shm folders are kept (one folder per device).")


@click.group()
def mps() -> None:
    """MPS control daemons for GPU shares with enforced limits."""


def _inventory(driver_root: str | None):
    from cdi.driver_root import resolve_driver_root
    from cdi.nvml import load_inventory
    from ctk.info_cmd import _config_root

    root = resolve_driver_root(driver_root, _config_root(driver_root))
    return root, load_inventory(root)


@mps.command()
@click.option("--device", "device_id", required=True, metavar="ID",
              help="The GPU or MIG device: an index, GPU:MIG indices (1:0) or a UUID.")
@click.option("--replicas", type=int, required=True, metavar="N",
              help="Shares of the device: each gets 100/N percent of its threads and 1/N of its memory.")
@_ROOT_OPTION
@click.option("--driver-root", metavar="DIR",
              help="Driver root (default: $NVIDIA_CTK_DRIVER_ROOT, config [nvidia-container-cli] root, /).")
def start(device_id: str, replicas: int, mps_root: str, driver_root: str | None) -> None:
    """Start the MPS control daemon of a device, its limits set for REPLICAS shares; a GPU is set to
    EXCLUSIVE_PROCESS compute mode first (one in PROHIBITED mode is refused)."""
    from cdi import mps_daemon
    from cdi.errors import CdiError
    from cdi.mps import find_device

    try:
        root, inventory = _inventory(driver_root)
        share = mps_daemon.start(root, mps_root, find_device(device_id, inventory), replicas)
    except CdiError as e:
        raise CliError(e.what, e.where) from None
    click.echo(f"MPS control daemon started for {share['uuid']} (device {share['device']}, pid {share['pid']}): "
               f"{share['replicas']} shares of {share['active_thread_percentage']}% threads and "
               f"{share['pinned_mem_limit']} pinned memory")


@mps.command()
@click.option("--device", "device_id", metavar="ID|UUID", help="The device (as given to start, or its UUID).")
@click.option("--all", "stop_all", is_flag=True, help="Stop every daemon under the MPS root.")
@_ROOT_OPTION
def stop(device_id: str | None, stop_all: bool, mps_root: str) -> None:
    """Stop a device's MPS control daemon (quit), unmount its shm and remove its pipe folder; DEFAULT
    compute mode again if start set EXCLUSIVE_PROCESS."""
    from cdi import mps_daemon
    from cdi.errors import CdiError

    if bool(device_id) == stop_all:
        raise CliError("give --device ID or --all", "nvidia-ctk mps stop")
    try:
        rows = mps_daemon.status(mps_root)
        if stop_all:
            uuids = [row["uuid"] for row in rows]
        else:
            uuids = [row["uuid"] for row in rows if device_id in (row["uuid"], str(row.get("device")))]
            if not uuids:
                raise CliError("no MPS control daemon was started for the device", device_id)
        for uuid in uuids:
            mps_daemon.stop(mps_root, uuid)
            click.echo(f"MPS control daemon stopped for {uuid}")
    except CdiError as e:
        raise CliError(e.what, e.where) from None


@mps.command()
@_ROOT_OPTION
@click.option("--format", "output_format", type=click.Choice(["table", "json"]), default="table", show_default=True)
def status(mps_root: str, output_format: str) -> None:
    """List the MPS control daemons and the limits each gives its shares now (asked with get_default_*)."""
    from cdi import mps_daemon
    from cdi.errors import CdiError

    try:
        rows = mps_daemon.status(mps_root)
    except CdiError as e:
        raise CliError(e.what, e.where) from None
    if output_format == "json":
        click.echo(json.dumps(rows, indent=2))
        return
    click.echo(f"{'DEVICE':<8} {'UUID':<42} {'REPLICAS':>8} {'THREADS':>8} {'PINNED MEM':>11} {'PID':>8}  STATE")
    for row in rows:
        if row["running"]:
            threads = f"{row['daemon_active_thread_percentage']:g}%"
            pinned = f"{row['daemon_pinned_mem_limit'] >> 20}M" if row["daemon_pinned_mem_limit"] else "-"
        else:
            threads = pinned = "-"
        click.echo(f"{str(row.get('device', '?')):<8} {row['uuid']:<42} {str(row.get('replicas', '?')):>8} "
                   f"{threads:>8} {pinned:>11} {str(row.get('pid', '?')):>8}  "
                   f"{'running' if row['running'] else 'not running'}")
