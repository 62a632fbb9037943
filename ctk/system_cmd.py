"""`nvidia-ctk system create-dev-char-symlinks`: NVIDIA's command (its udev rule and systemd units call
it) making /dev/char/<major>:<minor> links to the NVIDIA device nodes. systemd's device cgroup rules name
char devices through /dev/char, which udev fills for the nodes it knows; the driver makes /dev/nvidia*
itself, so without these links a `DeviceAllow=/dev/char/195:0` (a container engine under systemd's cgroup
driver, after a `systemctl daemon-reload`) loses its GPUs."""
from __future__ import annotations

import fnmatch
import os
import stat

import click

from ctk.errors import CliError, info

# The NVIDIA device nodes under <driver root>/dev, as NVIDIA's command looks for them.
NODE_PATTERNS = ("nvidia[0-9]*", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset",
                 "nvidia-caps/nvidia-cap[0-9]*", "nvidia-caps-imex-channels/channel[0-9]*")


def nvidia_char_devices(dev: str) -> list[tuple[str, int, int]]:
    """(path, major, minor) of every NVIDIA char device node under dev, in name order."""
    found = []
    for pattern in NODE_PATTERNS:
        folder, _, name_pattern = pattern.rpartition("/")
        directory = os.path.join(dev, folder) if folder else dev
        try:
            names = sorted(os.listdir(directory))
        except FileNotFoundError:
            continue
        for name in fnmatch.filter(names, name_pattern):
            path = os.path.join(directory, name)
            st = os.lstat(path)
            if stat.S_ISCHR(st.st_mode):
                found.append((path, os.major(st.st_rdev), os.minor(st.st_rdev)))
    return found


@click.group("system")
def system() -> None:
    """Host set-up that NVIDIA's udev rules and units run."""


@system.command("create-dev-char-symlinks")
@click.option("--driver-root", default="/", show_default=True, help="The root whose /dev holds the NVIDIA nodes.")
@click.option("--dev-char-path", default="/dev/char", show_default=True, help="Where the links are made.")
@click.option("--dry-run", is_flag=True, help="Say which links would be made; make none.")
def create_dev_char_symlinks(driver_root: str, dev_char_path: str, dry_run: bool) -> None:
    """Make /dev/char/<major>:<minor> links to the NVIDIA device nodes (an existing entry is left alone)."""
    if not os.path.isabs(dev_char_path):
        raise CliError("the path must be absolute", "--dev-char-path")
    nodes = nvidia_char_devices(os.path.join(driver_root, "dev"))
    if not nodes:
        raise CliError("no NVIDIA device nodes found (is the driver loaded?)", os.path.join(driver_root, "dev"))
    if not dry_run:
        os.makedirs(dev_char_path, mode=0o755, exist_ok=True)
    for path, major, minor in nodes:
        link = os.path.join(dev_char_path, f"{major}:{minor}")
        target = os.path.relpath(path, dev_char_path)   # as udev's own links: ../nvidia0
        if os.path.lexists(link):
            continue
        if dry_run:
            info(f"would link {link} -> {target}")
            continue
        os.symlink(target, link)
        info(f"linked {link} -> {target}")
