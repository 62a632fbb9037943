"""A simulated host for the generator tests (2 GPUs, GPU 1 in MIG mode with two MIG devices).

Discovery is tested in-process with the inventory the simulator recorded in its marker (plain data:
no NVML is loaded here); everything that needs NVML runs `nvidia-ctk cdi generate` in a subprocess,
one NVML per process."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from cdi.inventory import Gpu, Inventory, MigDevice
from simulator.host_builder import create_simulated_host
from simulator.models import DEFAULT_MODEL

VERSION = "550.54.15"


def inventory_from_marker(root: Path) -> Inventory:
    data = json.loads((root / ".nvidia-simulated-host.json").read_text())["inventory"]
    gpus = []
    for g in data["gpus"]:
        migs = tuple(MigDevice(parent_index=g["index"], index=m["index"], uuid=m["uuid"], gi=m["gi"], ci=m["ci"],
                               profile=m["profile"], gi_cap_minor=m["gi_cap_minor"], ci_cap_minor=m["ci_cap_minor"])
                     for m in g["mig_devices"])
        gpus.append(Gpu(index=g["index"], minor=g["minor"], uuid=g["uuid"], name=g["name"], brand="Nvidia",
                        pci_bus_id=g["pci_bus_id"], architecture="Ampere", compute_capability="8.0",
                        mig_enabled=g["mig_enabled"], mig_devices=migs))
    return Inventory(driver_version=data["driver_version"], cuda_version=data["cuda_version"], gpus=tuple(gpus))


@pytest.fixture(scope="session")
def sim_host(tmp_path_factory) -> Path:
    if os.geteuid() != 0:
        pytest.skip("a simulated host has device nodes made with mknod: needs root")
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build a simulated host")
    root = tmp_path_factory.mktemp("gen") / "host"
    create_simulated_host(root, gpus=2, model=DEFAULT_MODEL, driver_version=VERSION, cuda_version="12.4",
                          mig_options=["1=1g.5gb,1g.5gb"])
    return root


@pytest.fixture(scope="session")
def sim_inventory(sim_host) -> Inventory:
    return inventory_from_marker(sim_host)
