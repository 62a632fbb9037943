"""The simulated GPU host for tests: built by the real `nvidia-ctk simulate create`, and read back from
the marker file it leaves (`.nvidia-simulated-host.json`) as plain data or as cdi.inventory objects, so
tests that plan or discover need no NVML in their own process."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

NVIDIA_CTK = Path(sys.executable).parent / "nvidia-ctk"
MARKER = ".nvidia-simulated-host.json"
DEFAULT_MIG = "1=1g.5gb,1g.5gb"  # GPU 1 in MIG mode with two 1g.5gb devices
MODEL = "NVIDIA A100-SXM4-40GB"    # simulator.models.DEFAULT_MODEL
DRIVER_VERSION = "550.54.15"


def simulate_create(path: Path, gpus: int = 2, mig: str | None = DEFAULT_MIG,
                    imex_channels: int | None = None) -> Path:
    """`nvidia-ctk simulate create PATH` (2 GPUs, MIG on GPU 1 unless mig=None); returns path."""
    argv = [str(NVIDIA_CTK), "simulate", "create", str(path), "--gpus", str(gpus)]
    if imex_channels is not None:
        argv += ["--imex-channels", str(imex_channels)]
    if mig:
        argv += ["--mig", mig]
    subprocess.run(argv, check=True, capture_output=True, text=True)
    return path


def create_in_process(root: Path, gpus: int = 2, mig_options: tuple[str, ...] = (DEFAULT_MIG,),
                      driver_version: str = DRIVER_VERSION) -> dict:
    """The same host built in this process (simulator.host_builder, no launcher needed): an A100 host
    with CUDA 12.4; returns the marker's data (inventory, majors, ...)."""
    from simulator.host_builder import create_simulated_host

    create_simulated_host(str(root), gpus=gpus, model=MODEL, driver_version=driver_version,
                          cuda_version="12.4", mig_options=list(mig_options))
    return read_marker(root)


def read_marker(root: Path) -> dict:
    """Everything the simulator recorded in its marker file, as plain JSON data."""
    return json.loads((root / MARKER).read_text())


def marker_inventory(root: Path) -> dict:
    """The inventory the simulator recorded in its marker file, as plain JSON data."""
    return read_marker(root)["inventory"]


def inventory_from_marker(root: Path):
    """The marker's inventory as a cdi.inventory.Inventory."""
    from cdi.inventory import Gpu, Inventory, MigDevice

    data = marker_inventory(root)
    gpus = []
    for g in data["gpus"]:
        migs = tuple(MigDevice(parent_index=g["index"], index=m["index"], uuid=m["uuid"], gi=m["gi"], ci=m["ci"],
                               profile=m["profile"], gi_cap_minor=m["gi_cap_minor"], ci_cap_minor=m["ci_cap_minor"])
                     for m in g["mig_devices"])
        gpus.append(Gpu(index=g["index"], minor=g["minor"], uuid=g["uuid"], name=g["name"], brand="Nvidia",
                        pci_bus_id=g["pci_bus_id"], architecture="Ampere", compute_capability="8.0",
                        mig_enabled=g["mig_enabled"], mig_devices=migs))
    return Inventory(driver_version=data["driver_version"], cuda_version=data["cuda_version"], gpus=tuple(gpus))
