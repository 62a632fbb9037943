"""A simulated host (built once per test session by `nvidia-ctk simulate create`) and its inventory as
cdi.inventory objects read from the marker file, so planning tests need no NVML."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from cdi.inventory import Gpu, Inventory, MigDevice

NVIDIA_CTK = Path(sys.executable).parent / "nvidia-ctk"


def build_host(path: Path) -> Path:
    subprocess.run([str(NVIDIA_CTK), "simulate", "create", str(path), "--gpus", "2", "--mig", "1=1g.5gb,1g.5gb"],
                   check=True, capture_output=True)
    return path


def inventory_of(host: Path) -> Inventory:
    data = json.loads((host / ".nvidia-simulated-host.json").read_text())["inventory"]
    gpus = []
    for g in data["gpus"]:
        migs = tuple(MigDevice(parent_index=g["index"], index=m["index"], uuid=m["uuid"], gi=m["gi"], ci=m["ci"],
                               profile=m["profile"], gi_cap_minor=m["gi_cap_minor"], ci_cap_minor=m["ci_cap_minor"])
                     for m in g["mig_devices"])
        gpus.append(Gpu(index=g["index"], minor=g["minor"], uuid=g["uuid"], name=g["name"], brand="Nvidia",
                        pci_bus_id=g["pci_bus_id"], architecture="Ampere", compute_capability="8.0",
                        mig_enabled=g["mig_enabled"], mig_devices=migs))
    return Inventory(driver_version=data["driver_version"], cuda_version=data["cuda_version"], gpus=tuple(gpus))


def can_build() -> bool:
    return os.geteuid() == 0 and NVIDIA_CTK.exists()
