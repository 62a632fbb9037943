"""A simulated host for the generator tests (2 GPUs, GPU 1 in MIG mode with two MIG devices).

Discovery is tested in-process with the inventory the simulator recorded in its marker (plain data:
no NVML is loaded here); everything that needs NVML runs `nvidia-ctk cdi generate` in a subprocess,
one NVML per process."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from cdi.inventory import Inventory
from tests.support.simulated_host import create_in_process, inventory_from_marker

VERSION = "550.54.15"


@pytest.fixture(scope="session")
def sim_host(tmp_path_factory) -> Path:
    if os.geteuid() != 0:
        pytest.skip("a simulated host has device nodes made with mknod: needs root")
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build a simulated host")
    root = tmp_path_factory.mktemp("gen") / "host"
    create_in_process(root, driver_version=VERSION)
    return root


@pytest.fixture(scope="session")
def sim_inventory(sim_host) -> Inventory:
    return inventory_from_marker(sim_host)
