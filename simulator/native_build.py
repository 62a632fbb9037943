"""Compile the simulated host's native files with gcc: libnvidia-ml.so.1 (inventory built in), the
static nvidia-smi, the helper programs and the other driver libraries as small real ELF objects."""
from __future__ import annotations

import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from simulator.driver_files import MPS_CLIENT, DriverLibrary
from simulator.host_spec import SimHost, SimulatorError
from simulator.inventory_source import inventory_c_source

CSRC = Path(__file__).resolve().parent / "csrc"
NVML_SOURCES = ("nvml_sim.c", "nvml_device.c", "nvml_mig.c", "nvml_topology.c", "nvml_events.c",
                "nvml_compute_mode.c")


def compiler() -> str:
    for name in (os.environ.get("CC", ""), "gcc", "cc"):
        if name and shutil.which(name):
            return shutil.which(name)
    raise SimulatorError("no C compiler found; install gcc to build a simulated host", "PATH")


def _run(argv: list[str], what: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        detail = next((line for line in done.stderr.splitlines() if "error" in line),
                      done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}")
        raise SimulatorError(f"building {what} failed: {detail}", argv[0])


def write_inventory_source(host: SimHost, build_dir: Path) -> Path:
    path = build_dir / "inventory.c"
    path.write_text(inventory_c_source(host))
    return path


def build_nvml_library(inventory: Path, out: Path) -> None:
    """libnvidia-ml.so.1 from the NVML sources and the host's inventory.c (write_inventory_source)."""
    _run([compiler(), "-shared", "-fPIC", "-O2", "-fvisibility=hidden", "-Wl,-soname,libnvidia-ml.so.1",
          f"-I{CSRC}", *(str(CSRC / s) for s in NVML_SOURCES), str(inventory), "-o", str(out),
          "-lpthread", "-ldl"], "libnvidia-ml.so.1")


def build_nvidia_smi(inventory: Path, out: Path) -> None:
    _run([compiler(), "-static", "-O2", "-DNVMLSIM_STATIC_TOOL", f"-I{CSRC}", str(CSRC / "nvidia_smi.c"),
          *(str(CSRC / s) for s in NVML_SOURCES), str(inventory), "-o", str(out), "-lpthread"], "nvidia-smi")


def build_driver_tool(driver_version: str, out: Path) -> None:
    _run([compiler(), "-static", "-O2", f'-DNVSIM_DRIVER_VERSION="{driver_version}"',
          str(CSRC / "driver_tool.c"), "-o", str(out)], "the driver helper programs")


def build_mps_programs(out_dir: Path) -> None:
    """The simulated MPS: nvidia-cuda-mps-control (daemon and control program) and gct-cuda-mps-client
    (a CUDA program's connection to it), static so that they run in any container rootfs."""
    for source, name in (("mps_control.c", "nvidia-cuda-mps-control"), ("mps_client.c", MPS_CLIENT)):
        _run([compiler(), "-static", "-O2", "-Wall", f"-I{CSRC}", str(CSRC / source), "-o", str(out_dir / name)],
             name)


def can_build_32bit(build_dir: Path) -> bool:
    """32-bit objects need no 32-bit libc when linked with -nostdlib; only the compiler must know -m32."""
    probe = build_dir / "probe32.so"
    done = subprocess.run([compiler(), "-m32", "-shared", "-nostdlib", "-fPIC", str(CSRC / "driver_library.c"),
                           "-o", str(probe)], capture_output=True)
    return done.returncode == 0


def build_driver_libraries(libraries: list[DriverLibrary], host: SimHost, build_dir: Path, lib_dir: Path,
                           bits: int) -> list[Path]:
    """Link every library in `libraries` into lib_dir as `<name>.so.<version>`; returns the files.

    64-bit libraries link against libc like the real ones; 32-bit ones with -nostdlib, since a
    32-bit libc is rarely installed. libcuda carries cuDriverGetVersion with the host's CUDA version.
    """
    arch = ["-m32", "-nostdlib"] if bits == 32 else []
    version = host.driver_version
    stub = build_dir / f"driver_library{bits}.o"
    _run([compiler(), *arch, "-fPIC", "-O2", "-c", str(CSRC / "driver_library.c"), "-o", str(stub)],
         f"{bits}-bit driver libraries")
    libc = []
    if bits == 32:
        # Link against a stand-in libc.so.6 (never installed) so that each library records
        # DT_NEEDED libc.so.6 and ldconfig files it as a libc6 library, like the real ones.
        _run([compiler(), *arch, "-shared", "-Wl,-soname,libc.so.6", str(stub), "-o", str(build_dir / "libc.so.6")],
             "32-bit libc stand-in")
        libc = ["-Wl,--no-as-needed", str(build_dir / "libc.so.6")]

    def link(lib: DriverLibrary) -> Path:
        out = lib_dir / lib.file_name(version)
        objects = [str(stub)]
        if lib.name == "libcuda":
            objects = [str(CSRC / "libcuda.c"), f"-DNVSIM_CUDA_VERSION={host.cuda_version_int}", "-fPIC", "-O2"]
        _run([compiler(), *arch, "-shared", f"-Wl,-soname,{lib.soname(version)}", *objects, *libc,
              "-o", str(out)], lib.file_name(version))
        return out

    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        return list(pool.map(link, libraries))
